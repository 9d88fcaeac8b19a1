"""Issue 39: `ibpath completion bash|zsh` prints a completion script generated from the argument
parser (shtab), and the shells themselves complete with it: bash asked through the function
`complete -p ibpath` names, as readline calls it; zsh through its completion system in a
pseudo-terminal (zsh/zpty), as a user's Tab does. Without zsh the zsh tests skip, saying so."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
CORPUS_FILE = ROOT / "captures" / "corpus" / "saq-retry.pcapng"

# Asks the completion function `complete -p ibpath` names for the candidates of each line of
# standard input, as readline calls it (COMP_WORDS/COMP_CWORD, then command, word, previous).
_BASH_ASK = r"""
source "$1"
fn=$(complete -p ibpath | sed -n 's/.* -F \([^ ]*\) ibpath$/\1/p')
[ -n "$fn" ] || { echo "no completion function for ibpath" >&2; exit 3; }
while IFS= read -r line; do
  COMP_LINE="$line"; COMP_POINT=${#line}
  read -ra COMP_WORDS <<< "$line"; [[ "$line" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
  "$fn" ibpath "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  printf '%s\t' "${COMPREPLY[@]}"; echo
done
"""

# Types `$1` and Tab into an interactive zsh whose fpath starts with `$2` (compinit, then the
# completion system), recording every candidate compadd is given, each line starting with
# <<HIT>> (the markers are split in the commands so that the terminal's echo never matches).
_ZSH_ASK = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1=''; fpath=($2 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z "comppostfuncs=(_done); _done() { print -r -- '<<''END>>' }"
zpty -w z "compadd() { local -a h; builtin compadd -O h \"\$@\"; (( \$#h )) && print -rl -- '<<''HIT>>'\${^h}; builtin compadd \"\$@\" }"
zpty -w z "bindkey '^I' complete-word"
zpty -n -w z "$1"$'\t'
zpty -r z out "*<<END>>*"
print -r -- "$out"
zpty -d z
"""


def script(shell: str, tmp_path: Path) -> Path:
    """The script `ibpath completion SHELL` prints, saved as bash-completion and zsh want it."""
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy", "completion", shell],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    folder = tmp_path / shell
    folder.mkdir()
    out = folder / ("ibpath" if shell == "bash" else "_ibpath")
    out.write_text(p.stdout)
    return out


def bash_candidates(path: Path, lines: list[str]) -> dict[str, set[str]]:
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", _BASH_ASK, "bash", str(path)],
                       input="".join(ln + "\n" for ln in lines), capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.split("\n")[:-1]
    assert len(rows) == len(lines), p.stdout
    return {ln: set(filter(None, row.split("\t"))) for ln, row in zip(lines, rows)}


def verbs() -> set[str]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_bash_completes_verbs_options_values_and_paths(tmp_path):
    got = bash_candidates(script("bash", tmp_path), [
        "ibpath au", "ibpath ", "ibpath audit --for", "ibpath audit --format ",
        "ibpath audit --junit-cases ", "ibpath audit --la", "ibpath dissector ",
        "ibpath completion ", "ibpath decode captures/corpus/res-no",
        "ibpath audit captures/op", "ibpath craft --corpus captures/co"])
    assert got["ibpath au"] == {"audit"}
    assert got["ibpath "] == verbs() and "completion" in verbs()
    assert got["ibpath audit --for"] == {"--format"}
    assert got["ibpath audit --format "] == {"text", "json", "junit", "html", "parquet"}
    assert got["ibpath audit --junit-cases "] == {"all", "findings"}
    assert got["ibpath audit --la"] == {"--label", "--ladder"}
    assert got["ibpath dissector "] == {"generate", "install"}
    assert got["ibpath completion "] == {"bash", "zsh"}
    assert got["ibpath decode captures/corpus/res-no"] == {
        "captures/corpus/res-no-followup.pcapng"}
    assert got["ibpath audit captures/op"] == {"captures/opensm"}
    assert got["ibpath craft --corpus captures/co"] == {"captures/corpus"}


def test_bash_check_can_fail(tmp_path):
    """A script for another program completes nothing for ibpath: the harness says so."""
    other = tmp_path / "other"
    text = script("bash", tmp_path).read_text()
    other.write_text(re.sub(r"^(complete .*) ibpath$", r"\1 ibpathx", text, flags=re.M))
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", _BASH_ASK, "bash", str(other)],
                       input="ibpath au\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "no completion function" in p.stderr


needs_zsh = pytest.mark.skipif(shutil.which("zsh") is None,
                               reason="zsh is not installed (tools/install.sh installs it)")


def zsh_candidates(folder: Path, line: str) -> set[str]:
    p = subprocess.run(["zsh", "-f", "-c", _ZSH_ASK, "zsh", line, str(folder)],
                       capture_output=True, timeout=60, cwd=ROOT)
    out = p.stdout.decode(errors="replace").replace("\r", "\n")
    assert "<<END>>" in out, out[-2000:]
    return {ln.split("<<HIT>>", 1)[1] for ln in out.split("\n") if "<<HIT>>" in ln}


@needs_zsh
def test_zsh_script_parses_and_registers_for_ibpath(tmp_path):
    path = script("zsh", tmp_path)
    p = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(["zsh", "-f", "-c", f"fpath=({path.parent} $fpath); autoload -Uz "
                        "compinit; compinit -u -D; print -r -- $_comps[ibpath]"],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "_ibpath", p.stderr


@needs_zsh
def test_zsh_completes_verbs_and_option_values(tmp_path):
    folder = script("zsh", tmp_path).parent
    assert zsh_candidates(folder, "ibpath au") == {"audit"}
    assert zsh_candidates(folder, "ibpath audit --format ") == {"text", "json", "junit", "html", "parquet"}
    assert zsh_candidates(folder, "ibpath completion ") == {"bash", "zsh"}
    assert verbs() <= zsh_candidates(folder, "ibpath ")


def _sub(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def test_a_verb_named_builds_its_parser_alone_and_imports_no_other():
    """cli/main.py: `ibpath audit ...` parses with the audit verb's parser alone, as the
    whole parser parses it, option for option, help text for help text; and an audit run in
    a new interpreter imports none of the other verbs' modules."""
    from ibpath_scapy.cli.main import VERBS, _verb

    full = _sub(build_parser())
    assert set(full.choices) == set(VERBS)
    for verb in VERBS:
        if verb == "completion":  # (it describes every verb: the whole parser)
            assert _verb([verb, "bash"]) is None
            continue
        alone = _sub(build_parser(_verb([verb, "--help"])))
        assert list(alone.choices) == [verb]
        assert alone.choices[verb].format_help() == full.choices[verb].format_help()
    assert _verb([]) is None and _verb(["--version"]) is None and _verb(["audti"]) is None
    args = ["audit", "--quiet", "--format", "json", "--kernel", "all", "x.pcap"]
    alone, whole = build_parser(_verb(args)).parse_args(args), build_parser().parse_args(args)
    assert {k: v for k, v in vars(alone).items() if k != "root_parser"} == {
        k: v for k, v in vars(whole).items() if k != "root_parser"}
    probe = ("import sys, io, contextlib\n"
             "from ibpath_scapy.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    main(['audit', '--quiet', '--format', 'json', {str(CORPUS_FILE)!r}])\n"
             "print(sorted(m for m in sys.modules if m.startswith('ibpath_scapy.cli.')))")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["['ibpath_scapy.cli.audit',", "'ibpath_scapy.cli.main']"]
