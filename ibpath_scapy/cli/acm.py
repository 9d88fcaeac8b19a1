"""`ibpath acm serve --scenario NAME [--socket PATH | --port N]`: a stand-in ibacm
(acmserve.py) and `ibpath acm plan NAME|blobs`: what it would answer."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from ..acm.serve import DEFAULT_SOCKET, IBACM_SA_TIMEOUT_S, AcmServeError, StandIn, plan_for
from ..facts.kernelview import PROFILE_NAMES
from ..resolve.run import LAYOUT_CHOICES


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
        "`serve` answers those requests with what a craft scenario's resolver handed over, or "
        "with --resolve what the seed's resolver gets from the real SA (`ibpath resolve`).")
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
    what = s.add_mutually_exclusive_group(required=True)
    what.add_argument("--scenario", metavar="NAME", help="an `ibpath craft` scenario")
    what.add_argument("--resolve", action="store_true",
                      help="answer each RESOLVE with a live `ibpath resolve` (the seed's "
                      "resolver asking the real SA through libibumad); needs --hosts")
    s.add_argument("--hosts", metavar="FILE",
                   help="with --resolve: 'ADDRESS GID' lines mapping the RESOLVE's addresses "
                   "to GIDs (a source it lacks is the local port's GID)")
    s.add_argument("--layout", choices=LAYOUT_CHOICES, default="auto",
                   help="with --resolve: the layout `ibpath resolve` builds (default auto)")
    s.add_argument("--kernel", choices=PROFILE_NAMES, metavar="PROFILE",
                   help="with --resolve: the kernel profile to build for (default: the "
                   "running kernel's rdma_set_option)")
    s.add_argument("--ca", metavar="NAME", help="with --resolve: the device (default: "
                   "saquery's choice)")
    s.add_argument("--ca-port", type=_port, default=0, metavar="N",
                   help="with --resolve: the device's port (default: its first active one)")
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


def _live(args):
    """(plan, LiveAnswers, SA port) for --resolve; raises AcmServeError."""
    from ..resolve.acm import HostsError, LiveAnswers, read_hosts
    from ..resolve.kernel import choose
    from ..resolve.umad import IBACM_RETRIES, IBACM_TIMEOUT_MS, SaPort, UmadError
    if not args.hosts:
        raise AcmServeError("--resolve needs --hosts FILE (ADDRESS GID lines)")
    try:
        hosts = read_hosts(args.hosts)
        port = SaPort(args.ca, args.ca_port)
    except (HostsError, UmadError) as exc:
        raise AcmServeError(str(exc)) from None
    if not port.info.sm_lid:
        port.close()
        raise AcmServeError(f"{port.info.ca} port {port.info.port} has no SM LID: no subnet "
                            "manager has configured it, there is no SA to ask")
    live = LiveAnswers(port, hosts, choose(args.kernel), layout=args.layout,
                       timeout_ms=IBACM_TIMEOUT_MS, retries=IBACM_RETRIES)
    return live.base_plan(), live, port


def run_serve(args) -> int:
    live = port = None
    try:
        if args.resolve:
            plan, live, port = _live(args)
        else:
            plan = plan_for(args.scenario, seed=args.seed, encap=args.encap,
                            sa_timeout=args.timeout)
    except KeyError as exc:
        return _err(exc.args[0])
    except AcmServeError as exc:
        return _err(str(exc))
    try:
        return _serve(args, plan, live)
    finally:
        if port is not None:
            port.close()


def _serve(args, plan, live) -> int:
    log = sys.stdout
    if args.log:
        try:
            log = open(args.log, "a")
        except OSError as exc:
            return _err(f"{args.log}: cannot write the log: {exc.strerror}")
    try:
        server = StandIn(plan, socket_path=args.socket, port=args.port, log=log,
                         pcap=args.pcap, map_endpoints=not args.keep_gids and live is None,
                         no_answer=args.no_answer, hold=args.hold, live=live)
    except AcmServeError as exc:
        return _err(str(exc))

    def ready():
        # one line on stderr once accepting: scripts wait for "listening"
        what = live.describe() if live is not None else plan.describe()
        print(f"ibpath acm: listening on {server.where}: {what}", file=sys.stderr, flush=True)

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
    from ..acm.serve import blob_scenarios
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
