"""A plain table of our numbers (no paper column): rows of named values, written as CSV (full
precision), Markdown, LaTeX and HTML (what the Snakemake report shows) beside the paper tables.
The analyses beyond the papers (shapelm.results.analyses) build them.

`html_table` is every results table's HTML: built as elements by the standard library's
ElementTree, so every cell is escaped by the serializer, never pasted into markup."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET
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


def html_table(title: str, header: list[str], rows: list[list[str]], notes: list[str] = ()) -> str:
    """A standalone HTML page: the title, one <table> of text cells (a header row, then the rows)
    and the notes as a list. Snakemake's report embeds it as it is; the bytes depend only on the
    arguments."""
    page = ET.Element("html")
    head = ET.SubElement(page, "head")
    ET.SubElement(head, "meta", charset="utf-8")
    ET.SubElement(head, "style").text = (
        "body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
        "th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#f2f2f2}")
    body = ET.SubElement(page, "body")
    ET.SubElement(body, "h3").text = title
    table = ET.SubElement(body, "table")
    tr = ET.SubElement(ET.SubElement(table, "thead"), "tr")
    for h in header:
        ET.SubElement(tr, "th").text = h
    tbody = ET.SubElement(table, "tbody")
    for row in rows:
        tr = ET.SubElement(tbody, "tr")
        for cell in row:
            ET.SubElement(tr, "td").text = cell
    if notes:
        ul = ET.SubElement(body, "ul")
        for n in notes:
            ET.SubElement(ul, "li").text = n
    return "<!DOCTYPE html>\n" + ET.tostring(page, encoding="unicode", method="html") + "\n"


def to_html(t: PlainTable) -> str:
    return html_table(t.title, [h for _, h in t.columns], [[_text(r.get(k)) for k, _ in t.columns] for r in t.rows],
                      t.notes)


def write_plain_table(t: PlainTable, tables_dir: Path) -> list[Path]:
    paths = []
    for ext, fn in (("csv", to_csv), ("md", to_markdown), ("tex", to_latex), ("html", to_html)):
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

