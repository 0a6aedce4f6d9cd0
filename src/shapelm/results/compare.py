"""`shapelm results compare A B`: did a rerun reproduce? Every number of two results trees
(`results/EXP`), cell by cell: the per-run JSON files (`runs/RUN/*.json`: losses, perplexities,
accuracies, counts) and the tables' CSV cells, with both values, their relative difference and
the tolerance of that quantity (TOLERANCES, by the number's own key or column name); timings
(TIMINGS) are left out. Exit 0 when
every shared number is within its tolerance, 1 otherwise; a number on one side only is listed.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

from shapelm.errors import ShapelmError

#: Relative tolerance by quantity (the last key of a JSON number, or a table's column), first
#: match wins. Counts must be equal; a loss is an average over thousands of tokens whose float
#: reductions differ between machines (docs/TRAINING.md, "Reproducibility"): 0.2 %; a perplexity
#: is exp(loss), so a loss difference d moves it by about d x loss: 2 %; accuracies over a few
#: hundred examples move by whole examples: 2 %; anything else 1 %.
#: Measurements of time and speed (seconds, tokens/s, ms per token, MFU) are not reproduced by
#: a rerun on a shared or another machine; they are left out of the comparison.
TIMINGS = re.compile(r"(^|_)(seconds|time|ms|tokens_per_s|per_s|latency|mfu|throughput|speedup)(_|$)")

TOLERANCES: tuple[tuple[str, float], ...] = (
    (r"^(n_|num_|count|step|steps|tokens|seq_len|max_instances|params)", 0.0),
    (r"loss", 2e-3),
    (r"ppl|perplexity", 2e-2),
    (r"acc|f1|exact|score", 2e-2),
    (r".*", 1e-2),
)


def tolerance(quantity: str) -> float:
    for pattern, tol in TOLERANCES:
        if re.search(pattern, quantity.lower()):
            return tol
    return TOLERANCES[-1][1]


def _numbers(obj: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, (*path, str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, (*path, str(i)))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, float(obj)


def _as_number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def collect(tree: Path) -> dict[tuple[str, str], float]:
    """{(cell, quantity): value} of a results tree: `runs/**/*.json` numbers by file and key
    path, `tables/*.csv` numeric cells by file, row (first column) and column."""
    tree = Path(tree)
    if not tree.is_dir():
        raise ShapelmError(f"{tree}: no such results directory")
    out: dict[tuple[str, str], float] = {}
    for f in sorted((tree / "runs").glob("**/*.json")):
        try:
            data = json.loads(f.read_text())
        except ValueError as err:
            raise ShapelmError(f"{f}: not JSON ({err})") from None
        rel = f.relative_to(tree).as_posix()
        for path, value in _numbers(data):
            out[(f"{rel}:{'.'.join(path)}", path[-1] if path else "")] = value
    for f in sorted((tree / "tables").glob("*.csv")):
        with open(f, newline="") as fh:
            rows = list(csv.reader(fh))
        if not rows:
            continue
        header = rows[0]
        for row in rows[1:]:
            for col, cell in zip(header[1:], row[1:]):
                value = _as_number(cell)
                if value is not None:
                    out[(f"tables/{f.name}:{row[0]}:{col}", col)] = value
    return out


def relative_difference(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):  # both not a number: the same outcome
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def compare(a: Path, b: Path) -> tuple[list[str], int]:
    """Report lines (one per number beyond its tolerance or on one side only, then a summary)
    and the count of failures."""
    ours, theirs = collect(a), collect(b)
    lines, failures, within = [], 0, 0
    for key in sorted(set(ours) | set(theirs)):
        cell, quantity = key
        if TIMINGS.search(quantity.lower()):
            continue
        if key not in ours or key not in theirs:
            lines.append(f"{cell}: only in {a if key in ours else b}")
            failures += 1
            continue
        x, y = ours[key], theirs[key]
        rel, tol = relative_difference(x, y), tolerance(quantity)
        if rel <= tol:
            within += 1
            continue
        failures += 1
        lines.append(f"{cell}: {x:.6g} vs {y:.6g}, relative difference {rel:.2e} > {tol:.0e}")
    lines.append(f"{within} of {within + failures} numbers within tolerance; {failures} not")
    return lines, failures
