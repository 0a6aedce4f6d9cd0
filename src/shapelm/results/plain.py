"""A plain table of our numbers (no paper column): rows of named values, written as CSV (full
precision), Markdown and LaTeX beside the paper tables. The analyses beyond the papers
(shapelm.results.analyses) build them."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shapelm import files
from shapelm.plan.analyses import DEPTH_TABLE


@dataclass
class PlainTable:
    name: str
    title: str
    columns: list[tuple[str, str]]  # (key, header)
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        return f"{v:.4g}" if (abs(v) >= 1e-3 or v == 0) and abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def to_csv(t: PlainTable) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([k for k, _ in t.columns])
    for r in t.rows:
        # full precision in the CSV (repr of floats), formatted text in Markdown / LaTeX
        w.writerow(["" if r.get(k) is None else (repr(r[k]) if isinstance(r[k], float) else _text(r[k]))
                    for k, _ in t.columns])
    return buf.getvalue()


def to_markdown(t: PlainTable) -> str:
    lines = [f"### {t.title}", "", "| " + " | ".join(h for _, h in t.columns) + " |",
             "|" + "---|" * len(t.columns)]
    for r in t.rows:
        lines.append("| " + " | ".join(_text(r.get(k)).replace("|", "\\|") for k, _ in t.columns) + " |")
    if t.notes:
        lines += [""] + [f"- {n}" for n in t.notes]
    return "\n".join(lines) + "\n"


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("$", r"\$"), ("{", r"\{"), ("}", r"\}"), ("~", r"\~{}"), ("^", r"\^{}")):
        s = s.replace(a, b) if a != "\\" else s.replace(a, "\0")
    return s.replace("\0", r"\textbackslash{}")


def to_latex(t: PlainTable) -> str:
    lines = [r"\begin{tabular}{" + "l" * len(t.columns) + "}", r"\hline",
             " & ".join(_tex_escape(h) for _, h in t.columns) + r" \\", r"\hline"]
    for r in t.rows:
        lines.append(" & ".join(_tex_escape(_text(r.get(k))) for k, _ in t.columns) + r" \\")
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_plain_table(t: PlainTable, tables_dir: Path) -> list[Path]:
    paths = []
    for ext, fn in (("csv", to_csv), ("md", to_markdown), ("tex", to_latex)):
        path = Path(tables_dir) / f"{t.name}.{ext}"
        files.write_text(path, fn(t))
        paths.append(path)
    return paths


#: The analyses' tables and figures (shapelm.results.analyses builds them): named here, below
#: the paper tables' module, which leaves them out of its own list.
TABLE_NAMES = ("paired_differences", "scaling_fits", "equal_budget")
FIGURE_NAMES = ("paired_differences", "scaling_fits", "equal_budget")
#: Analyses written only for an experiment whose runs list them in `tables:` (each a table and a
#: figure of the same name): the depth analyses of the runs that have them, the field's pairs.
FIELD_TABLE = "field_shapes"
LISTED_NAMES = (DEPTH_TABLE, FIELD_TABLE)


def listed_names(tables_of_runs) -> list[str]:
    """The LISTED_NAMES some run lists (`tables_of_runs`: each run's `tables:`), in that order."""
    listed = {t for tables in tables_of_runs for t in tables}
    return [name for name in LISTED_NAMES if name in listed]

