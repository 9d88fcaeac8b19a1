"""Streaming capture reading for the fast path: classic pcap and pcapng in blocks of
pcapio.READ_BLOCK bytes, classified in place, so that a skipped frame costs a header unpack
and a few byte reads and never a copy (pcapng through pcapio.pcapng_classified, the reader
of every path).

Raw blob files are read by pcapio (one Frame) and classified the same way. Errors are
pcapio's, word for word (file, frame, byte offset), raised after every frame before the
damage has been handed over.
"""

from __future__ import annotations

import struct
from typing import Iterator

from .. import pcapio
from ..pcapio import (
    MAX_BLOCK,
    PCAP_MAGICS,
    CaptureError,
    Frame,
    opened,
    pcapng_classified,
    read_input,
    sniff_format,
)
from .prefilter import Prefilter

_PCAP_HDR = 24
_REC_HDR = 16


def classified_frames(src, prefilter: Prefilter, blob_plausible=None,
                      skipped: list | None = None,
                      as_blob: bool = False) -> Iterator[tuple[Frame, object]]:
    """(frame, classification) of every frame the pre-filter does not skip; `skipped[0]`
    counts the others as they pass. src: a path or a pcapio.Input (a stream too)."""
    skipped = skipped if skipped is not None else [0]
    with opened(src) as f:
        kind = "other" if as_blob else sniff_format(f.head(4))
        if kind == "pcapng":
            yield from pcapng_classified(f.name, f, prefilter.classifier, skipped,
                                         prefilter.pcapng_scanner)
            return
        if kind == "pcap":
            yield from _pcap(f.name, f, prefilter, skipped)
            return
        for frame in read_input(f, blob_plausible, as_blob=as_blob):
            cl = prefilter.classifier(frame.linktype)(frame.data, 0, len(frame.data))
            if cl is None:
                skipped[0] += 1
            else:
                yield frame, cl


def _pcap(path: str, f, prefilter: Prefilter, skipped: list) -> Iterator[tuple[Frame, object]]:
    hdr = f.read(_PCAP_HDR)
    if len(hdr) != _PCAP_HDR:
        raise CaptureError(f"{path}: frame 0: truncated pcap file header at byte offset 0 "
                           f"({len(hdr)} of {_PCAP_HDR} bytes)")
    endian, tsres = PCAP_MAGICS[hdr[:4]]
    linktype = struct.unpack(endian + "I", hdr[20:24])[0] & 0x0FFFFFFF
    snaplen = struct.unpack(endian + "I", hdr[16:20])[0]
    limit = max(snaplen, 262144)
    classify = prefilter.classifier(linktype)
    rec_hdr = struct.Struct(endian + "IIII").unpack_from
    incl_at = struct.Struct(endian + "I").unpack_from
    scan = prefilter.pcap_scanner(linktype, incl_at, _REC_HDR)  # runs of data frames
    buf = b""
    base = _PCAP_HDR  # file offset of buf[0]
    pos = 0
    number = 0  # frames before the one at pos
    eof = False
    while True:
        # the bulk: whole records in the buffer, skipped ones cost a length read and the
        # classifier only
        n = len(buf)
        first = number
        while pos + _REC_HDR <= n:
            if scan is not None:
                pos, k = scan(buf, pos, n)
                number += k
                if pos + _REC_HDR > n:
                    break
            incl = incl_at(buf, pos + 8)[0]
            end = pos + _REC_HDR + incl
            if end > n:
                if incl > limit and incl > MAX_BLOCK:
                    skipped[0] += number - first
                    raise CaptureError(f"{path}: frame {number + 1}: record length {incl} at "
                                       f"byte offset {base + pos} is not plausible")
                break
            cl = classify(buf, pos + _REC_HDR, end)
            number += 1
            if cl is None:
                pos = end
                continue
            skipped[0] += number - first - 1
            first = number
            sec, frac, _, orig = rec_hdr(buf, pos)
            start = pos + _REC_HDR
            pos = end
            yield (Frame(number, sec + frac * tsres, linktype, buf[start:end], orig),
                   cl)
        skipped[0] += number - first
        if not eof:
            more = f.read_block(pcapio.READ_BLOCK)
            eof = not more
            base += pos
            buf = buf[pos:] + more
            pos = 0
            continue
        # end of file: what is left is nothing, or damage (pcapio's words)
        avail = len(buf) - pos
        if avail == 0:
            return
        off = base + pos
        if avail < _REC_HDR:
            raise CaptureError(f"{path}: frame {number + 1}: truncated record header at "
                               f"byte offset {off}")
        incl = incl_at(buf, pos + 8)[0]
        if incl > limit and incl > MAX_BLOCK:
            raise CaptureError(f"{path}: frame {number + 1}: record length {incl} at "
                               f"byte offset {off} is not plausible")
        raise CaptureError(
            f"{path}: frame {number + 1}: truncated packet data at byte offset "
            f"{off + _REC_HDR} "
            f"({avail - _REC_HDR} of {incl} bytes)")
