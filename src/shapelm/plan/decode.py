"""The decode benchmark's plan: which runs it pairs, and which tables and figures read its
output (`results/EXP/decode/decode.json`), so a table's target waits for it."""
from __future__ import annotations

from typing import Any

#: Every table and figure that reads decode.json (a column, a row or a curve of decode latency).
#: tests/results/test_results.py checks this against what building each one actually reads.
DECODE_READERS = frozenset({
    "hourglass_table2",  # the 64k decode-latency column
    "hourglass_table12",
    "hourglass_decode_text",
    "hourglass_fig5_decode_latency",
    "tapered_decode",
})


def decode_pairs(exp: Any) -> dict[str, tuple[str, str]]:
    """Table 12's pairs: scale (lower case) -> (conventional, hourglass), its `decode: true` runs."""
    by_scale: dict[str, dict[str, str]] = {}
    for name, run in exp.runs.items():
        if exp.raw["runs"].get(name, {}).get("decode") is True:
            kind = "conv" if run["arch"].get("kind") == "conventional" else "hg"
            by_scale.setdefault(run["scale"].lower(), {}).setdefault(kind, name)
    return {s: (d["conv"], d["hg"]) for s, d in by_scale.items() if "conv" in d and "hg" in d}


def decode_baselines(exp: Any) -> dict[str, str]:
    """run -> the run its `decode:` names: the mixer's per-token cost against that one, each in
    its own shapes (table `tapered_decode`)."""
    return {name: spec["decode"] for name, spec in exp.raw["runs"].items()
            if isinstance(spec.get("decode"), str)}
