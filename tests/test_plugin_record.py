"""The plugin on `ibpath record`'s exported PDUs (ibpath.ucma, ibpath.acm, ibpath.umad): every
field tshark shows equals Scapy's dissection of the same bytes (plugin_oracle.compare), on
every ucma command and response the layers know, with random contents; ACM RESOLVE requests
and responses with every entry type, PERF_QUERY requests and answers, EP_QUERY answers (their
lengths in network order, acm.h; error answers without a body); and every umad message of the
committed recordings of OpenSM and saquery (captures/opensm/*.pcapng, real bytes) behind its
ib_user_mad header."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

from ibpath_scapy.capture.encap import exported_pdu
from ibpath_scapy.layers.acm import (
    ACM_DISSECTOR, ACM_EP_INFO_TYPES, ACM_MSG_EP_LENGTH, ACM_MSG_HDR_LENGTH, AcmEpConfigData,
    AcmHdr, AcmPerfData,
)
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.layers.ucma import (
    RDMA_USER_CM_QUERY_PATH, UCMA_DISSECTOR, UcmaCmdHdr, UcmaQuery,
)
from ibpath_scapy.layers.umad import UMAD_DISSECTOR
from ibpath_scapy.luagen.emit import reachable
from ibpath_scapy.luagen.plugin import CHECKOUT_PLUGIN, RECORDED_SOURCES
from ibpath_scapy.capture.pcapio import PcapNgWriter, read_frames
from ibpath_scapy.record.opensm import umad_calls

from plugin_oracle import assert_no_malformed, compare, field_map, need_tshark, tshark
from test_plugin import PLUGIN_CLASSES

LUA = str(CHECKOUT_PLUGIN)
OPENSM = Path(__file__).resolve().parents[1] / "captures" / "opensm"
EXCLUDE = ("Raw", "Padding", "NoPayload", "MADPadding")
RECORD_CLASSES = reachable([s[0] for s in RECORDED_SOURCES], EXCLUDE)
FMAP = field_map(PLUGIN_CLASSES + [c for c in RECORD_CLASSES if c not in PLUGIN_CLASSES])


def _static_size(cls) -> int:
    return len(bytes(cls()))


def ucma_frames(rng: random.Random) -> list[bytes]:
    """Each bound command with random contents, then its response where it has one."""
    out = []
    for fv, cls in UcmaCmdHdr.payload_guess:
        for _ in range(4):
            body = bytearray(rng.randbytes(_static_size(cls)))
            if cls is UcmaQuery and rng.random() < 0.75:
                struct.pack_into("<I", body, 12, RDMA_USER_CM_QUERY_PATH)
            pkt = UcmaCmdHdr(cmd=fv["cmd"], in_len=len(body), out_len=rng.randrange(1 << 16)) \
                / cls(bytes(body))
            resp = b""
            for _, sub in cls.payload_guess:
                # the response: random bytes of its size (a QUERY PATH response: num_paths
                # records of path data after it)
                n = _static_size(sub)
                resp = rng.randbytes(n)
                if sub.__name__ == "UcmaQueryPathResp":
                    paths = rng.randrange(0, 4)
                    resp = struct.pack("<II", paths, 0) + rng.randbytes(72 * paths)
                break
            out.append(bytes(UcmaCmdHdr(bytes(pkt)[:8] + bytes(body))) + resp)
    return out


def _acm_header(opcode: int, status: int, data: bytes, length: int, tid: int) -> bytes:
    """struct acm_hdr as acm.h and ibacm lay it out: length in host order for RESOLVE, in
    network order for every other opcode (acm.c acm_msg_length); tid as sent."""
    order = "<" if opcode & 0x0F == 0x01 else ">"
    return struct.pack("<BBB3s", 1, opcode, status, data) + struct.pack(order + "H", length) \
        + struct.pack("<Q", tid)


def _entries(rng: random.Random, n: int) -> bytes:
    out = b""
    for _ in range(n):
        kind = rng.choice(sorted(ACM_EP_INFO_TYPES))
        out += struct.pack("<IHH", rng.getrandbits(32), kind, rng.getrandbits(16))
        out += rng.randbytes(64)
    return out


def acm_frames(rng: random.Random) -> list[bytes]:
    out = []
    for opcode in (0x01, 0x81, 0x02, 0x82, 0x83, 0x03):
        for _ in range(4):
            src_out = rng.randrange(10)
            if opcode in (0x01, 0x81):
                body = _entries(rng, rng.randrange(0, 9))
            elif opcode == 0x02:
                body = _entries(rng, rng.choice((0, 1)))
            elif opcode == 0x82:  # src_out counters (acm_perf_msg), or an error answer
                body = rng.randbytes(8 * src_out) if rng.random() < 0.8 else b""
            elif opcode == 0x83:  # struct acm_ep_config_data, addr_cnt names
                n = rng.randrange(4)
                body = (struct.pack(">QBBHHH", rng.getrandbits(64), rng.randrange(1, 3), 2, 0,
                                    rng.getrandbits(16), n)
                        + rng.randbytes(64) + rng.randbytes(64 * n)) if rng.random() < 0.7 else b""
            else:
                body = b""
            data = bytes([src_out]) + rng.randbytes(2)
            msg = _acm_header(opcode, rng.randrange(11), data, ACM_MSG_HDR_LENGTH + len(body),
                              rng.getrandbits(64)) + body
            # a reader's buffer may hold bytes past the message
            out.append(msg + rng.randbytes(rng.choice((0, 0, 5, ACM_MSG_EP_LENGTH))))
    return out


def saquery_umad_calls() -> list:
    """Every umad call of the committed recordings of saquery and OpenSM (captures/opensm/):
    queries and their answers as each side wrote and read them, OpenSM's SMPs too."""
    return [c for p in sorted(OPENSM.glob("saquery-*.pcapng")) + [OPENSM / "opensm.pcapng"]
            for c in umad_calls(p)]


def umad_bytes(c) -> bytes:
    """A umad call's bytes as the recorder took them: struct ib_user_mad_hdr, the message."""
    return bytes(c.header) + c.mad


def write_recorded_sources(path: Path, seed: int = 20) -> None:
    """ucma, ACM and umad exported PDUs, as `ibpath record` writes them, into path."""
    rng = random.Random(seed)
    frames = [(UCMA_DISSECTOR, b) for b in ucma_frames(rng)]
    frames += [(ACM_DISSECTOR, b) for b in acm_frames(rng)]
    frames += [(UMAD_DISSECTOR, umad_bytes(c)) for c in saquery_umad_calls()]
    with PcapNgWriter(str(path)) as w:
        for n, (name, data) in enumerate(frames):
            w.write(exported_pdu(data, name), 252, 1_700_000_000 + n * 0.001)


def test_recorded_sources_equal_scapy_field_for_field(tmp_path):
    need_tshark()
    path = tmp_path / "recorded.pcapng"
    write_recorded_sources(path)
    dissected = [ExportedPDU(f.data) for f in read_frames(str(path))]
    # the layers really were reached (not Raw): every class of the recorded sources appears
    seen = {type(layer).__name__ for p in dissected for layer in p.iterpayloads()}
    assert {"UcmaCmdHdr", "UcmaQueryPathResp", "UcmaEventResp", "UcmaCreateIdResp",
            "AcmHdr", "AcmResolve", "AcmPerfData", "AcmEpConfigData", "UserMad", "MAD",
            "SAHeader"} <= seen
    # and their lists' items: counters, an endpoint's addresses
    assert any(p[AcmPerfData].counters for p in dissected if AcmPerfData in p)
    assert any(p[AcmEpConfigData].addrs for p in dissected if AcmEpConfigData in p)
    n = compare(str(path), LUA, dissected, FMAP)
    assert n > 8000  # 8344 with seed 20
    assert_no_malformed(str(path), LUA)


def test_protocol_and_info_columns(tmp_path):
    need_tshark()
    path = tmp_path / "cols.pcapng"
    with PcapNgWriter(str(path)) as w:
        w.write(exported_pdu(bytes(UcmaCmdHdr() / UcmaQuery()), UCMA_DISSECTOR), 252, 1.0)
        w.write(exported_pdu(bytes(AcmHdr(opcode=0x81)), ACM_DISSECTOR), 252, 2.0)
        w.write(exported_pdu(umad_bytes(saquery_umad_calls()[0]), UMAD_DISSECTOR), 252, 3.0)
    out = tshark(["-r", str(path), "-T", "fields", "-e", "_ws.col.Protocol", "-e",
                  "_ws.col.Info"], LUA).stdout.splitlines()
    assert out[0] == "ibpath ucma\tQUERY"
    assert out[1] == "ibpath acm\tRESOLVE|ACK"
    # umad: the peer, the MAD by method, attribute and TID
    assert re.fullmatch(r"ibpath umad\tLID \d+ QP 1: \w+\(PathRecord\) tid 0x[0-9a-f]{16}",
                        out[2]), out[2]


def test_recorded_sources_identical_in_wireshark_4_4_and_4_6(tmp_path):
    """The same fields, frame for frame, from 4.0 (host) and the 4.4/4.6 chroots of
    tests/wireshark_versions.py (skipped with its reason where they cannot be built)."""
    from test_wireshark_versions import assert_identical, fields_in_every_release
    from wireshark_versions import CHROOT_RELEASES, build_chroot

    need_tshark()
    chroots = {rel: build_chroot(rel) for rel in CHROOT_RELEASES}
    path = tmp_path / "recorded.pcapng"
    write_recorded_sources(path)
    per = fields_in_every_release(path, chroots)
    assert assert_identical(per, lambda i: f"frame {i + 1}") > 2500
