"""The plugin's expert infos in `tshark -z expert`, the statistics a user scripts from.

The plugin adds its fields and expert infos only where Wireshark builds a protocol tree (with
none, `tshark -r` alone, a MAD frame only feeds the TID and RMPP tracking). `-z expert` by
itself builds no tree; with any display filter it does, and the README tells users to add one
(`-Y frame`). Oracle: the expert infos `tshark -V` prints inside the plugin's own subtrees,
counted per message, must be those `-z expert -Y frame` counts for the IBPATH protocols.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from conftest import CAPTURES
from plugin_oracle import tshark
from ibpath_scapy.luagen.plugin import CHECKOUT_PLUGIN

CORPUS = sorted((CAPTURES / "corpus").glob("*.pcapng"))
_EXPERT = re.compile(r"^\s+\[Expert Info \((\w+)/(\w+)\): (.*)\]$")
# -z expert: "   Frequency      Group           Protocol  Summary", then one row per message
_ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+(\S+)\s+(.*)$")


def _in_plugin_trees(verbose: str) -> Counter:
    """(group, message) of every expert info under a top-level `ibpath ...` subtree of -V."""
    out: Counter = Counter()
    ours = False
    for line in verbose.splitlines():
        if line and not line[0].isspace():
            ours = line.startswith("ibpath")
            continue
        m = _EXPERT.match(line)
        if ours and m:
            out[(m.group(2), m.group(3))] += 1
    return out


def _expert_stats(text: str) -> Counter:
    """(group, summary) -> frequency of the IBPATH rows of `-z expert`."""
    out: Counter = Counter()
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group(3).startswith("IBPATH"):
            out[(m.group(2), m.group(4))] += int(m.group(1))
    return out


def test_a_mad_expert_is_read_from_both():
    """The comparison below covers MAD frames (not only blob and netlink ones, whose experts
    tshark counts even with no tree), and -z expert alone misses them."""
    path = str(CAPTURES / "corpus" / "saq-serviceid-half.pcapng")
    verbose = tshark(["-r", path, "-V"], str(CHECKOUT_PLUGIN)).stdout
    [(group, message)] = _in_plugin_trees(verbose)
    assert group == "Protocol" and message.startswith("SAQ-SERVICEID-HALF: ")
    alone = tshark(["-r", path, "-q", "-z", "expert"], str(CHECKOUT_PLUGIN)).stdout
    assert _expert_stats(alone) == Counter()


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_expert_statistics_with_a_display_filter_equal_the_tree(path):
    verbose = tshark(["-r", str(path), "-V"], str(CHECKOUT_PLUGIN)).stdout
    want = _in_plugin_trees(verbose)
    got = _expert_stats(tshark(["-r", str(path), "-q", "-z", "expert", "-Y", "frame"],
                               str(CHECKOUT_PLUGIN)).stdout)
    assert got == want
