"""Rules about the capture as read: link types not decoded, ICRC/VCRC verdicts.

The decoders (decode.py, fast/, tshark_engine/) count both as they read and make one record
per link type and one for a capture whose ICRCs are all zero at the end of the file
(assemble.Assembler.finish); these rules turn them, and each frame's CRC errors, into findings.
"""

from __future__ import annotations

from ...facts.problems import CRC_CODES
from ...model import sources
from ..model import rule



@rule("DECODE-UNSUPPORTED", "warning", "frame",
      sources.CATALOGUE + ": a link type is never silently skipped")
def decode_unsupported(rec: dict):
    """Frames of a link type ibpath does not decode: reported once per file and link type with
    the number of frames it covers (none of them was read for MADs, netlink or blobs)."""
    if rec.get("kind") == "unsupported":
        yield [rec["frame"]], str(rec["error"])


# engine.py runs a frame check on a record only if it has one of these keys: these rules can
# fire on few records, and asking each of them about every SA frame costs a generator a rule
decode_unsupported.only_if = ("linktype",)


@rule("CRC-MISMATCH", "error", "frame",
      "IBA 7.8 (ICRC, VCRC); RoCEv2 annex A17.3.4 (ICRC over UDP)")
def crc_mismatch(rec: dict):
    """A frame whose ICRC or VCRC does not match its bytes (error: the bytes are corrupt, so
    a receiving HCA drops the packet and nothing decoded from it can be trusted); zero ICRCs
    among computed ones count as mismatches.

    Severity error, as the rule catalogue defines it ("bytes are corrupt"): the receiver discards
    the packet, so the capture shows a message the peer never got."""
    if rec.get("kind") == "crc":
        if "error" in rec:
            yield rec["frames"], str(rec["error"])
        return
    bad = [p for p in rec.get("errors", ()) if p.code in CRC_CODES]
    if bad:
        yield [rec["frame"]], " and ".join(map(str, bad)) + ": the receiver drops this packet"


crc_mismatch.only_if = ("errors", "icrc_zero")


@rule("CRC-ZERO", "info", "frame", sources.CATALOGUE + ": checks not made are said, once")
def crc_zero(rec: dict):
    """Every ICRC of the capture is zero: the capture path zeroed or did not compute it (some
    capture points do), so ICRCs could not be checked; said once for the file, with its first
    frames."""
    if rec.get("kind") == "crc" and "note" in rec:
        yield rec["frames"], rec["note"]


crc_zero.only_if = ("icrc_zero",)
