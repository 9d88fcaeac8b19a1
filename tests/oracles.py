"""Wire formats written from the C headers, never through the project's layers: the tests'
independent oracle for what the layers build and dissect."""

import struct

# rdma-core libibverbs/sa.h struct ibv_path_record (= the SA PathRecord in MAD format, 64 bytes,
# network order; wire-formats.md §3): service_id, dgid, sgid, dlid, slid, flowlabel word,
# hop_limit, tclass, reversible_numpath, pkey, qosclass_sl, mtu, rate, packetlifetime,
# preference, reserved.
IBV_PATH_RECORD = struct.Struct("!Q16s16sHHIBBHHBBBB6s")
assert IBV_PATH_RECORD.size == 64
