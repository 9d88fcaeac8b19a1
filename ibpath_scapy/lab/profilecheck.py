"""Hold what the booted kernel did against the kernel profiles it claims to follow.

After `ibpath lab run`, for each capture of the run (export.py's NAME.pcapng):

* a blob handed to rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH): the profiles that
  cover the guest's release (facts/kernelview.py profiles_of; rdma_set_option is read by the
  `ucma` profile on every kernel) predict the verdict and the record the kernel keeps. The
  kernel's verdict is the blob frame's comment; the record it kept is the QUERY PATH readback
  of a recorded run (librdmacm reads the path back after ROUTE_RESOLVED), else the CM REQ on
  the wire, matched field by field (recordmatrix.py). Each is a row: agrees or departs.
* RESOLVE_IB_SERVICE and QUERY(IB_SERVICE) (rec-ib-service, lab/ibservice.py): each write's
  result as `ibpath record` saw it, against IB_SERVICE_EXPECTED by the release: refused as
  an unknown command before Linux 6.17, refused on RoCE (no SA) since.

A departure is a finding about the kernel (or about a profile): `ibpath lab run` prints the
table and exits 1 when there is one.
"""

from __future__ import annotations

import errno
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..facts.kernelview import PROFILES, blob_from_bytes, profiles_of, release_version
from ..layers.pathdata import PathArray, parse_set_option_comment
from ..layers.ucma import CMD
from ..layers.cm import CMReq
from .recordmatrix import frames, which_record, which_req

IB_SERVICE_SINCE = (6, 17)  # a892a3e74fb4, 810f874eda8e: rdma_resolve_ib_service, its ucma side
# What each step of lab/ibservice.py gets, by kernel, with the lines that decide it.
IB_SERVICE_EXPECTED = {
    "before": {
        "resolve": ("EINVAL", "ucma.c ucma_write: `if (hdr.cmd >= ARRAY_SIZE(ucma_cmd_table)) "
                              "return -EINVAL;` (the table ends at JOIN_MCAST, 22)"),
        "query": ("ENOSYS", "ucma.c ucma_query: `default: ret = -ENOSYS;` (options ADDR, PATH, "
                            "GID only)"),
        "query_short": ("ENOSYS", "ucma.c ucma_query: `default: ret = -ENOSYS;`"),
    },
    "since": {
        "resolve_unbound": ("EINVAL", "cma.c rdma_resolve_ib_service: `if (!id_priv->cma_dev "
                                      "|| !cma_comp_exch(id_priv, RDMA_CM_ADDR_BOUND, "
                                      "RDMA_CM_ADDRINFO_QUERY)) return -EINVAL;`"),
        "resolve": ("EOPNOTSUPP", "cma.c rdma_resolve_ib_service: `if (rdma_cap_ib_sa(...)) "
                                  "... else ret = -EOPNOTSUPP;` (RoCE has no SA)"),
        "query": ("ENODATA", "ucma.c ucma_query_ib_service: `if (!ctx->cm_id->route."
                             "service_recs) return -ENODATA;`"),
        "query_short": ("ENOSPC", "ucma.c ucma_query_ib_service: `if (out_len < sizeof(struct "
                                  "rdma_ucm_query_ib_service_resp)) return -ENOSPC;`"),
    },
}
# lab/ibservice.py's steps in the order it writes them, by the command and its place
IB_SERVICE_STEPS = (("resolve_unbound", "resolve"), ("resolve_by_name", "resolve"),
                    ("resolve_by_id", "resolve"), ("query_ib_service", "query"),
                    ("query_ib_service_short", "query_short"))


@dataclass
class Row:
    """One prediction against what the kernel did."""

    scenario: str
    what: str
    profile: str
    expected: str
    kernel: str
    agrees: bool | None  # None: the kernel's side could not be seen
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def _errname(value: str | int | None) -> str | None:
    """'0' / 0 → '0'; '-EINVAL' / -22 → 'EINVAL'; an errno with two names (ENOTSUP and
    EOPNOTSUPP are 95 on Linux) → the name errno.errorcode gives, so equal errnos compare
    equal whatever name the recorder printed."""
    if value is None:
        return None
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        n = int(text)
        return "0" if n >= 0 else _errname(errno.errorcode.get(-n, text))
    name = text.lstrip("-")
    name = errno.errorcode.get(getattr(errno, name, None), name)
    return "EOPNOTSUPP" if name == "ENOTSUP" else name  # the kernel's name for 95


def blob_rows(name: str, path: Path, release: str) -> list[Row]:
    """The rows of one capture with an rdma_set_option blob (none without)."""
    fr = frames(path)
    if not fr["blobs"]:
        return []
    data, comment, _ = fr["blobs"][0]
    version = release_version(release) or ()
    profiles = [p for p in profiles_of(version) if p == "ucma"] or ["ucma"]
    rows = []
    verdict = _errname(parse_set_option_comment(comment))
    records = PathArray(data).records
    for prof in profiles:
        choice = PROFILES[prof].select(blob_from_bytes(data))
        want = "0" if choice.accepted else choice.outcome
        src = PROFILES[prof].source
        rows.append(Row(name, "rdma_set_option verdict", prof, want, verdict or "not seen",
                        None if verdict is None else want == verdict, src))
        want_path = f"record {choice.gmp}" if choice.accepted else "kernel route"
        kept = records if verdict == "0" else []
        if fr["readbacks"]:
            seen, how = which_record(fr["readbacks"][-1].path_data[0].path_record, kept), "readback"
        elif fr["reqs"]:
            seen, how = which_req(fr["reqs"][0][CMReq], kept), "CM REQ"
        else:
            seen, how = None, "no readback, no CM REQ"
        rows.append(Row(name, f"path kept ({how})", prof, want_path, seen or "not seen",
                        None if seen is None else seen == want_path, src))
    return rows


def ib_service_rows(name: str, path: Path, release: str) -> list[Row]:
    """The rows of the RESOLVE_IB_SERVICE run: each step's result as recorded."""
    version = release_version(release) or ()
    era = "since" if version >= IB_SERVICE_SINCE else "before"
    expected = IB_SERVICE_EXPECTED[era]
    profile = f"ucma, Linux {'≥' if era == 'since' else '<'} 6.17"
    wanted = {CMD["RESOLVE_IB_SERVICE"], CMD["QUERY"]}
    seen = [_errname(_rc(c)) for cmd, c in frames(path)["ucma"] if cmd in wanted]
    # the QUERYs of the run are lab/ibservice.py's two (no librdmacm: no other QUERY)
    rows = []
    for k, (step, kind) in enumerate(IB_SERVICE_STEPS):
        want, src = expected.get(step) or expected[kind]
        want = _errname(want)
        got = seen[k] if k < len(seen) else None
        rows.append(Row(name, step, profile, want, got or "not seen",
                        None if got is None else got == want, src))
    return rows


def _rc(comment: str) -> str | None:
    """The result of a recorded ucma write: 'rc=N' (the byte count), or the errno name of
    'rc=-1 errno=NAME'."""
    for line in comment.splitlines():
        if line.startswith("rc="):
            parts = dict(p.split("=", 1) for p in line.split() if "=" in p)
            return "-" + parts["errno"] if "errno" in parts else "0"
    return None


def check(out: str | Path) -> list[Row]:
    """Every row of the run in directory `out` (lab.json and the captures export wrote)."""
    out = Path(out)
    lab = json.loads((out / "lab.json").read_text())
    release = lab["kernel_release"]
    rows: list[Row] = []
    for name in lab["scenarios"]:
        path = out / f"{name}.pcapng"
        if not path.exists():
            continue
        if name.endswith("ib-service"):
            rows += ib_service_rows(name, path, release)
        else:
            rows += blob_rows(name, path, release)
    return rows


def markdown(rows: list[Row], release: str) -> str:
    """The check as a Markdown table."""
    lines = [f"Kernel {release}: {sum(r.agrees is True for r in rows)} of {len(rows)} "
             f"predictions hold, {sum(r.agrees is False for r in rows)} depart, "
             f"{sum(r.agrees is None for r in rows)} not seen.", "",
             "| scenario | what | profile | expected | kernel | |", "|---|---|---|---|---|---|"]
    for r in rows:
        mark = "agrees" if r.agrees else "**departs**" if r.agrees is False else "not seen"
        lines.append(f"| {r.scenario} | {r.what} | {r.profile} | {r.expected} | {r.kernel} | "
                     f"{mark} |")
    return "\n".join(lines) + "\n"


def write(out: str | Path) -> tuple[list[Row], str]:
    """Check the run in `out`, write out/profiles.json and out/profiles.md; returns the rows
    and the Markdown."""
    out = Path(out)
    release = json.loads((out / "lab.json").read_text())["kernel_release"]
    rows = check(out)
    text = markdown(rows, release)
    (out / "profiles.json").write_text(json.dumps(
        {"kernel_release": release, "rows": [r.to_dict() for r in rows]}, indent=1) + "\n")
    (out / "profiles.md").write_text(text)
    return rows, text
