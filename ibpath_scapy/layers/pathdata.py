"""Flagged path array: the struct ib_path_rec_data[] a resolver hands to the kernel.

Each 72-byte record is a host-order u32 of IB_PATH_* flags, a reserved u32 and a 64-byte
PathRecord in SA wire format. The same array is the optval of
rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, ...) and the payload of the
LS_NLA_TYPE_PATH_RECORD attributes of an RDMA netlink local-service RESOLVE response.

Sources: Linux include/uapi/rdma/ib_user_sa.h (struct ib_path_rec_data, IB_PATH_*; commit
a7ca1f00ed29), rdma-core libibverbs/sa.h (struct ibv_path_data, IBV_PATH_FLAG_*), librdmacm
rdma_cma.h (RDMA_OPTION_IB_PATH) and the 2009 linux-rdma seed thread. wire-formats.md §5.

Capture form: a blob travels in a pcapng next to the traffic that caused it as a Wireshark
exported PDU (LINKTYPE_WIRESHARK_UPPER_PDU, 252) whose EXP_PDU_TAG_DISSECTOR_NAME is
"ibpath.blob" and whose payload is the exact optval bytes. The ibpath Lua plugin registers a
dissector of that name; without it Wireshark shows the bytes as data. A pcapng packet comment
"rdma_set_option=0" or "rdma_set_option=-EINVAL" may carry what the call returned.
"""

from __future__ import annotations

import errno

from scapy.fields import FlagsField, PacketField, PacketListField, StrField, XLEIntField
from scapy.packet import Packet

from ..model.expr import Const, Remaining
from ..model.hints import LengthHint, ListHint
from .ib import EXPORTED_PDU_DISSECTORS, ExportedPDU
from .sa import PathRecord

# IB_PATH_* flags (include/uapi/rdma/ib_user_sa.h; rdma-core sa.h IBV_PATH_FLAG_*).
PATH_FLAGS = {
    0x01: "GMP",
    0x02: "PRIMARY",
    0x04: "ALTERNATE",
    0x08: "OUTBOUND",
    0x10: "INBOUND",
    0x20: "INBOUND_REVERSE",
}
IB_PATH_GMP = 0x01
IB_PATH_PRIMARY = 0x02
IB_PATH_ALTERNATE = 0x04
IB_PATH_OUTBOUND = 0x08
IB_PATH_INBOUND = 0x10
IB_PATH_INBOUND_REVERSE = 0x20
IB_PATH_BIDIRECTIONAL = IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE
KNOWN_FLAGS = 0x3F

# The combinations resolvers and kernels use (wire-formats.md §5, audit-rules.md "Terms").
GMP_PRIMARY_BIDIRECTIONAL = IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL  # 0x2B
PRIMARY_OUTBOUND = IB_PATH_PRIMARY | IB_PATH_OUTBOUND  # 0x0A, seed FORWARD_PRIMARY
PRIMARY_INBOUND = IB_PATH_PRIMARY | IB_PATH_INBOUND  # 0x12, seed RETURN_PRIMARY
PRIMARY_INBOUND_REVERSE = IB_PATH_PRIMARY | IB_PATH_INBOUND_REVERSE  # 0x22, RETURN_PRIMARY_REV
GMP_PRIMARY = IB_PATH_GMP | IB_PATH_PRIMARY  # 0x03
ALTERNATE_BIDIRECTIONAL = IB_PATH_ALTERNATE | IB_PATH_BIDIRECTIONAL  # 0x2C

RECORD_SIZE = 72  # sizeof(struct ib_path_rec_data)
BLOB_DISSECTOR = "ibpath.blob"
SET_OPTION_COMMENT = "rdma_set_option"


def flag_names(flags: int) -> list[str]:
    """The IB_PATH_* names of the bits set in flags, lowest bit first (BIDIRECTIONAL is the
    two bits OUTBOUND and INBOUND_REVERSE, so it is not listed on its own)."""
    return [name for bit, name in PATH_FLAGS.items() if flags & bit]


def flags_text(flags: int) -> str:
    """GMP|PRIMARY|BIDIRECTIONAL style: the combined name where both of its bits are set,
    unknown bits in hex."""
    names = []
    bidir = flags & IB_PATH_BIDIRECTIONAL == IB_PATH_BIDIRECTIONAL
    for bit, name in PATH_FLAGS.items():
        if not flags & bit or (bidir and bit & IB_PATH_BIDIRECTIONAL):
            continue
        names.append(name)
    if bidir:
        names.append("BIDIRECTIONAL")
    if flags & ~KNOWN_FLAGS:
        names.append(f"0x{flags & ~KNOWN_FLAGS:x}")
    return "|".join(names) or "0"


class PathFlagsField(FlagsField):
    """u32 IB_PATH_* flags in host byte order (little-endian on every platform ibpath records)."""

    def __init__(self, name, default):
        names = [PATH_FLAGS.get(1 << bit, f"bit{bit}") for bit in range(32)]
        super().__init__(name, default, -32, names)

    def i2repr(self, pkt, x):
        if x is None:
            return repr(x)
        return f"{flags_text(int(x))} (0x{int(x):02x})"


class PathRecData(Packet):
    """struct ib_path_rec_data (ib_user_sa.h) = struct ibv_path_data (libibverbs/sa.h), 72 bytes.

    flags and reserved are host order; path_record is SA wire format (big-endian, packed).
    """

    name = "PathRecData"
    lua_layer = "pathdata"
    fields_desc = [
        PathFlagsField("flags", GMP_PRIMARY_BIDIRECTIONAL),
        XLEIntField("reserved", 0),
        PacketField("path_record", PathRecord(), PathRecord),
    ]

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        return f"PathRecData {flags_text(int(self.flags))} " + self.path_record.mysummary()


def _next_record(pkt, lst, cur, remain):
    return PathRecData if len(remain) >= RECORD_SIZE else None


class PathArray(Packet):
    """A flagged path array: N × PathRecData (RDMA_OPTION_IB_PATH optval, ucma.c
    ucma_set_ib_path). Bytes past the last whole record are kept in trailing: the kernel
    rejects such an optval with EINVAL (optlen % sizeof(struct ib_path_rec_data))."""

    name = "PathArray"
    lua_layer = "blob"  # the plugin's dissector "ibpath.blob" (exported-PDU name)
    RECORD_SIZE = RECORD_SIZE
    fields_desc = [
        PacketListField("records", [], PathRecData, next_cls_cb=_next_record, max_count=1 << 20),
        StrField("trailing", b""),
    ]
    field_hints = {
        "records": ListHint(count=Remaining() // RECORD_SIZE, stride=Const(RECORD_SIZE),
                            selector=Const(0), classes={0: PathRecData}),
        "trailing": LengthHint(Remaining()),
    }

    @staticmethod
    def plausible(data: bytes) -> bool:
        """Whether bytes that are no capture file can be a raw blob: at least a flags word,
        and the first record's flags below 0x100 (defined flags use 0x3F, so the upper three
        bytes of a real flags word are zero; text and other file formats fail this)."""
        if len(data) < 4:
            return False
        _, flags = PathRecData.fields_desc[0].getfield(None, data[:4])
        return int(flags) < 0x100

    def mysummary(self):
        extra = f" +{len(self.trailing)} bytes" if self.trailing else ""
        return f"PathArray {len(self.records)} record(s){extra}"


# -- crafting helpers ------------------------------------------------------------------------

def path_data(flags: int, path_record: PathRecord, reserved: int = 0) -> PathRecData:
    """One record of a path array."""
    return PathRecData(flags=flags, reserved=reserved, path_record=path_record)


def single_gmp_blob(path: PathRecord) -> PathArray:
    """One GMP|PRIMARY|BIDIRECTIONAL (0x2B) record: what ibacm answers on netlink for
    non-UD queries, ucma_query_path returns, and ucma_set_ib_path requires."""
    return PathArray(records=[path_data(GMP_PRIMARY_BIDIRECTIONAL, path)])


def forward_return_gmp_blob(forward: PathRecord, return_path: PathRecord, gmp: PathRecord, *,
                            return_reversed: bool = False) -> PathArray:
    """The seed's compatible layout for a forward path that is not reversible:
    FORWARD_PRIMARY (0x0A), RETURN_PRIMARY (0x12; RETURN_PRIMARY_REV 0x22 when the return
    path is stored reversed), then a GMP|PRIMARY|BIDIRECTIONAL (0x2B) record that kernels
    which understand only 0x2B fall through to."""
    ret_flags = PRIMARY_INBOUND_REVERSE if return_reversed else PRIMARY_INBOUND
    return PathArray(records=[
        path_data(PRIMARY_OUTBOUND, forward),
        path_data(ret_flags, return_path),
        path_data(GMP_PRIMARY_BIDIRECTIONAL, gmp),
    ])


def apm_blob(primary: PathRecord, alternate: PathRecord) -> PathArray:
    """Primary plus alternate path for APM, the two records the seed says kernels support
    "today": GMP|PRIMARY|BIDIRECTIONAL (0x2B) and ALTERNATE|BIDIRECTIONAL (0x2C)."""
    return PathArray(records=[
        path_data(GMP_PRIMARY_BIDIRECTIONAL, primary),
        path_data(ALTERNATE_BIDIRECTIONAL, alternate),
    ])


def six_path_blob(forward: PathRecord, return_path: PathRecord, gmp: PathRecord,
                  alt_forward: PathRecord, alt_return: PathRecord, alt_gmp: PathRecord, *,
                  compat: bool = True) -> PathArray:
    """The seed's "up to 6 paths": GMP, FORWARD and RETURN for PRIMARY (0x03, 0x0A, 0x12) and
    ALTERNATE (0x05, 0x0C, 0x14). With compat a 0x2B copy of the GMP path closes the array
    so that kernels which take only 0x2B records still find one."""
    records = [
        path_data(GMP_PRIMARY, gmp),
        path_data(PRIMARY_OUTBOUND, forward),
        path_data(PRIMARY_INBOUND, return_path),
        path_data(IB_PATH_GMP | IB_PATH_ALTERNATE, alt_gmp),
        path_data(IB_PATH_ALTERNATE | IB_PATH_OUTBOUND, alt_forward),
        path_data(IB_PATH_ALTERNATE | IB_PATH_INBOUND, alt_return),
    ]
    if compat:
        records.append(path_data(GMP_PRIMARY_BIDIRECTIONAL, gmp))
    return PathArray(records=records)


def blob_pdu(blob: bytes | Packet) -> Packet:
    """The link-type-252 record that carries a blob in a capture (see the module docstring)."""
    payload = PathArray(bytes(blob)) if isinstance(blob, (bytes, bytearray)) else blob
    return ExportedPDU.for_dissector(BLOB_DISSECTOR) / payload


def set_option_comment(ret: int) -> str:
    """pcapng comment for a blob frame: rdma_set_option's return value, errors by name
    (rdma_set_option returns -1 and sets errno; the comment records -errno)."""
    if ret >= 0:
        return f"{SET_OPTION_COMMENT}={ret}"
    name = errno.errorcode.get(-ret)
    return f"{SET_OPTION_COMMENT}=-{name}" if name else f"{SET_OPTION_COMMENT}={ret}"


def parse_set_option_comment(comment: str | None) -> str | None:
    """The value of a 'rdma_set_option=...' comment ('0', '-EINVAL'), or None."""
    for line in (comment or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == SET_OPTION_COMMENT:
            return value.strip()
    return None


EXPORTED_PDU_DISSECTORS[BLOB_DISSECTOR] = PathArray
