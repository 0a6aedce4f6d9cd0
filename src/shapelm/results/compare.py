"""`shapelm results compare A B`: did a rerun reproduce? Every number of two results trees
(`results/EXP`), cell by cell: the per-run JSON files (`runs/RUN/*.json`: losses, perplexities,
accuracies, counts) and the tables' CSV cells (keyed by file, row label, its occurrence and
column, so rows sharing a label cannot overwrite each other); timings (TIMINGS: by the number's
key or column, or a table row's label, e.g. a claim about throughput) are left out.

How close two numbers must be depends on what the runs came from, as their provenance records
(`runs/RUN/provenance.json`) tell:

* a run whose provenance is the same in both trees (code, data, initial weights, numerics) must
  reproduce **exactly**: its numbers, and every table cell once all runs agree;
* otherwise the first difference is named (data, initial weights, numerics, code), and numbers
  are judged against **seed noise** measured in B: twice the relative standard deviation, across
  seeds, of the same quantity of seeded runs (`RUN`, `RUN_s1`, `RUN_s2`, ...); where B has no
  seeded runs, against the fixed tolerance of the quantity (TOLERANCES). The report says which.

Exit 0 when every shared number passes, 1 when one does not or a number is on one side only,
and an error when nothing was compared (an empty or wrong tree proves nothing).
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from shapelm.errors import ShapelmError
from shapelm.plan.paths import run_under, runs_under
from shapelm.records import ProvenanceRecord, RecordError

#: Measurements of time and speed (seconds, tokens/s, ms per token, MFU, TFLOP/s, the date a
#: tool stamps) are not reproduced by a rerun on a shared or another machine; they are left out.
TIMINGS = re.compile(
    r"(^|_)(seconds|time|date|ms|tokens_per_s|per_s|latency|mfu|tflops|throughput|speedup)(_|$)")

#: Relative tolerance by quantity (the last key of a JSON number, or a table's column), first
#: match wins, where no seed noise is measured. Counts must be equal; a loss 0.2 %; a
#: perplexity (exp of a loss) 2 %; accuracies over a few hundred examples 2 %; anything else 1 %.
TOLERANCES: tuple[tuple[str, float], ...] = (
    (r"^(n_|num_|count|step|steps|tokens|seq_len|max_instances|params)", 0.0),
    (r"loss", 2e-3),
    (r"ppl|perplexity", 2e-2),
    (r"acc|f1|exact|score", 2e-2),
    (r".*", 1e-2),
)
#: The quantity classes seed noise is measured for (the keys of ppl.json's aggregate).
SEED_QUANTITIES = {"loss": "val_loss", "ppl": "val_ppl"}
SEEDED = re.compile(r"^(?P<base>.+)_s(?P<seed>\d+)$")


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


@dataclass(frozen=True)
class Cell:
    """One number's place: `where` (file and key path, or table, row and column), the run it
    belongs to (None: a table cell), its quantity (the key or column name) and, in a table, its
    row's label."""

    where: str
    run: str | None
    quantity: str
    label: str = ""

    @property
    def is_timing(self) -> bool:
        return bool(TIMINGS.search(self.quantity.lower()) or TIMINGS.search(self.label.lower()))


def _read_json(f: Path) -> Any:
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ShapelmError(f"{f}: not JSON ({type(err).__name__}: {err})") from None
    except OSError as err:
        raise ShapelmError(f"{f}: unreadable ({err.strerror or err})") from None


def collect(tree: Path) -> dict[Cell, float]:
    """Every number of a results tree: `runs/RUN/**/*.json` by file and key path, `tables/*.csv`
    numeric cells by file, row label (with its occurrence, from the second on) and column."""
    tree = Path(tree)
    if not tree.is_dir():
        raise ShapelmError(f"{tree}: no such results directory")
    out: dict[Cell, float] = {}
    for f in sorted(runs_under(tree).glob("**/*.json")):
        rel = f.relative_to(tree)
        run = rel.parts[1] if len(rel.parts) > 2 else None
        for path, value in _numbers(_read_json(f)):
            out[Cell(f"{rel.as_posix()}:{'.'.join(path)}", run, path[-1] if path else "")] = value
    for f in sorted((tree / "tables").glob("*.csv")):
        try:
            with open(f, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise ShapelmError(f"{f}: unreadable table ({err})") from None
        if not rows:
            continue
        header, seen = rows[0], Counter()
        for row in rows[1:]:
            if not row:
                continue
            seen[row[0]] += 1
            label = row[0] if seen[row[0]] == 1 else f"{row[0]}#{seen[row[0]]}"
            for col, cell in zip(header[1:], row[1:]):
                value = _as_number(cell)
                if value is not None:
                    out[Cell(f"tables/{f.name}:{label}:{col}", None, col, row[0])] = value
    return out


def provenance(tree: Path) -> dict[str, ProvenanceRecord]:
    """{run: its provenance record} of a results tree (runs without one left out)."""
    out = {}
    for f in sorted(runs_under(tree).glob("*/provenance.json")):
        try:
            out[f.parent.name] = ProvenanceRecord.read(f)
        except RecordError as err:
            raise ShapelmError(str(err)) from None
    return out


def seed_noise(tree: Path) -> tuple[dict[str, float], str]:
    """({quantity class: relative standard deviation across seeds}, where it was measured): the
    largest over the groups of seeded runs in `tree` (ppl.json's aggregate)."""
    groups: dict[str, list[str]] = {}
    runs = {f.parent.name for f in runs_under(tree).glob("*/ppl.json")}
    for run in sorted(runs):
        m = SEEDED.match(run)
        if m and m["base"] in runs:
            groups.setdefault(m["base"], [m["base"]]).append(run)
    noise: dict[str, float] = {}
    used = []
    for base, members in sorted(groups.items()):
        aggregates = [_read_json(run_under(tree, r) / "ppl.json").get("aggregate", {}) for r in members]
        for quantity, key in SEED_QUANTITIES.items():
            values = [a[key] for a in aggregates if isinstance(a.get(key), (int, float))]
            if len(values) >= 2 and all(map(math.isfinite, values)) and statistics.fmean(values):
                rel = statistics.stdev(values) / abs(statistics.fmean(values))
                noise[quantity] = max(noise.get(quantity, 0.0), rel)
        used.append(f"{base} ({len(members)} seeds)")
    return noise, ", ".join(used)


def relative_difference(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):  # both not a number: the same outcome
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


@dataclass
class Comparison:
    """The outcome: report lines and counts."""

    lines: list[str] = field(default_factory=list)
    exact: int = 0
    within: int = 0
    failures: int = 0

    @property
    def compared(self) -> int:
        return self.exact + self.within + self.failures


def _seed_tolerance(quantity: str, noise: dict[str, float]) -> float | None:
    q = quantity.lower()
    if re.search(TOLERANCES[0][0], q):
        return 0.0  # counts are not noisy
    for cls in ("loss", "ppl"):
        if cls in q and cls in noise:
            return 2 * noise[cls]
    return None


def compare(a: Path, b: Path, exact: bool = False) -> tuple[list[str], int]:
    """Report lines (one per number beyond what its provenance allows or on one side only, the
    provenance verdict, then a summary) and the count of failures. `exact`: every number must
    be exact, whatever the provenance says (a reproduction check)."""
    c = compare_trees(a, b, exact)
    return c.lines, c.failures


def compare_trees(a: Path, b: Path, exact: bool = False) -> Comparison:
    ours, theirs = collect(a), collect(b)
    prov_a, prov_b = provenance(a), provenance(b)
    differs = {run: (prov_a[run].first_difference(prov_b[run]) if run in prov_a else
                     "no provenance record in " + str(a))
               for run in prov_b}
    differs.update({run: "no provenance record in " + str(b) for run in prov_a if run not in prov_b})
    all_same = bool(prov_b) and not any(differs.values())
    noise, noise_from = seed_noise(b)
    out = Comparison()
    for key in sorted(set(ours) | set(theirs), key=lambda k: k.where):
        if key.is_timing:
            continue
        if key not in ours or key not in theirs:
            out.lines.append(f"{key.where}: only in {a if key in ours else b}")
            out.failures += 1
            continue
        x, y = ours[key], theirs[key]
        if x == y or (math.isnan(x) and math.isnan(y)):
            out.exact += 1
            continue
        same = differs.get(key.run) is None and key.run in prov_b if key.run else all_same
        rel = relative_difference(x, y)
        if same or exact:
            tol, why = 0.0, "same provenance: must be exact" if same else "--exact"
        else:
            seeded = _seed_tolerance(key.quantity, noise)
            tol, why = ((seeded, "2 x seed noise") if seeded is not None
                        else (tolerance(key.quantity), "fixed tolerance"))
        if rel <= tol:
            out.within += 1
            continue
        out.failures += 1
        out.lines.append(f"{key.where}: {x:.6g} vs {y:.6g}, relative difference {rel:.2e} > {tol:.1e} ({why})")
    if out.compared == 0:
        raise ShapelmError(f"{a} and {b}: no number to compare (empty or not results trees)")
    changed = {run: why for run, why in differs.items() if why}
    if all_same:
        out.lines.append(f"provenance: all {len(prov_b)} runs the same (code, data, initial weights, "
                         "numerics): every number must be exact")
    else:
        if not prov_b:
            out.lines.append(f"no provenance records in {b}: no run is known to be the same")
        for run, why in sorted(changed.items()):
            out.lines.append(f"provenance of {run} differs: {why}")
        if exact:
            out.lines.append("--exact: every number must be exact")
        elif noise:
            measured = ", ".join(f"{q} {v:.2%}" for q, v in sorted(noise.items()))
            out.lines.append(f"numbers of runs not known to be the same judged against 2 x seed noise "
                             f"({measured}; relative standard deviation across the seeds of "
                             f"{noise_from}), other quantities against fixed tolerances")
        else:
            out.lines.append("numbers of runs not known to be the same judged against fixed "
                             "tolerances (no seeded runs to measure seed noise)")
    out.lines.append(
        f"{out.exact} of {out.compared} numbers reproduced exactly, {out.within} more within "
        f"tolerance; {out.failures} not")
    return out
