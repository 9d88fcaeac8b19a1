"""`ibpath acm serve --scenario NAME [--socket PATH | --port N]`: a stand-in ibacm
(acmserve.py) and `ibpath acm plan NAME|blobs`: what it would answer."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from ..acmserve import DEFAULT_SOCKET, IBACM_SA_TIMEOUT_S, AcmServeError, StandIn, plan_for


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n} is outside 1..65535")
    return n


def add_parser(sub) -> None:
    p = sub.add_parser(
        "acm", help="a stand-in ibacm answering librdmacm with a craft scenario's paths",
        description="librdmacm asks ibacm for the route of every rdma_resolve_route on an IB "
        "transport port (rxe included) and hands the answer's paths to rdma_set_option. "
        "`serve` answers those requests with what a craft scenario's resolver handed over.")
    kinds = p.add_subparsers(dest="acm_command", required=True)
    s = kinds.add_parser(
        "serve", help="answer ACM requests on ibacm's socket until interrupted",
        description="Answer RESOLVE with the path array the scenario's resolver handed over "
        "(one ACM path entry per record, its flags as given), or with the scenario's error: "
        "an SA error status (as ibacm maps it, status >> 8), or ETIMEDOUT when its SA never "
        "answered. ib_acme's PERF_QUERY and EP_QUERY are answered as ibacm answers them, in "
        "network order: the stand-in's counters (RESOLVEs, ENODATA and other failed answers) "
        "and its one endpoint (port 1; the scenario's local GID, P_Key and address, and every "
        "source address it answered for). The scenario's local "
        "and remote GIDs are replaced by the requester's source and destination (RoCE GIDs of "
        "its IP addresses) unless --keep-gids. Each exchange is logged as one JSON line. "
        "Exit status: 0 after Ctrl-C/SIGTERM, 2 when it cannot start.")
    s.add_argument("--scenario", required=True, metavar="NAME", help="an `ibpath craft` scenario")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--socket", default=DEFAULT_SOCKET, metavar="PATH",
                       help=f"unix socket to listen on (default {DEFAULT_SOCKET}, where "
                       "librdmacm connects)")
    where.add_argument("--port", type=_port, metavar="N",
                       help="listen on TCP 127.0.0.1:N instead (librdmacm uses it when "
                       "/run/ibacm.port holds N)")
    s.add_argument("--seed", type=int, default=0, help="the scenario's seed (default 0)")
    s.add_argument("--encap", choices=("ib", "rocev2"),
                   help="the scenario's encapsulation (default rocev2 where it allows it)")
    s.add_argument("--keep-gids", action="store_true",
                   help="answer the scenario's GIDs as they are")
    s.add_argument("--log", metavar="FILE", help="write the JSON lines here (default stdout)")
    s.add_argument("--pcap", metavar="FILE",
                   help="also write every message as an ibpath.acm frame (pcapng)")
    s.add_argument("--timeout", type=float, default=IBACM_SA_TIMEOUT_S, metavar="S",
                   help=f"delay before ETIMEDOUT for a scenario whose SA never answered "
                   f"(default {IBACM_SA_TIMEOUT_S:g}, ibacm's 3 tries of 2 s)")
    s.add_argument("--no-answer", action="store_true",
                   help="for such a scenario, answer nothing and close the connection after "
                   "--hold seconds (librdmacm's recv() has no timeout of its own)")
    s.add_argument("--hold", type=float, default=5.0, metavar="S",
                   help="with --no-answer: how long to hold the request (default 5)")
    s.set_defaults(func=run_serve)
    p2 = kinds.add_parser("plan", help="print what `serve` answers for scenarios (JSON)")
    p2.add_argument("scenarios", nargs="+", metavar="NAME|all|blobs",
                    help="scenario names; all: every one; blobs: those that hand over an array")
    p2.set_defaults(func=run_plan)


def _err(msg: str) -> int:
    print(f"ibpath acm: {msg}", file=sys.stderr)
    return 2


def run_serve(args) -> int:
    try:
        plan = plan_for(args.scenario, seed=args.seed, encap=args.encap,
                        sa_timeout=args.timeout)
    except KeyError as exc:
        return _err(exc.args[0])
    log = sys.stdout
    if args.log:
        try:
            log = open(args.log, "a")
        except OSError as exc:
            return _err(f"{args.log}: cannot write the log: {exc.strerror}")
    try:
        server = StandIn(plan, socket_path=args.socket, port=args.port, log=log,
                         pcap=args.pcap, map_endpoints=not args.keep_gids,
                         no_answer=args.no_answer, hold=args.hold)
    except AcmServeError as exc:
        return _err(str(exc))

    def ready():
        # one line on stderr once accepting: scripts wait for "listening"
        print(f"ibpath acm: listening on {server.where}: {plan.describe()}", file=sys.stderr,
              flush=True)

    def stop(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(ready)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if log is not sys.stdout:
            log.close()
    print(f"ibpath acm: {len(server.exchanges)} exchange(s)", file=sys.stderr)
    return 0


def run_plan(args) -> int:
    from ..acmserve import blob_scenarios
    from ..craft.scenarios import SCENARIOS
    names = list(SCENARIOS) if args.scenarios == ["all"] else \
        blob_scenarios() if args.scenarios == ["blobs"] else args.scenarios
    for name in names:
        try:
            plan = plan_for(name)
        except KeyError as exc:
            return _err(exc.args[0])
        print(json.dumps({"scenario": name, "kind": plan.kind, "source": plan.source,
                          "status": plan.status, "sa_status": plan.sa_status,
                          "arrays": [a.hex() for a in plan.arrays],
                          "describe": plan.describe()}))
    return 0
