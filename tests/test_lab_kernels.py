"""`ibpath lab --kernel K` (issue 41 item 5): finding, reading and checking the lab's kernels.

No QEMU and no network here. The oracles are the formats' own definitions, written with
struct from their documents: the x86 boot protocol's setup header (Documentation/arch/x86/
boot.rst: "HdrS" at 0x202, kernel_version at 0x20E), the newc cpio header
(Documentation/driver-api/early-userspace/buffer-format.rst) and a module's .modinfo strings;
the kernel images of the lab cache when it exists (their release must be the package's); and
the committed lab captures of two kernels, whose recorded results the profile check holds
against the kernel sources' lines.
"""

from __future__ import annotations

import json
import lzma
import struct
from pathlib import Path

import pytest

from conftest import CAPTURES
from ibpath_scapy.lab import kernels, profilecheck
from ibpath_scapy.lab.guest import _modules_cpio, cache_dir
from ibpath_scapy.lab.kernels import KernelError

# names as the Debian archive holds them (apt-cache search, 2026-12-05)
ARCHIVE = ["linux-image-6.1.0-57-amd64", "linux-image-6.1.0-9-amd64",
           "linux-image-6.12.117+deb13-amd64", "linux-image-6.12.107+deb13-amd64",
           "linux-image-6.17.13+deb13-amd64", "linux-image-7.2.13+deb14-amd64",
           "linux-image-7.3.4+deb13-amd64"]


# -- picking a Debian kernel -------------------------------------------------------------------

@pytest.mark.parametrize("spec, want", [
    ("6.1", "linux-image-6.1.0-57-amd64"),          # the newest 6.1, not 6.12
    ("6.1.0-9", "linux-image-6.1.0-9-amd64"),
    ("6.12", "linux-image-6.12.117+deb13-amd64"),    # 117 > 107 as numbers, not as text
    ("6", "linux-image-6.17.13+deb13-amd64"),
    ("newest", "linux-image-7.3.4+deb13-amd64"),
    ("linux-image-6.12.107+deb13-amd64", "linux-image-6.12.107+deb13-amd64"),
])
def test_pick(spec, want):
    assert kernels.pick(spec, ARCHIVE) == want


@pytest.mark.parametrize("spec, says", [
    ("6.2", "no Debian kernel 6.2"),
    ("linux-image-5.10.0-1-amd64", "no package linux-image-5.10.0-1-amd64"),
    ("six", "neither a version"),
])
def test_pick_says_why(spec, says):
    with pytest.raises(KernelError, match=says):
        kernels.pick(spec, ARCHIVE)


def test_image_name_keeps_out_other_flavours():
    assert kernels.IMAGE_NAME.match("linux-image-7.3.4+deb13-amd64")
    for name in ("linux-image-7.3.4+deb13-rt-amd64", "linux-image-7.3.4+deb13-cloud-amd64",
                 "linux-image-7.3.4+deb13-amd64-dbg", "linux-image-7.3.4+deb13-amd64-unsigned",
                 "linux-image-amd64"):
        assert not kernels.IMAGE_NAME.match(name), name


class _Fields:
    def __init__(self, depends: str):
        self.depends = depends

    def field(self, package, name):
        assert name == "Depends"
        return self.depends


def test_companions_of_a_split_package():
    """trixie's linux-image-X: the vmlinuz is in linux-binary-X, the modules in
    linux-modules-X (its Depends as apt-cache show printed it)."""
    depends = ("dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, "
               "linux-base-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), "
               "linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), "
               "linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)")
    assert kernels.companions(_Fields(depends), "linux-image-7.3.4+deb13-amd64") == [
        "linux-image-7.3.4+deb13-amd64", "linux-base-7.3.4+deb13-amd64",
        "linux-binary-7.3.4+deb13-amd64", "linux-modules-7.3.4+deb13-amd64"]
    # bookworm's package holds both itself
    assert kernels.companions(_Fields("kmod, linux-base (>= 4.3~), initramfs-tools (>= "
                                      "0.120+deb8u2) | linux-initramfs-tool"),
                              "linux-image-6.1.0-57-amd64") == ["linux-image-6.1.0-57-amd64"]


# -- a user's build ----------------------------------------------------------------------------

def bzimage(release: str, version_at: int = 0x3000) -> bytes:
    """The first bytes of a bzImage as the boot protocol lays them out: setup header magic
    "HdrS" at 0x202, protocol version at 0x206, kernel_version (offset of the version string
    from 0x200) at 0x20E."""
    img = bytearray(0x4000)
    img[0x1FE:0x200] = b"\x55\xaa"
    img[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", img, 0x206, 0x020F)
    struct.pack_into("<H", img, 0x20E, version_at - 0x200)
    text = f"{release} (builder@host) #1 SMP PREEMPT_DYNAMIC".encode() + b"\0"
    img[version_at:version_at + len(text)] = text
    return bytes(img)


def test_bzimage_release(tmp_path):
    p = tmp_path / "bzImage"
    p.write_bytes(bzimage("6.18.0-rc3-ibpath+"))
    assert kernels.bzimage_release(p) == "6.18.0-rc3-ibpath+"
    p.write_bytes(b"\x7fELF" + bytes(0x400))  # a vmlinux, not a bzImage
    with pytest.raises(KernelError, match="not a bzImage"):
        kernels.bzimage_release(p)


@pytest.mark.skipif(not (cache_dir() / "kernels").is_dir(), reason="no lab cache here "
                    "(`ibpath lab build --kernel K` makes one)")
def test_bzimage_release_of_debian_kernels():
    """Every cached Debian kernel's image says the release its package installs under."""
    infos = [json.loads(p.read_text()) for p in (cache_dir() / "kernels").glob("*/kernel.json")]
    if not infos:
        pytest.skip("the lab cache holds no kernel")
    for info in infos:
        image = cache_dir() / "kernels" / info["key"] / info["image"]
        assert kernels.bzimage_release(image) == info["release"]


def modinfo(name: str, depends: str) -> bytes:
    """A module's bytes as far as the lab reads them: its .modinfo strings."""
    return b"\x7fELF" + bytes(60) + b"\0".join(
        [b"license=GPL", f"depends={depends}".encode(), f"name={name}".encode(), b""])


def user_tree(root: Path, release: str, *, compress: bool) -> Path:
    moddir = root / "lib" / "modules" / release
    mods = {"kernel/drivers/infiniband/sw/rxe/rdma_rxe": "ib_core,ip6_udp_tunnel,udp_tunnel",
            "kernel/drivers/infiniband/core/ib_core": "",
            "kernel/drivers/infiniband/core/rdma_ucm": "ib_core,rdma_cm,ib_uverbs",
            "kernel/drivers/infiniband/core/rdma_cm": "ib_core,iw_cm,ib_cm",
            "kernel/drivers/infiniband/core/iw_cm": "ib_core",
            "kernel/drivers/infiniband/core/ib_cm": "ib_core",
            "kernel/drivers/infiniband/core/ib_uverbs": "ib_core",
            "kernel/net/ipv6/ip6_udp_tunnel": "", "kernel/net/ipv4/udp_tunnel": "",
            "kernel/drivers/net/veth": "", "kernel/drivers/unused/other": ""}
    for rel, dep in mods.items():
        data = modinfo(rel.rsplit("/", 1)[1], dep)
        path = moddir / (rel + (".ko.xz" if compress else ".ko"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(lzma.compress(data, format=lzma.FORMAT_XZ) if compress else data)
    # virtio built in, as in Debian's 7.3 config
    (moddir / "modules.builtin").write_text("kernel/drivers/virtio/virtio_pci.ko\n"
                                            "kernel/drivers/block/virtio_blk.ko\n")
    (moddir / "modules.order").write_text("")
    return moddir


@pytest.mark.parametrize("compress", [False, True])
def test_module_closure(tmp_path, compress):
    moddir = user_tree(tmp_path, "7.3.0-ibpath", compress=compress)
    got = kernels.module_closure(moddir, ("rdma_rxe", "rdma_ucm", "ib_uverbs", "veth",
                                          "virtio_pci", "virtio_blk"), ("crc32_generic",))
    names = sorted(kernels.module_name(p) for p in got)
    assert names == ["ib_cm", "ib_core", "ib_uverbs", "ip6_udp_tunnel", "iw_cm", "rdma_cm",
                     "rdma_rxe", "rdma_ucm", "udp_tunnel", "veth"]
    with pytest.raises(KernelError, match="rdma_rxe is neither"):
        (moddir / "kernel/drivers/infiniband/sw/rxe" /
         ("rdma_rxe.ko.xz" if compress else "rdma_rxe.ko")).unlink()
        kernels.module_closure(moddir, ("rdma_rxe",))


def read_newc(data: bytes) -> dict[str, bytes]:
    """name → contents of a newc archive (buffer-format.rst: "070701", 13 eight-digit hex
    fields, the name padded to 4, the data padded to 4)."""
    out, off = {}, 0
    while True:
        assert data[off:off + 6] == b"070701"
        f = [int(data[off + 6 + 8 * i: off + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = f[6], f[11]
        name = data[off + 110: off + 110 + namesize - 1].decode()
        off += 110 + namesize
        off += -off % 4
        if name == "TRAILER!!!":
            return out
        out[name] = data[off: off + size]
        off += size + (-size % 4)


def test_modules_archive_stores_modules_uncompressed(tmp_path):
    moddir = user_tree(tmp_path / "build", "7.3.0-ibpath", compress=True)
    mods = kernels.module_closure(moddir, ("rdma_rxe", "veth"))
    _modules_cpio(tmp_path / "m.cpio", moddir, mods)
    files = read_newc((tmp_path / "m.cpio").read_bytes())
    base = "usr/lib/modules/7.3.0-ibpath/"
    rxe = files[base + "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko"]
    assert rxe.startswith(b"\x7fELF") and b"depends=ib_core,ip6_udp_tunnel,udp_tunnel" in rxe
    assert not any(n.endswith(".xz") for n in files)
    assert base + "modules.builtin" in files


def test_user_build_checks_release(tmp_path):
    user_tree(tmp_path / "mods", "7.3.0-ibpath", compress=False)
    image = tmp_path / "bzImage"
    image.write_bytes(bzimage("7.3.0-ibpath"))
    k = kernels.user_build(str(image), str(tmp_path / "mods"))
    assert (k.release, k.origin["kind"]) == ("7.3.0-ibpath", "build")
    image.write_bytes(bzimage("7.3.1-other"))
    with pytest.raises(KernelError, match="not one build"):
        kernels.user_build(str(image), str(tmp_path / "mods"))
    with pytest.raises(KernelError, match="--modules DIR"):
        kernels.user_build(str(image), None)


def test_cli_modules_without_a_file_kernel(capsys):
    from ibpath_scapy.cli.main import main
    assert main(["lab", "build", "--kernel", "6.1", "--modules", "/nonexistent"]) == 2
    assert "--modules goes with --kernel PATH/bzImage only" in capsys.readouterr().err


# -- the profile check on the committed runs ---------------------------------------------------

RXE = CAPTURES / "rxe"


@pytest.mark.skipif(not (RXE / "lab.json").exists(), reason=f"no lab captures in {RXE}")
def test_profile_check_on_61():
    """Debian 12's 6.1: every blob's verdict and the path the kernel kept (CM REQ, QUERY
    PATH readback) are the ucma profile's."""
    for d in (RXE, RXE / "record"):
        rows = profilecheck.check(d)
        assert rows and not [r for r in rows if r.agrees is False], d
        assert {r.profile for r in rows} == {"ucma"}
    # blob-foreign-dgid sends its REQ nowhere the capture sees: "not seen", not "agrees"
    row = [r for r in profilecheck.check(RXE) if r.scenario == "blob-foreign-dgid"][1]
    assert row.agrees is None


def test_errname():
    assert profilecheck._errname("-EINVAL") == "EINVAL"
    assert profilecheck._errname(-22) == "EINVAL"
    assert profilecheck._errname("0") == "0"
    assert profilecheck._errname(None) is None


# -- two kernels: Debian 12's 6.1 and trixie-backports' 7.3.4 (also as a user's build) ---------

KERNELS = CAPTURES / "lab-kernels"
RUNS = {"debian-6.1.0-57": "6.1.0-57-amd64", "debian-7.3.4": "7.3.4+deb13-amd64",
        "build-7.3.4": "7.3.4+deb13-amd64"}
needs_runs = pytest.mark.skipif(not KERNELS.is_dir(), reason=f"no lab runs in {KERNELS}")
# What include/uapi/rdma/rdma_user_cm.h and the two kernels' ucma.c/cma.c say of each write of
# lab/ibservice.py on rxe (profilecheck.IB_SERVICE_EXPECTED quotes the lines)
IBS_61 = ["EINVAL", "EINVAL", "EINVAL", "ENOSYS", "ENOSYS"]
IBS_73 = ["EINVAL", "EOPNOTSUPP", "EOPNOTSUPP", "ENODATA", "ENOSPC"]


@needs_runs
@pytest.mark.parametrize("run", sorted(RUNS))
def test_no_departure(run):
    lab = json.loads((KERNELS / run / "lab.json").read_text())
    assert lab["kernel_release"] == RUNS[run]
    rows = profilecheck.check(KERNELS / run)
    assert [r for r in rows if r.agrees is False] == []
    ibs = [r.kernel for r in rows if r.scenario == "rec-ib-service"]
    assert ibs == (IBS_61 if run.startswith("debian-6.1") else IBS_73)
    # the committed profiles.json is what the check writes
    assert json.loads((KERNELS / run / "profiles.json").read_text())["rows"] == \
        [r.to_dict() for r in rows]


@needs_runs
def test_a_wrong_claim_departs(tmp_path):
    """The check can fail: 6.1's run, claimed to be a 6.17 kernel, departs on every
    RESOLVE_IB_SERVICE and QUERY(IB_SERVICE) write but the unbound one."""
    import shutil
    shutil.copytree(KERNELS / "debian-6.1.0-57", tmp_path / "run")
    lab = json.loads((tmp_path / "run" / "lab.json").read_text())
    lab["kernel_release"] = "6.17.0-1-amd64"
    (tmp_path / "run" / "lab.json").write_text(json.dumps(lab))
    departs = [r.what for r in profilecheck.check(tmp_path / "run") if r.agrees is False]
    assert departs == ["resolve_by_name", "resolve_by_id", "query_ib_service",
                       "query_ib_service_short"]


@needs_runs
@pytest.mark.parametrize("run", sorted(RUNS))
def test_ib_service_writes_two_observers(run):
    """Each write's result as the program saw it (os.write's errno, client.json) is the one
    `ibpath record`'s shim recorded; the commands the shim captured decode, through the
    project's layers, to the fields lab/ibservice.py packed with struct."""
    import errno as errno_mod
    from ibpath_scapy.capture.pcapio import read_frames
    from ibpath_scapy.layers.ib import ExportedPDU
    from ibpath_scapy.layers.ucma import UcmaResolveIbService
    client = json.loads((KERNELS / run / "rec-ib-service.client.json").read_text())
    steps = [s for s in client["steps"] if s["cmd"] in (19, 23)]
    seen = [r.kernel for r in profilecheck.check(KERNELS / run)
            if r.scenario == "rec-ib-service"]
    own = [profilecheck._errname(-getattr(errno_mod, s["errno"])) for s in steps]
    assert own == seen
    asked = [ExportedPDU(f.data)[UcmaResolveIbService]
             for f in read_frames(str(KERNELS / run / "rec-ib-service.pcapng"))
             if f.linktype == 252 and UcmaResolveIbService in ExportedPDU(f.data)]
    assert len(asked) == 3
    name, by_id = asked[1], asked[2]
    assert name.ibs.service_name.rstrip(b"\0") == b"ibpath.lab" and name.ibs.flags == 2
    assert by_id.ibs.service_id == 0x1000000000000001 and by_id.ibs.flags == 1


@needs_runs
def test_what_changed_between_the_kernels():
    """6.1 → 7.3.4, with the committed 6.1 runs as the same-kernel baseline: the kernel
    route's PacketLifeTime (cma.c CMA_IBOE_PACKET_LIFETIME 18 → 16, so the REQ's Local ACK
    Timeout 19 → 17) and the IB service commands; nothing else."""
    from ibpath_scapy.lab import kerneldiff
    d = kerneldiff.diff(KERNELS / "debian-6.1.0-57", KERNELS / "debian-7.3.4",
                        [CAPTURES / "rxe", CAPTURES / "rxe" / "record"])
    keys = {k.split(" ")[0] if k.startswith("ucma.") else k for _, k, _, _ in d["changes"]}
    assert keys == {"req.primary_local_ack_timeout", "readback.packet_life_time", "ucma.03",
                    "ucma.04", "ucma.05", "ucma.06"}
    for _, k, a, b in d["changes"]:
        if k == "req.primary_local_ack_timeout":
            assert (a, b) == (19, 17)
        if k == "readback.packet_life_time":
            assert (a, b) == (18, 16)
    # the Debian package and the same kernel handed over as a user's build: no change but
    # what varies run to run on one kernel
    d = kerneldiff.diff(KERNELS / "debian-7.3.4", KERNELS / "build-7.3.4")
    assert {k for _, k, _, _ in d["changes"]} <= {
        "req.primary_flow_label", "readback.flow_label", "readback.dlid", "readback.slid",
        "readback.raw_traffic"}


@needs_runs
def test_local_ack_timeout_by_tshark():
    """Wireshark's own CM dissector reads the REQ's Local ACK Timeout of the kernel route:
    19 on 6.1 (PacketLifeTime 18), 17 on 7.3.4 (16); cm.c cm_ack_timeout with rxe's CA ACK
    delay 15 (recordmatrix.cm_ack_timeout)."""
    from test_netlink import tshark_fields
    from ibpath_scapy.lab.recordmatrix import RXE_CA_ACK_DELAY, cm_ack_timeout
    for run, plt in (("debian-6.1.0-57", 18), ("debian-7.3.4", 16)):
        rows = tshark_fields(KERNELS / run / "rping.pcapng",
                             ["infiniband.cm.req.prim_localacktout"])
        got = {int(v, 0) for r in rows.values()
               for v in r["infiniband.cm.req.prim_localacktout"]}
        assert got == {cm_ack_timeout(RXE_CA_ACK_DELAY, plt)}, run


@pytest.mark.skipif(__import__("os").environ.get("IBPATH_LAB") != "1"
                    or __import__("shutil").which("qemu-system-x86_64") is None,
                    reason="boots a QEMU guest (about 2 min, a full core, ~200 MB of kernel "
                    "packages): set IBPATH_LAB=1 with qemu-system-x86 and mmdebstrap installed")
@pytest.mark.parametrize("kernel, expect", [("6.1", IBS_61), ("7.3", IBS_73)])
def test_lab_boots_kernel(tmp_path, kernel, expect):
    """The real lab on a kernel named by version: the IB service writes and one blob, held
    against the profiles by `lab run` itself (exit 0: no departure)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "lab", "run",
                        "blob-two-2b", "rec-ib-service", "-o", str(tmp_path), "--kernel",
                        kernel], capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr
    lab = json.loads((tmp_path / "lab.json").read_text())
    assert lab["kernel_release"].startswith(kernel + ".")
    assert lab["kernel_origin"]["kind"] == "debian"
    rows = json.loads((tmp_path / "profiles.json").read_text())["rows"]
    assert [r["kernel"] for r in rows if r["scenario"] == "rec-ib-service"] == expect


@needs_runs
@pytest.mark.parametrize("run", sorted(RUNS))
def test_audit_of_each_kernel(run):
    """Each run's manifest (what `ibpath craft --verify` and the rule fixtures check): the
    plain matrix gives on every kernel the findings captures/rxe gave on 6.1 (the ucma
    profile did not change), and the IB service run what the 6.17 rules make of that
    kernel's answers: UCMA-IBS-ON-ROCE where the kernel refused with EOPNOTSUPP, not where
    it did not know the command; UCMA-IBS-QUERY-EARLY on both (ibservice.py queries without
    a resolution)."""
    rows = {r["file"]: r["rules"]
            for r in json.loads((KERNELS / run / "manifest.json").read_text())["scenarios"]}
    base = {r["file"]: r["rules"]
            for r in json.loads((RXE / "manifest.json").read_text())["scenarios"]}
    assert {f: rows[f] for f in base} == base
    want = ["UCMA-IBS-QUERY-EARLY"] if run.startswith("debian-6.1") else \
        ["UCMA-IBS-ON-ROCE", "UCMA-IBS-QUERY-EARLY"]
    assert rows["rec-ib-service.pcapng"] == want
