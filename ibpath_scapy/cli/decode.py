"""`ibpath decode FILE [--format text|json]`."""

from __future__ import annotations

import json
import sys

from ..decode import Decoder, decode_file
from ..pcapio import CaptureError
from ..render import frame_text


def add_parser(sub) -> None:
    p = sub.add_parser("decode", help="decode every MAD, netlink message and blob in a capture",
                       description="Decode every IB MAD (RoCEv2, native IB/ERF, exported PDU), "
                       "RDMA netlink message and blob in FILE. Exit status: 0 all frames decoded, "
                       "1 some frames malformed (reported), 2 FILE cannot be read.")
    p.add_argument("file", help="a pcap, a pcapng, or a raw blob file (rdma_set_option optval "
                   "bytes), told apart by content")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def run(args) -> int:
    decoder = Decoder()
    out = sys.stdout
    try:
        for rec in decode_file(args.file, decoder):
            if args.format == "json":
                out.write(json.dumps(rec, sort_keys=False) + "\n")
            else:
                out.write("\n".join(frame_text(rec)) + "\n")
    except CaptureError as exc:
        out.flush()
        print(f"ibpath: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"ibpath: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    s = decoder.stats
    extra = "".join(f", {n} {what}" for n, what in ((s.netlink_frames, "RDMA netlink frames"),
                                                     (s.blob_frames, "blob frames")) if n)
    print(f"{args.file}: {s.frames} frames, {s.mad_frames} MAD frames, {s.malformed} malformed"
          + extra, file=sys.stderr)
    return 1 if s.malformed else 0
