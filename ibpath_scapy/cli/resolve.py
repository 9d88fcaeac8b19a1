"""`ibpath resolve DGID [--sgid GID] [--pkey P] [--sl N] [--service-id ID] [--layout
auto|single|seed] [--kernel PROFILE] [-o BLOB] [--record OUT.pcapng] [--format text|json]`:
the seed's resolver asking the real SA (resolve/)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys

from ..facts.kernelview import PROFILE_NAMES
from ..resolve.kernel import choose
from ..resolve.live import BadAnswer, LiveSA, SATimeout
from ..resolve.recording import write_recording
from ..resolve.report import outcome_dict, outcome_lines
from ..resolve.run import EXIT_NO_SA, EXIT_SA_ERROR, LAYOUT_CHOICES, Outcome, resolve
from ..resolve.umad import IBACM_RETRIES, IBACM_TIMEOUT_MS, SaPort, UmadError, UmadTransport


def _gid(text: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a GID (IPv6 notation): {text!r}") from None


def _bounded(name: str, lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            n = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} is not a number: {text!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{name} {text} is outside {lo}..{hi:#x}")
        return n
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "resolve", help="the seed's resolver asking the SA for a path array (libibumad)",
        description="Ask the SA for the FORWARD path to DGID as the 2009 seed thread's "
        "rdma_getaddrinfo resolver would (PathRecord Get: SGID, DGID, P_Key, NumbPath 1); a "
        "reversible answer is handed over as one GMP|PRIMARY|BIDIRECTIONAL record, otherwise "
        "a reversible GMP path (Reversible component) and the return path (GIDs swapped) are "
        "asked and three records handed over. Queries go through libibumad on the port "
        "saquery would use (--ca/--port to choose), to the port's SM LID, with ibacm's "
        "timeout and retries. The path array is shown with every kernel profile's view of "
        "it. Exit status: 0 a path array, 1 the SA answered with an error, 2 no answer from "
        "the SA (or it could not be asked).")
    p.add_argument("dgid", type=_gid, metavar="DGID", help="destination port GID")
    p.add_argument("--sgid", type=_gid, metavar="GID",
                   help="source GID (default: the local port's GID 0)")
    p.add_argument("--pkey", type=_bounded("P_Key", 0, 0xFFFF), default=0xFFFF, metavar="P",
                   help="P_Key of the queries (default 0xffff)")
    p.add_argument("--sl", type=_bounded("SL", 0, 15), metavar="N",
                   help="ask for paths of this SL (the SL component)")
    p.add_argument("--service-id", type=_bounded("ServiceID", 0, (1 << 64) - 1), metavar="ID",
                   help="ask with this ServiceID (both of its ComponentMask bits)")
    p.add_argument("--layout", choices=LAYOUT_CHOICES, default="auto",
                   help="auto: what the kernel profile takes (one 0x2b record for a "
                   "reversible answer); single: one 0x2b record always; seed: 0x0a, 0x12, "
                   "0x2b always (default auto)")
    p.add_argument("--kernel", choices=PROFILE_NAMES, metavar="PROFILE",
                   help="build for this kernel profile (default: what the running kernel's "
                   f"rdma_set_option takes); one of {', '.join(PROFILE_NAMES)}")
    p.add_argument("-o", "--output", metavar="BLOB", help="write the path array here (raw)")
    p.add_argument("--record", metavar="OUT.pcapng",
                   help="write the SA exchange and the path array as a recording")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--ca", metavar="NAME", help="the device (default: saquery's choice)")
    p.add_argument("--port", type=_bounded("port", 1, 255), default=0, metavar="N",
                   help="the device's port (default: its first active one)")
    p.add_argument("--timeout", type=_bounded("timeout", 1, 600_000), default=IBACM_TIMEOUT_MS,
                   metavar="MS", help=f"SA timeout per try (default {IBACM_TIMEOUT_MS}, ibacm's)")
    p.add_argument("--retries", type=_bounded("retries", 0, 100), default=IBACM_RETRIES,
                   metavar="N", help=f"SA retries (default {IBACM_RETRIES}, ibacm's)")
    p.set_defaults(func=run)


def _err(msg: str, status: int) -> int:
    print(f"ibpath resolve: {msg}", file=sys.stderr)
    return status


def _fields(args) -> dict:
    fields = {"pkey": args.pkey}
    if args.sl is not None:
        fields["sl"] = args.sl
    if args.service_id is not None:
        fields["service_id"] = args.service_id
    return fields


def run(args) -> int:
    target = choose(args.kernel)
    try:
        port = SaPort(args.ca, args.port)
    except UmadError as exc:
        return _err(str(exc), EXIT_NO_SA)
    try:
        info = port.info
        if not info.sm_lid:
            return _err(f"{info.ca} port {info.port} has no SM LID (state {info.state}): no "
                        "subnet manager has configured it, there is no SA to ask", EXIT_NO_SA)
        transport = UmadTransport(port, args.timeout, args.retries)
        sa = LiveSA(transport, args.sgid or info.gid, args.dgid, **_fields(args))
        try:
            out = resolve(sa, args.layout, target)
        except SATimeout as exc:
            role, tid = exc.args
            return _fail(args, port, sa, "timeout", EXIT_NO_SA,
                         f"no answer from the SA at LID {info.sm_lid} to the {role} query (tid "
                         f"0x{tid:08x}, sent with a timeout of {args.timeout} ms and "
                         f"{args.retries} retries, ibacm's): {transport.failure}")
        except BadAnswer as exc:
            return _fail(args, port, sa, "bad-answer", EXIT_SA_ERROR, str(exc))
        except UmadError as exc:
            return _fail(args, port, sa, "umad", EXIT_NO_SA, str(exc))
        problem = _save(args, port, out)
        if problem:
            return _err(problem, EXIT_NO_SA)
        _print(args, out, info.to_dict())
        if out.records is None:
            bad = out.failed
            return _err(f"the SA answered the {bad.role} query for {bad.query.sgid} → "
                        f"{bad.query.dgid} with status 0x{bad.status:04x} "
                        f"({bad.status_text()}): no path array", EXIT_SA_ERROR)
        return out.exit_status
    finally:
        port.close()


def _fail(args, port: SaPort, sa: LiveSA, kind: str, status: int, msg: str) -> int:
    """A resolution that ended without an SA answer to judge: the recording of what was
    sent, the JSON object with the error (--format json), the one line."""
    problem = _save_record(args, port, None, "")
    if args.format == "json":
        print(json.dumps({"sgid": sa.sgid, "dgid": sa.dgid, "error": {
            "kind": kind, "message": msg}}, indent=2))
    return _err(msg + (f"; {problem}" if problem else ""), status)


def _save_record(args, port: SaPort, out: Outcome | None, what: str) -> str | None:
    if not args.record:
        return None
    blob = out.blob if out is not None else None
    try:
        write_recording(args.record, port.calls, blob, what)
    except OSError as exc:
        return f"{args.record}: cannot write the recording: {exc.strerror}"
    return None


def _save(args, port: SaPort, out: Outcome) -> str | None:
    """Write -o and --record; a message when one cannot be written."""
    if args.output and out.blob:
        try:
            with open(args.output, "wb") as f:
                f.write(out.blob)
        except OSError as exc:
            return f"{args.output}: cannot write the path array: {exc.strerror}"
    what = (f"path array for {out.sgid} → {out.dgid}, layout {out.layout} "
            f"(--layout {out.layout_asked}, --kernel {out.target.profile})")
    return _save_record(args, port, out, what)


def _print(args, out: Outcome, port: dict) -> None:
    if args.format == "json":
        print(json.dumps(outcome_dict(out, port), indent=2))
        return
    for line in outcome_lines(out, port):
        print(line)
    if args.output and out.blob:
        print(f"wrote {args.output} ({len(out.blob)} bytes)")
    if args.record:
        print(f"wrote {args.record}")
