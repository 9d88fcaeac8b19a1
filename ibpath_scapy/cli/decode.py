"""`ibpath decode FILE [--format text|json] [--as blob]`."""

from __future__ import annotations

import sys
from typing import Iterator

from ..engines import fast
from ..engines.scapy.decode import Decoder, DecodeStats, decode_file
from ..facts import public, public_json
from ..engines.scapy.gcpace import paced
from ..engines.fast import FastDecoder, decode_file_fast
from ..capture.pcapio import CaptureError, Input
from ..facts.render import frame_text


def add_parser(sub) -> None:
    p = sub.add_parser("decode", help="decode every MAD, netlink message and blob in a capture",
                       description="Decode every IB MAD (RoCEv2, native IB/ERF, exported PDU), "
                       "RDMA netlink message and blob in FILE. Exit status: 0 all frames decoded, "
                       "1 a frame carries an error (malformed, CRC mismatch, a blob problem, "
                       "reserved bits; each reported) or a link type was not decoded, 2 FILE "
                       "cannot be read.")
    p.add_argument("file", help="a pcap, a pcapng, or a raw blob file (rdma_set_option optval "
                   "bytes), told apart by content; '-' reads a pcap or pcapng stream from "
                   "standard input")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--as", dest="as_kind", choices=("blob",),
                   help="blob: read FILE as a raw blob whatever its content")
    p.set_defaults(func=run)


def has_error(rec) -> bool:
    """Whether a decoded record (a fact, or as facts.public shows it) reports a problem
    (exit status 1): malformed, an error list, a link type not decoded, zero ICRCs among
    computed ones."""
    return bool(rec.get("errors") or rec.get("error") or rec.get("malformed"))


def records(src: Input, as_blob: bool = False) -> tuple[Decoder, Iterator]:
    """The decoder and the records of src (the decoder's facts; json_line and text_lines
    show them as facts.public does), read as the audit reads them: through the fast path
    (ibpath_scapy.engines.fast: the same records, frames it does not take through the Scapy layers)
    unless IBPATH_FASTPATH=0, then every frame through the Scapy layers."""
    if fast.enabled():
        decoder = FastDecoder()
        return decoder, decode_file_fast(src, decoder, as_blob=as_blob)
    decoder = Decoder()
    return decoder, decode_file(src, decoder, as_blob=as_blob)


def json_line(rec) -> str:
    """A record as a line of --format json: json.dumps(public(rec)), made from the facts."""
    return public_json(rec) + "\n"


def text_lines(rec) -> str:
    """A record as --format text shows it, its lines each ended by a newline."""
    return "\n".join(frame_text(public(rec))) + "\n"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(s: DecodeStats) -> str:
    """Decode's closing line on stderr (after the file's name): what the frames were, the
    counts that are not zero past the first three."""
    parts = [_count(s.frames, "frame", "frames"), _count(s.mad_frames, "MAD frame", "MAD frames"),
             f"{s.malformed} malformed"]
    parts += [_count(n, one, many) for n, one, many in (
        (s.netlink_frames, "RDMA netlink frame", "RDMA netlink frames"),
        (s.blob_frames, "blob frame", "blob frames"),
        (s.by_kind.get("ucma", 0), "ucma command", "ucma commands"),
        (s.by_kind.get("acm", 0), "ACM message", "ACM messages"),
        (s.crc_errors, "with a CRC error", "with CRC errors"),
        (s.rmpp_dropped, "RMPP segment dropped (resent)", "RMPP segments dropped (resent)"))
        if n]
    if s.undecoded:
        parts.append(s.undecoded_text())
    return ", ".join(parts)


# records written at once (a live capture: each as it comes)
CHUNK = 256


@paced()  # the reports too are written without walking the records again (gcpace)
def run(args) -> int:
    out = sys.stdout
    bad = 0
    show = json_line if args.format == "json" else text_lines
    chunk: list[str] = []
    try:
        with Input(args.file) as src:
            decoder, recs = records(src, as_blob=args.as_kind == "blob")
            n = 1 if src.stream else CHUNK
            try:
                for rec in recs:
                    bad += has_error(rec)
                    chunk.append(show(rec))
                    if len(chunk) >= n:
                        out.write("".join(chunk))
                        chunk.clear()
                        if src.stream:
                            out.flush()
            finally:  # what was decoded before an error, written before it is reported
                if chunk:
                    out.write("".join(chunk))
    except CaptureError as exc:
        out.flush()
        print(f"ibpath: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"ibpath: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{args.file}: {summary(decoder.stats)}", file=sys.stderr)
    return 1 if bad else 0
