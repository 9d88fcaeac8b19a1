"""Guest-side scenario runner: sets up soft-RoCE on a veth pair and runs each scenario.

Runs inside the lab guest as PID 1's child (see guestinit.sh), with the Python standard
library; the NETLINK_RDMA recorder is the project's own (`python3 -m ibpath_scapy.cli.main
record netlink`, copied into the guest with the rest of the package).

    python3 guestrun.py SCENARIOS.json OUTDIR RESULT_DEVICE

Layout of OUTDIR, which is written as one tar stream onto RESULT_DEVICE (the raw virtio disk
the host reads back):

    meta.json                 kernel release and version, package versions, timings
    setup/*.pcapng            `rdma link add`, `rdma link`, `rdma dev` recorded (NETLINK_RDMA)
    setup/*.txt               their output
    SCENARIO/wire.pcap        tcpdump of `udp port 4791` on veth0
    SCENARIO/client.json      the test program's record (blob, rdma_set_option result, time)
    SCENARIO/record.pcapng    `ibpath record` of the client (acm and record scenarios)
    SCENARIO/shim.pcapng, strace.pcapng   record-netlink: `rdma dev` seen by both recorders
    SCENARIO/*.log            every command's output

Why one namespace: rxe's UDP tunnel socket lives only in the initial network namespace (6.1),
so both rxe devices sit on the two ends of one veth pair there; accept_local=1 lets each end
take packets whose source address is local to the host.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAB_ROOT = os.path.dirname(os.path.dirname(HERE))  # the directory holding ibpath_scapy/
CMTEST = os.path.join(HERE, "cmtest.py")
IBSERVICE = os.path.join(HERE, "ibservice.py")
CLIENT, SERVER = "10.0.0.1", "10.0.0.2"
IFACES = (("veth0", "rxe0", CLIENT), ("veth1", "rxe1", SERVER))
CAPTURE_IFACE = "veth0"
STEP_TIMEOUT = 60
GUEST_SHIM = os.path.join(LAB_ROOT, "ibpathrec.so")  # runner.GUEST_SHIM, shipped by the host
ACM_SOCKET = "/run/ibacm.sock"  # IBACM_SERVER_PATH: where the guest's librdmacm connects
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


def sh(args: list[str], log: str | None = None, timeout: float = STEP_TIMEOUT,
       check: bool = True) -> subprocess.CompletedProcess:
    """Run a command; its output goes to `log` (and the console when it fails)."""
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=_env())
    if log:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(args)}\n{proc.stdout}[exit {proc.returncode}]\n")
    if check and proc.returncode:
        print(f"ibpath-lab: {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}",
              flush=True)
        raise RuntimeError(f"{args[0]} failed")
    return proc


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = LAB_ROOT
    if os.path.exists(GUEST_SHIM):
        env["IBPATH_RECORD_SHIM"] = GUEST_SHIM  # `ibpath record` without a compiler
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    return env


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def record_rdma(out: str, name: str, args: list[str]) -> None:
    """Run an `rdma` command under the project's NETLINK_RDMA recorder."""
    sh([sys.executable, "-m", "ibpath_scapy.cli.main", "record", "netlink", "-o",
        os.path.join(out, name + ".pcapng"), "--", *args], log=os.path.join(out, name + ".txt"))


def setup(out: str) -> None:
    """Modules, veth pair, addresses, rxe devices (recorded), `rdma link` and `rdma dev`."""
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "setup.log")
    # 6.1's rdma_rxe needs a crc32 shash before it loads, and the generic one is a module
    # there; later kernels have crc32 as a library and no crc32_generic (the host ships it
    # only where the kernel has it).
    if sh(["modprobe", "-n", "crc32_generic"], log, check=False).returncode == 0:
        sh(["modprobe", "crc32_generic"], log)
    for mod in ("veth", "rdma_rxe", "rdma_ucm", "ib_uverbs"):
        sh(["modprobe", mod], log)
    sh(["ip", "link", "set", "lo", "up"], log)
    sh(["ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth1"], log)
    for iface, _rxe, addr in IFACES:
        sh(["ip", "addr", "add", addr + "/24", "dev", iface], log)
        sh(["ip", "link", "set", iface, "up"], log)
    for conf in ("all", "default", "veth0", "veth1"):
        write(f"/proc/sys/net/ipv4/conf/{conf}/accept_local", "1\n")
        write(f"/proc/sys/net/ipv4/conf/{conf}/rp_filter", "0\n")
    for iface, rxe, _addr in IFACES:
        record_rdma(out, f"rdma-link-add-{rxe}", ["rdma", "link", "add", rxe, "type", "rxe",
                                                  "netdev", iface])
    record_rdma(out, "rdma-link", ["rdma", "link"])
    record_rdma(out, "rdma-dev", ["rdma", "dev"])
    sh(["ip", "-d", "addr"], log)
    sh(["ibv_devices"], log)
    sh(["ibv_devinfo", "-v"], log, check=False)
    sh(["ip", "route", "show", "table", "all"], log)


class Tcpdump:
    """tcpdump of RoCEv2 (udp port 4791) on the capture interface, from start to stop."""

    def __init__(self, path: str, log: str):
        self.log = open(log, "w")
        # Debian's tcpdump drops to user tcpdump before opening the file: -Z root keeps root.
        # Without --immediate-mode libpcap hands packets over a ring block at a time, and the
        # SIGINT at the end drops what is still in the ring ("received by filter", not
        # "captured"): the short scenarios then lost all their frames.
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", CAPTURE_IFACE, "-n", "-U", "--immediate-mode", "-Z", "root", "-s", "0", "-w", path,
             "udp port 4791"], stdout=self.log, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()  # "listening on veth0, ..." once the socket is bound
        self.log.write(line)
        if "listening" not in line:
            raise RuntimeError(f"tcpdump did not start: {line.strip()}")

    def stop(self) -> None:
        time.sleep(1.0)
        self.proc.send_signal(signal.SIGINT)
        rest = self.proc.stderr.read()
        self.proc.wait(timeout=STEP_TIMEOUT)
        self.log.write(rest)
        self.log.close()
        captured = re.search(r"(\d+) packets? captured", rest)
        received = re.search(r"(\d+) packets? received by filter", rest)
        if captured and received and captured.group(1) != received.group(1):
            raise RuntimeError(f"tcpdump lost packets: {captured.group(0)}, {received.group(0)}")


def _blob_args(d: str, blob_hex: str) -> list:
    """The test program's --blob argument: the scenario's array written to DIR/blob.bin."""
    path = os.path.join(d, "blob.bin")
    with open(path, "wb") as f:
        f.write(bytes.fromhex(blob_hex))
    return ["--blob", path]


def _server(args: list[str], log: str, ready: str | None) -> tuple[subprocess.Popen, object]:
    f = open(log, "w")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env())
    if ready:
        line = proc.stdout.readline()
        f.write(line)
        if ready not in line:
            raise RuntimeError(f"{args[0]} did not start: {line.strip()}")
    else:
        time.sleep(1.0)  # rping/ucmatose servers print nothing when listening
    return proc, f


def _finish(proc: subprocess.Popen, f) -> int:
    try:
        rest, _ = proc.communicate(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
        rest += "\n[killed after timeout]\n"
    f.write(rest)
    f.close()
    return proc.returncode


def run_scenario(sc: dict, out: str, port: int) -> dict:
    d = os.path.join(out, sc["name"])
    os.makedirs(d, exist_ok=True)
    t0 = time.monotonic()
    if sc["kind"] == "record-netlink":  # no RoCE traffic: no tcpdump
        result = {"name": sc["name"], "kind": sc["kind"], **run_record_netlink(d)}
        result["seconds"] = round(time.monotonic() - t0, 2)
        print(f"ibpath-lab: scenario {sc['name']}: exit {result['client_exit']}, "
              f"{result['seconds']} s", flush=True)
        return result
    dump = Tcpdump(os.path.join(d, "wire.pcap"), os.path.join(d, "tcpdump.log"))
    result: dict = {"name": sc["name"], "kind": sc["kind"]}
    try:
        if sc["kind"] == "blob" or sc["kind"] == "resolve":
            srv = _server([sys.executable, CMTEST, "server", SERVER, str(port)],
                          os.path.join(d, "server.log"), "listening")
            args = [sys.executable, CMTEST, "client", CLIENT, SERVER, str(port), "--record",
                    os.path.join(d, "client.json")]
            if sc["kind"] == "blob":
                args += _blob_args(d, sc["blob"])
            client = sh(args, os.path.join(d, "client.log"), check=False)
            result["client_exit"] = client.returncode
            result["server_exit"] = _finish(*srv)
        elif sc["kind"] == "rping":
            srv = _server(["rping", "-s", "-a", SERVER, "-p", str(port), "-C", "1", "-v"],
                          os.path.join(d, "server.log"), None)
            client = sh(["rping", "-c", "-a", SERVER, "-I", CLIENT, "-p", str(port), "-C", "1",
                         "-v"], os.path.join(d, "client.log"), check=False)
            result["client_exit"] = client.returncode
            result["server_exit"] = _finish(*srv)
        elif sc["kind"] == "ucmatose":
            srv = _server(["ucmatose", "-b", SERVER, "-p", str(port), "-c", "1", "-C", "1"],
                          os.path.join(d, "server.log"), None)
            client = sh(["ucmatose", "-s", SERVER, "-b", CLIENT, "-p", str(port), "-c", "1",
                         "-C", "1"], os.path.join(d, "client.log"), check=False)
            result["client_exit"] = client.returncode
            result["server_exit"] = _finish(*srv)
        elif sc["kind"] == "acm":
            result.update(run_acm(sc, d, port))
        elif sc["kind"] == "record":
            result.update(run_record(sc, d, port))
        else:
            raise RuntimeError(f"unknown scenario kind {sc['kind']!r}")
    finally:
        dump.stop()
    result["seconds"] = round(time.monotonic() - t0, 2)
    # Where the scenario's packets were sent at L2: an unanswered ARP entry (FAILED) shows a
    # destination the kernel took from a blob but that no host on the veth pair owns.
    result["neighbours"] = sh(["ip", "neigh", "show", "dev", CAPTURE_IFACE], check=False).stdout
    print(f"ibpath-lab: scenario {sc['name']}: client exit {result.get('client_exit')}, "
          f"server exit {result.get('server_exit')}, {result['seconds']} s", flush=True)
    return result


def run_acm(sc: dict, d: str, port: int) -> dict:
    """The stand-in ibacm answering with craft scenario sc["craft"] on librdmacm's socket, a
    server, and a client that resolves with no blob of its own (the test program's
    rdma_resolve_route, or rping), recorded by `ibpath record` (its SET_OPTION path arrays
    with the kernel's verdict and its ACM messages)."""
    os.makedirs(os.path.dirname(ACM_SOCKET), exist_ok=True)
    t0 = time.monotonic()
    stand = subprocess.Popen(IBPATH + ["acm", "serve", "--scenario", sc["craft"], "--socket",
                                       ACM_SOCKET, "--log", os.path.join(d, "acm.jsonl"),
                                       "--pcap", os.path.join(d, "acm.pcapng"),
                                       *sc.get("standin_args", ())],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=_env())
    line = stand.stderr.readline()
    out = {"standin_start_seconds": round(time.monotonic() - t0, 2), "standin": line.strip()}
    if "listening" not in line:
        stand.kill()
        raise RuntimeError(f"the stand-in did not start: {line.strip()} "
                           f"{stand.stderr.read()[-500:]}")
    record = IBPATH + ["record", "-o", os.path.join(d, "record.pcapng"), "--"]
    try:
        if sc.get("client") == "ucmatose":
            srv = _server(["ucmatose", "-b", SERVER, "-p", str(port), "-c", "1", "-C", "1"],
                          os.path.join(d, "server.log"), None)
            client = sh(record + ["ucmatose", "-s", SERVER, "-b", CLIENT, "-p", str(port),
                                  "-c", "1", "-C", "1"], os.path.join(d, "client.log"),
                        check=False)
        elif sc.get("client") == "rping":
            srv = _server(["rping", "-s", "-a", SERVER, "-p", str(port), "-C", "1", "-v"],
                          os.path.join(d, "server.log"), None)
            client = sh(record + ["rping", "-c", "-a", SERVER, "-I", CLIENT, "-p", str(port),
                                  "-C", "1", "-v"], os.path.join(d, "client.log"), check=False)
        else:
            # the client's resolution waits for the stand-in (seconds under TCG for a big
            # array, 6 s for an ETIMEDOUT): the server waits longer than its default 20 s
            srv = _server([sys.executable, CMTEST, "server", SERVER, str(port), "--wait", "50"],
                          os.path.join(d, "server.log"), "listening")
            client = sh(record + [sys.executable, CMTEST, "client", CLIENT, SERVER, str(port),
                                  "--record", os.path.join(d, "client.json")],
                        os.path.join(d, "client.log"), check=False)
        out["client_exit"] = client.returncode
        out["server_exit"] = _finish(*srv)
    finally:
        stand.terminate()
        try:
            _, err = stand.communicate(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            stand.kill()
            _, err = stand.communicate()
        write(os.path.join(d, "standin.log"), line + err)
    return out


def run_record(sc: dict, d: str, port: int) -> dict:
    """A plain run (the test program with or without a blob, rping, ucmatose: no ibacm
    answers, so librdmacm's route is the kernel's or the blob) with the client under
    `ibpath record`: its ucma commands, the SET_OPTION blob with the kernel's verdict, the
    QUERY PATH readback. The test program's own report (client.json) stays beside it."""
    record = IBPATH + ["record", "-o", os.path.join(d, "record.pcapng"), "--"]
    out: dict = {}
    if sc.get("client") == "rping":
        srv = _server(["rping", "-s", "-a", SERVER, "-p", str(port), "-C", "1", "-v"],
                      os.path.join(d, "server.log"), None)
        client = sh(record + ["rping", "-c", "-a", SERVER, "-I", CLIENT, "-p", str(port),
                              "-C", "1", "-v"], os.path.join(d, "client.log"), check=False)
    elif sc.get("client") == "ucmatose":
        srv = _server(["ucmatose", "-b", SERVER, "-p", str(port), "-c", "1", "-C", "1"],
                      os.path.join(d, "server.log"), None)
        client = sh(record + ["ucmatose", "-s", SERVER, "-b", CLIENT, "-p", str(port),
                              "-c", "1", "-C", "1"], os.path.join(d, "client.log"),
                    check=False)
    elif sc.get("client") == "ibservice":
        # no connection: the program's ucma commands and the kernel's answers are the run
        client = sh(record + [sys.executable, IBSERVICE, CLIENT, "--record",
                              os.path.join(d, "client.json")], os.path.join(d, "client.log"),
                    check=False)
        return {"client_exit": client.returncode, "server_exit": None}
    else:
        # `ibpath record` starts Python before the client (seconds under TCG): the server
        # waits longer than its default 20 s for the REQ
        srv = _server([sys.executable, CMTEST, "server", SERVER, str(port), "--wait", "50"],
                      os.path.join(d, "server.log"), "listening")
        args = record + [sys.executable, CMTEST, "client", CLIENT, SERVER, str(port),
                         "--record", os.path.join(d, "client.json")]
        if sc.get("blob") is not None:
            args += _blob_args(d, sc["blob"])
        client = sh(args, os.path.join(d, "client.log"), check=False)
    out["client_exit"] = client.returncode
    out["server_exit"] = _finish(*srv)
    return out


def run_record_netlink(d: str) -> dict:
    """`rdma dev` recorded by both NETLINK_RDMA recorders at once: the strace recorder
    (`ibpath record netlink`, outside) traces `ibpath record` (the shim, inside) and the
    `rdma` it runs, so both see the same process's messages (same sequence numbers, same
    port id)."""
    args = IBPATH + ["record", "netlink", "-o", os.path.join(d, "strace.pcapng"), "--",
                     *IBPATH, "record", "-o", os.path.join(d, "shim.pcapng"), "--",
                     "rdma", "dev"]
    # strace dumps every read of the Python it traces (its imports): minutes under TCG
    proc = sh(args, os.path.join(d, "client.log"), timeout=600, check=False)
    # the command's own output, for the capture's .txt (the recorders' lines are on stderr,
    # which sh() merges: `rdma dev` alone prints the device lines)
    plain = sh(["rdma", "dev"], check=False)
    write(os.path.join(d, "rdma-dev.txt"), plain.stdout)
    return {"client_exit": proc.returncode, "server_exit": 0}


def meta() -> dict:
    pkgs = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", "rdma-core",
                           "ibverbs-providers", "librdmacm1", "libibverbs1", "rdmacm-utils",
                           "iproute2", "tcpdump", "strace", "python3", "python3-scapy"],
                          stdout=subprocess.PIPE, text=True).stdout
    with open("/proc/version") as f:
        version = f.read().strip()
    return {"kernel_release": os.uname().release, "kernel_version": version,
            "packages": dict(line.split(" ", 1) for line in pkgs.splitlines() if " " in line)}


def main(argv: list[str]) -> int:
    scenarios_path, out, device = argv
    with open(scenarios_path) as f:
        spec = json.load(f)
    os.makedirs(out, exist_ok=True)
    info = meta()
    info["command"] = spec.get("command")
    t0 = time.monotonic()
    status = 0
    try:
        setup(os.path.join(out, "setup"))
        info["setup_seconds"] = round(time.monotonic() - t0, 2)
        info["scenarios"] = []
        for k, sc in enumerate(spec["scenarios"]):
            try:
                info["scenarios"].append(run_scenario(sc, out, 7470 + k))
            except Exception as exc:  # one broken scenario must not lose the others' results
                info["scenarios"].append({"name": sc["name"], "error": str(exc)})
                print(f"ibpath-lab: scenario {sc['name']} failed: {exc}", flush=True)
                status = 1
    except Exception as exc:
        info["error"] = str(exc)
        print(f"ibpath-lab: setup failed: {exc}", flush=True)
        status = 1
    info["guest_seconds"] = round(time.monotonic() - t0, 2)
    write(os.path.join(out, "meta.json"), json.dumps(info, indent=1) + "\n")
    with open(device, "wb") as dev:
        with tarfile.open(fileobj=dev, mode="w|") as tar:
            tar.add(out, arcname="results")
        dev.flush()
        os.fsync(dev.fileno())
    print(f"ibpath-lab: results written to {device}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
