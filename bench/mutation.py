"""Mutation testing of the modules that decide verdicts (issue 43, item 5), with mutmut 3.

mutmut mutates every function of the modules [tool.mutmut] names in pyproject.toml; a full
run of all of them (2,152 mutants) is over an hour on two shared cores, so, as the issue's
first measurement did, a fixed sample is run: SAMPLE mutants of each module (all of a module
with fewer), drawn with a fixed seed from mutmut's own list. tests/README.md has the method
and the figures.

    python bench/mutation.py sample            # the sampled mutant names, one a line
    python bench/mutation.py report [--json]   # killed / survived per module, from mutants/
    python bench/mutation.py survivors         # the sampled mutants that survived
    python bench/mutation.py snapshot > F      # every sampled mutant's exit code, for --before F
    python bench/mutation.py cr-run [--after]  # cosmic-ray on the rule bodies (in a copy)
    python bench/mutation.py cr-report [--after]

Run from the checkout's root, after `mutmut run` has generated mutants/ (tests/README.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SAMPLE = 60
SEED = 43
# each module's path under ibpath_scapy/ and the name its sample is drawn by (the seed): the
# before run was made before kernelview.py and rmpp.py moved into facts/, under their old names
MODULES = {"facts/kernelview": "kernelview", "facts/rmpp": "rmpp",
           **{m: m for m in ("audit/rules/blob", "audit/rules/sa", "audit/rules/resolver",
                             "audit/rules/cm", "audit/rules/process")}}
# the before run's names of the moved modules' mutants (bench/mutation-before.json)
MOVED = {"ibpath_scapy.kernelview.": "ibpath_scapy.facts.kernelview.",
         "ibpath_scapy.rmpp.": "ibpath_scapy.facts.rmpp."}
KILLED = {1, 3, 24, -24, 152, 255, 36, -11, -9}  # mutmut's "killed", timeouts and crashes
SURVIVED = {0, 5, 33}  # survived, or no test reached the function
# Sampled mutants that change nothing a caller can observe, each with the reason:
# tests/README.md, "Equivalent mutants".
EQUIVALENT: dict[str, str] = {
    # mutmut names
    "ibpath_scapy.facts.kernelview.x_ls_parse_error__mutmut_2":
        "break -> return at a cut attribute: the loop's end returns None all the same",
    "ibpath_scapy.facts.kernelview.x_ls_parse_error__mutmut_7":
        "type > 10 -> type >= 10: type 10 (IPV6) has no ib_nl_policy entry, so checking or "
        "skipping it gives the same answer (tests/test_mutation_kills_kernelview.py checks 10)",
    "ibpath_scapy.audit.rules.blob.x_declared__mutmut_1":
        "runs only at import (the @rule arguments), before mutmut switches a mutant on; "
        "really applied it fails every import",
    "ibpath_scapy.audit.rules.blob.x_declared__mutmut_3":
        "runs only at import, as above; really applied the registry test "
        "(tests/test_rule_registry.py) sees a family BLOB",
    "ibpath_scapy.audit.rules.blob.x_data_path__mutmut_43":
        "fwd >= len -> fwd > len: the kernel view never names a record past the array "
        "(tests/test_kernelview.py test_every_view_names_existing_records_or_rejects)",
    "ibpath_scapy.audit.rules.cm.x__readings__mutmut_39":
        "gmp >= len -> gmp > len: the kernel view never names a record past the array, as above",
    "ibpath_scapy.audit.rules.cm.x_is_rocev2__mutmut_8":
        "`encap or \"\"` -> `encap or \"XXXX\"`: \"rocev2\" is in neither",
    "ibpath_scapy.audit.rules.resolver.xǁSideǁforward_answer__mutmut_4":
        "completing_frame < before -> <=: `before` is a hand-over's frame, never an SA "
        "answer's",
    "ibpath_scapy.audit.rules.resolver.x_handovers__mutmut_6":
        "Handover(b, ...) -> Handover(None, ...): Handover.rec, the blob's record, is read by "
        "no code (the rules read frame, records, what, unidirectional and local)",
    "ibpath_scapy.facts.rmpp.x_segment__mutmut_57":
        "pack_into(\"!II\") -> \"!ii\" for the segment number and PayloadLength: the same "
        "bytes below 2**31; a PayloadLength of 2**31 needs a message of about 1.95 GB "
        "(9.8 million segments; the reassembly keeps at most 4,096)",
    "ibpath_scapy.facts.rmpp.xǁReassemblerǁ__init____mutmut_8":
        "dropped = None -> \"\" before the first add(): add() sets it first thing, and its "
        "one reader (facts/assemble.py) reads it after add() and tests its truth only",
    # (_verdict was removed after the run these four come from; kept for its figures)
    "ibpath_scapy.audit.rules.sa.x__verdict__mutmut_1":
        "`not (isinstance(q, Fact) and ...)` -> without `not`: facts then skip the memo (the "
        "same verdict, computed each time), anything else is memoized by identity while the "
        "memo holds it; the rules pass facts only (a transaction's query and records)",
    "ibpath_scapy.audit.rules.sa.x__verdict__mutmut_12":
        "known = _VERDICTS.get(key) -> None: every verdict computed again, the same verdict",
    "ibpath_scapy.audit.rules.sa.x__verdict__mutmut_13":
        "_VERDICTS.get(key) -> get(None): no key is None, so as mutmut_12",
    "ibpath_scapy.audit.rules.sa.x__verdict__mutmut_15":
        "len(_VERDICTS) >= 4096 -> > 4096: the memo is cleared one entry later",
    # cosmic-ray: module:operator:line:column:occurrence
    "audit/rules/blob:core/ReplaceBinaryOperator_Add_LShift:655:25:29":
        "range(x + 1) -> range(x << 1) over at most 2 profiles (one blob kind: ucma and "
        "proposal, or ls-legacy and ls-multi): x = 0 gives range(0, 2), whose extra pair is a "
        "profile with itself and differs in nothing; x = 1 gives an empty range either way",
    "audit/rules/resolver:core/ReplaceBinaryOperator_Add_Mul:237:52:1":
        "fwds[k + 1:] -> fwds[k:]: the extra element is the forward query itself, whose first "
        "frame (its request) is before its own answer, so `first_frame(t) > lo` drops it",
    "audit/rules/resolver:core/ReplaceComparisonOperator_Gt_GtE:236:63:0":
        "h.frame > lo -> >=: lo is an SA answer's frame, never a hand-over's",
    "audit/rules/resolver:core/ReplaceComparisonOperator_Lt_LtE:240:61:6":
        "first_frame(t) < hi -> <= hi: hi is a hand-over's frame (no query starts there) or "
        "the next forward query's, which neither asks Reversible nor is a return query",
    "audit/rules/resolver:core/ReplaceComparisonOperator_IsNot_NotEq:240:26:0":
        "t is not fwd -> t != fwd: Transaction is a dataclass, and two transactions of one "
        "capture always differ in their frames, so equality is identity here",
    "audit/rules/resolver:core/ReplaceBinaryOperator_Add_Pow:237:52:1":
        "fwds[k + 1:] -> fwds[k ** 1:] = fwds[k:]: as k * 1 above, the extra element is the "
        "forward query itself, dropped by `first_frame(t) > lo`",
    "audit/rules/sa:core/ReplaceBinaryOperator_Add_Pow:224:56:3":
        "range(1, min(n, MAX) + 1) -> range(1, min(n, MAX) ** 1): the range loses n, which is "
        "never missing (n is the highest segment number held); past MAX the rule returns "
        "before it reads `missing`",
    "audit/rules/cm:core/ReplaceBinaryOperator_BitOr_Add:275:48:6":
        "a return annotation: cm.py has `from __future__ import annotations`, never evaluated",
    "audit/rules/cm:core/ReplaceBinaryOperator_BitOr_Mul:275:48:6": "the same annotation",
    "audit/rules/cm:core/ReplaceBinaryOperator_BitOr_LShift:275:48:6": "the same annotation",
    "audit/rules/cm:core/ReplaceComparisonOperator_Eq_LtE:280:18:14":
        "ip.version == 4 -> <= 4: ipaddress gives 4 or 6 only",
    "audit/rules/cm:core/ReplaceComparisonOperator_Eq_LtE:187:36:10":
        "len(profiles) == 1 -> <= 1: a group has at least one profile",
    "audit/rules/cm:core/ReplaceContinueWithBreak:254:12:1":
        "continue -> break in CM-REQ-INBOUND-LID's loop over readings: there is at most one "
        "ls-multi reading and it comes first (profiles_for), every other reading is skipped",
    "audit/rules/cm:core/ReplaceContinueWithBreak:259:12:2":
        "continue -> break after the ls-multi reading agrees: the readings after it are "
        "ls-legacy's, which the rule skips",
    "audit/rules/sa:core/NumberReplacer:213:28:53":
        "`1 in by_num` -> `0 in by_num` in SAR-RMPP's shortcut for one segment: for one segment "
        "numbered 1 the general path finds nothing either (no number below 1, none missing, "
        "n == 1 returns)",
    "audit/rules/process:core/ReplaceComparisonOperator_NotEq_IsNot:176:26:3":
        "len(a) != len(b) -> len(a) is not len(b): CPython keeps one object per small int; "
        "an ACM answer holds at most 8 entries",
}


# -- cosmic-ray: the rule bodies ------------------------------------------------------------
# mutmut 3 leaves every decorated function alone (its trampoline replaces the function), and
# every rule of audit/rules/ is an @rule function: their bodies, where the verdicts are, are
# mutated with cosmic-ray instead, in a copy of the checkout (it mutates files in place).
CR_SAMPLE = 30
RULE_TESTS = {
    "audit/rules/blob": ["tests/test_rules_blob.py", "tests/test_rule_fixtures.py"],
    "audit/rules/sa": ["tests/test_rules_sa.py", "tests/test_rule_fixtures.py"],
    "audit/rules/resolver": ["tests/test_rules_resolver.py", "tests/test_rule_fixtures.py"],
    "audit/rules/cm": ["tests/test_rules_cm.py", "tests/test_rule_fixtures.py"],
    "audit/rules/process": ["tests/test_process_records.py", "tests/test_rule_fixtures.py"],
}
# the tests written to kill the survivors (issue 43): run with --after
NEW_TESTS = {module: [f"tests/test_mutation_kills_{module.rsplit('/', 1)[-1]}{part}.py"
                      for part in ("", "_rules")] + ["tests/test_mutation_kills_messages.py"]
             for module in RULE_TESTS}


def _rule_bodies(path: Path) -> list[tuple[int, int]]:
    """Line spans of the decorated top-level functions of a module."""
    import ast

    tree = ast.parse(path.read_text())
    return [(f.lineno, f.end_lineno) for f in tree.body
            if isinstance(f, ast.FunctionDef) and f.decorator_list]


def cr_run(root: Path, module: str, after: bool) -> Path:
    """init, sample and exec one cosmic-ray session in root (a copy of the checkout)."""
    import subprocess

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    name = module.rsplit("/", 1)[-1] + ("-after" if after else "")
    tests = RULE_TESTS[module] + [t for t in NEW_TESTS[module] if after and
                                  (root / t).exists()]
    config = root / f"cr-{name}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "ibpath_scapy/{module}.py"\n'
        "timeout = 120.0\n"
        "excluded-modules = []\n"
        f'test-command = "{sys.executable} -m pytest -x -q -p no:cacheprovider '
        f'{" ".join(tests)}"\n'
        '[cosmic-ray.distributor]\nname = "local"\n')
    session = root / f"cr-{name}.sqlite"
    session.unlink(missing_ok=True)
    subprocess.run([str(Path(sys.executable).with_name("cosmic-ray")), "init", str(config), str(session)], cwd=root, check=True)
    spans = _rule_bodies(root / "ibpath_scapy" / f"{module}.py")
    with use_db(str(session), WorkDB.Mode.open) as db:
        inside, outside = {}, []
        for item in db.pending_work_items:
            line = item.mutations[0].start_pos[0]
            if any(a <= line <= b for a, b in spans):
                inside[_cr_key(item)] = item.job_id
            else:
                outside.append(item.job_id)
        if after:  # new tests only add kills: rerun the mutants that survived before
            before = {_cr_key(i) for i, _ in _cr_outcomes(root, module, False)[1]}
            keep = {j for k, j in inside.items() if k in before}
        else:  # drawn over the mutations' places, which are the same in every session
            keep = {inside[k] for k in random.Random(f"{SEED}:{module}").sample(
                sorted(inside), min(CR_SAMPLE, len(inside)))}
        inside = list(inside.values())
        skip = [j for j in inside + outside if j not in keep]
        db.set_multiple_results(skip, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    subprocess.run([str(Path(sys.executable).with_name("cosmic-ray")), "exec", str(config), str(session)], cwd=root, check=True)
    return session


def _cr_key(item) -> str:
    m = item.mutations[0]
    return f"{m.operator_name}:{m.start_pos[0]}:{m.start_pos[1]}:{m.occurrence}"


def _cr_outcomes(root: Path, module: str, after: bool):
    """(killed, survived) (work item, result) pairs of a module's session."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    name = module.rsplit("/", 1)[-1] + ("-after" if after else "")
    session = root / f"cr-{name}.sqlite"
    if not session.exists():
        return [], []
    with use_db(str(session), WorkDB.Mode.open) as db:
        done = [(item, res) for item, res in db.completed_work_items
                if res.worker_outcome != WorkerOutcome.SKIPPED]
    killed = [(i, r) for i, r in done if r.test_outcome == TestOutcome.KILLED
              or r.worker_outcome in (WorkerOutcome.ABNORMAL, WorkerOutcome.EXCEPTION)]
    survived = [(i, r) for i, r in done if (i, r) not in killed]
    return killed, survived


def cr_report(root: Path, after: bool) -> list[dict]:
    rows = []
    for module in RULE_TESTS:
        killed, survived = _cr_outcomes(root, module, False)
        if not killed and not survived:
            continue
        if after:  # the survivors rerun with the new tests
            killed_now = {_cr_key(i) for i, _ in _cr_outcomes(root, module, True)[0]}
            killed += [(i, r) for i, r in survived if _cr_key(i) in killed_now]
            survived = [(i, r) for i, r in survived if _cr_key(i) not in killed_now]
        eq = [(i, r) for i, r in survived if f"{module}:{_cr_key(i)}" in EQUIVALENT]
        survived = [(i, r) for i, r in survived if (i, r) not in eq]
        judged = len(killed) + len(survived)
        rows.append({"module": module + " (rule bodies)", "mutants": judged + len(eq),
                     "killed": len(killed), "survived": len(survived),
                     "equivalent": len(eq), "unchecked": 0,
                     "kill_rate": round(100 * len(killed) / judged, 1) if judged else None,
                     "survivors": [(f"{module}:{_cr_key(i)}", r.diff) for i, r in survived]})
    return rows


def _meta(root: Path, module: str) -> dict:
    return json.loads((root / "mutants" / "ibpath_scapy" / f"{module}.py.meta").read_text())


def sample(root: Path) -> dict[str, list[str]]:
    out = {}
    for module, seed in MODULES.items():
        names = sorted(_meta(root, module)["exit_code_by_key"])
        out[module] = sorted(random.Random(f"{SEED}:{seed}").sample(
            names, min(SAMPLE, len(names))))
    return out


def renamed(name: str) -> str:
    """A mutant's name now, from its name in the before run."""
    for old, new in MOVED.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def codes_of(root: Path, before: Path | None = None) -> dict[str, int | None]:
    """mutmut's exit code of every sampled mutant; with before (a `snapshot` file), the
    before run's code where this run did not check the mutant (adding tests only kills)."""
    old = {renamed(k): v for k, v in json.loads(before.read_text()).items()} if before else {}
    out = {}
    for module, names in sample(root).items():
        codes = _meta(root, module)["exit_code_by_key"]
        for n in names:
            out[n] = codes.get(n) if codes.get(n) is not None else old.get(n)
    return out


def report(root: Path, before: Path | None = None) -> list[dict]:
    rows = []
    every = codes_of(root, before)
    for module, names in sample(root).items():
        codes = {n: every[n] for n in names}
        eq = [n for n in names if n in EQUIVALENT]
        killed = [n for n in names if codes.get(n) in KILLED]
        survived = [n for n in names if codes.get(n) in SURVIVED and n not in EQUIVALENT]
        unchecked = [n for n in names if n not in killed + survived + eq]
        judged = len(killed) + len(survived)  # the unchecked are in no rate
        rows.append({"module": module, "mutants": len(names), "killed": len(killed),
                     "survived": len(survived), "equivalent": len(eq),
                     "unchecked": len(unchecked),
                     "kill_rate": round(100 * len(killed) / judged, 1) if judged else None,
                     "survivors": survived})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["sample", "report", "survivors", "snapshot", "cr-run",
                                     "cr-report"])
    ap.add_argument("--module", choices=list(RULE_TESTS), action="append")
    ap.add_argument("--after", action="store_true", help="cosmic-ray with the new tests too")
    ap.add_argument("--before", type=Path, help="a snapshot of the run before (mutmut)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args(argv)
    if args.what == "sample":
        for names in sample(args.root).values():
            print("\n".join(names))
        return 0
    if args.what == "cr-run":
        for module in args.module or RULE_TESTS:
            cr_run(args.root, module, args.after)
        return 0
    if args.what == "cr-report":
        rows = cr_report(args.root, args.after)
        if not args.json:
            for r in rows:
                for name, diff in r["survivors"]:
                    print(f"=== {name}\n{diff}")
        json.dump([{k: v for k, v in r.items() if k != "survivors"} for r in rows],
                  sys.stdout, indent=1)
        return 0
    if args.what == "snapshot":
        json.dump(codes_of(args.root), sys.stdout, indent=0, sort_keys=True)
        return 0
    rows = report(args.root, args.before)
    if args.what == "survivors":
        for r in rows:
            print("\n".join(r["survivors"]))
        return 0
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        return 0
    print(f"{'module':24} {'mutants':>7} {'killed':>6} {'survived':>8} {'equiv':>5} "
          f"{'unchecked':>9} {'kill %':>6}")
    for r in rows:
        print(f"{r['module']:24} {r['mutants']:7} {r['killed']:6} {r['survived']:8} "
              f"{r['equivalent']:5} {r['unchecked']:9} {r['kill_rate']!s:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
