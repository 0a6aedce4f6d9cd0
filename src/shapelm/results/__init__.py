"""Tables and figures beside the papers' printed values.

    build_results(plan, results_dir, figures_dir, work_dir) -> list[Path]
    artifacts(plan, results_dir=None, figures_dir=None) -> list[dict]
    write_captions(plan, report_dir) -> list[Path]

Each takes the experiment's plan (shapelm.plan.document.Plan: `read_plan("work/EXP/plan.json")`,
or `shapelm.plan.build.load_plan(config)`); nothing here reads or resolves a config.
`artifacts()` depends only on the plan (never on which runs finished), so the
Snakefile can declare every path as an output and as a `report()` entry. Each entry:
{"path", "kind": "table" | "figure", "name", "format", "caption", "caption_path", "category",
"report": bool (the one file per artifact meant for `snakemake --report`)}.
See docs/RESULTS.md.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path
from typing import Any

from shapelm.plan.document import Plan

log = logging.getLogger(__name__)

CLAIMS_NAME = "derived_claims"
REPORT_DIR = "workflow/report"

__all__ = ["build_results", "artifacts", "write_captions", "CLAIMS_NAME"]


def _category(name: str) -> str:
    if name.startswith("tapered"):
        return "Tapered LMs (arXiv 2606.23670)"
    if name.startswith("lws"):
        return "Layer-wise scaling (arXiv 2509.06518)"
    if name == CLAIMS_NAME:
        return "Derived claims"
    from shapelm.results.plain import LISTED_NAMES, TABLE_NAMES

    if name in (*TABLE_NAMES, *LISTED_NAMES):
        return "Beyond the papers"
    return "Hourglass (arXiv 2602.06471)"


def _table_caption(name: str) -> str:
    from shapelm import reference
    from shapelm.results.tables import TABLE_TITLES

    title = TABLE_TITLES.get(name, f"Table {name} (runs listing it in `tables:`)")
    paper = reference.table_info(name)["caption"] if name in reference.tables() else "No values printed in the paper."
    return (f"{title}. Each cell: the paper's printed value / ours (difference). Shape columns (params, "
            f"FLOPs, KV) come from the accounting of the run config; metrics from the per-run result JSONs; "
            f"'pending' marks runs not finished yet. Paper caption: {paper}")


def reproduces_papers(plan: Plan) -> bool:
    """Whether a run of this experiment lists one of the papers' tables or figures: then the
    papers' tables, figures and derived claims are all written, pending where nothing has run
    (the plan's full scope). An experiment of other shapes only (configs/field.yaml) writes its
    own tables and the analyses, not three papers' worth of empty ones."""
    from shapelm.results.figures import FIGURES
    from shapelm.results.tables import paper_tables

    papers = set(paper_tables()) | set(FIGURES)
    return any(t in papers for run in plan.runs.values() for t in run["tables"])


def artifacts(plan: Plan, results_dir: str | os.PathLike | None = None,
              figures_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every file `build_results` writes, in a fixed order, with captions for the report."""
    from shapelm.results import analyses
    from shapelm.results.figures import FIGURES
    from shapelm.results.tables import regenerated_tables

    rdir = Path(results_dir) if results_dir is not None else Path(plan.paths["results"])
    fdir = Path(figures_dir) if figures_dir is not None else Path(plan.paths["figures"])
    papers = reproduces_papers(plan)
    out: list[dict[str, Any]] = []
    for name in regenerated_tables(plan, papers):
        caption = _table_caption(name)
        for ext in ("csv", "md", "tex", "html"):
            out.append({"path": str(rdir / "tables" / f"{name}.{ext}"), "kind": "table", "name": name,
                        "format": ext, "caption": caption, "caption_path": f"{REPORT_DIR}/{name}.rst",
                        "category": _category(name), "report": ext == "html"})
    claims_caption = ("The papers' derived claims (Figure 4 fits and compute saving, decode asymptotes, KV "
                      "reductions, parameter matching, ...) beside the printed claims: recomputed from the "
                      "paper's own printed inputs and from ours.")
    for ext in ("csv", "md", "html") if papers else ():
        out.append({"path": str(rdir / "tables" / f"{CLAIMS_NAME}.{ext}"), "kind": "table", "name": CLAIMS_NAME,
                    "format": ext, "caption": claims_caption, "caption_path": f"{REPORT_DIR}/{CLAIMS_NAME}.rst",
                    "category": _category(CLAIMS_NAME), "report": ext == "html"})
    for name in analyses.table_names(plan):
        caption = analyses.table_caption(name)
        for ext in ("csv", "md", "tex", "html"):
            out.append({"path": str(rdir / "tables" / f"{name}.{ext}"), "kind": "table", "name": name,
                        "format": ext, "caption": caption, "caption_path": f"{REPORT_DIR}/{name}.rst",
                        "category": _category(name), "report": ext == "html"})
    figures = {**{n: c for n, (_, c) in FIGURES.items() if papers},
               **{n: analyses.figure_caption(n) for n in analyses.figure_names(plan)}}
    for name, caption in figures.items():
        for ext in ("png", "pdf"):
            out.append({"path": str(fdir / f"{name}.{ext}"), "kind": "figure", "name": name, "format": ext,
                        "caption": caption, "caption_path": f"{REPORT_DIR}/figure_{name}.rst",
                        "category": _category(name), "report": ext == "png"})
    return out


def write_captions(plan: Plan, report_dir: str | os.PathLike = REPORT_DIR) -> list[Path]:
    """One reStructuredText caption per artifact (what `report(path, caption=...)` points at)."""
    from shapelm.results.render import write_atomic

    written: dict[str, Path] = {}
    for a in artifacts(plan):
        path = Path(report_dir) / Path(a["caption_path"]).name
        if str(path) in written:
            continue
        write_atomic(path, a["caption"].replace("*", r"\*") + "\n")
        written[str(path)] = path
    return list(written.values())


def build_results(plan: Plan, results_dir: str | os.PathLike,
                  figures_dir: str | os.PathLike, work_dir: str | os.PathLike,
                  report_dir: str | os.PathLike | None = None,
                  only: set[str] | None = None) -> list[Path]:
    """Regenerate every table (CSV, Markdown, LaTeX), the derived claims and every figure
    (`only`: just the tables and figures of these names, and the claims); the papers' own only
    where the experiment `reproduces_papers`.

    Whatever per-run results exist are used; missing ones show as "pending". Returns the paths
    written (without `only`, exactly `artifacts(plan, results_dir, figures_dir)`'s paths).
    """
    from shapelm.results import analyses
    from shapelm.results import claims
    from shapelm.results.context import Context
    from shapelm.results.figures import FIGURES, write_figure
    from shapelm.results.render import write_table
    from shapelm.results.tables import build_table, regenerated_tables

    ctx = Context(plan, results_dir, work_dir)
    tables_dir = Path(results_dir) / "tables"
    papers = reproduces_papers(plan)
    written: list[Path] = []
    for name in regenerated_tables(plan, papers):
        if only is None or name in only:
            written += write_table(build_table(ctx, name), tables_dir)
    if papers:
        written += write_claims(claims.derived_claims(ctx), tables_dir)
    for name in analyses.table_names(plan):
        if only is None or name in only:
            written += analyses.write_plain_table(analyses.build_table(ctx, name), tables_dir)
    for name in FIGURES if papers else ():
        if only is None or name in only:
            written += write_figure(ctx, name, Path(figures_dir))
    for name in analyses.figure_names(plan):
        if only is None or name in only:
            written += analyses.write_figure(ctx, name, Path(figures_dir))
    if report_dir is not None:
        write_captions(plan, report_dir)
    log.info("results: wrote %d files under %s and %s", len(written), results_dir, figures_dir)
    return written


def write_claims(claims, tables_dir: Path) -> list[Path]:
    from shapelm.results.claims import CLAIM_COLUMNS, STATUS_LEGEND, claims_rows
    from shapelm.results.plain import html_table
    from shapelm.results.render import write_atomic

    rows = claims_rows(claims)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CLAIM_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    md = ["### Derived claims: printed vs recomputed", "",
          "*from paper values*: the claim recomputed from the paper's own printed inputs; *ours*: from this "
          "experiment's accounting (shape claims) or measured results (metric claims).", "", STATUS_LEGEND, "",
          "| claim | source | paper | from paper values | ours | status | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["claim"], r["source"], r["paper"], r["from_paper_values"] or "—", r["ours"], r["status"], r["note"]]
        md.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    paths = [tables_dir / f"{CLAIMS_NAME}.{ext}" for ext in ("csv", "md", "html")]
    write_atomic(paths[0], buf.getvalue())
    write_atomic(paths[1], "\n".join(md) + "\n")
    write_atomic(paths[2], html_table("Derived claims: printed vs recomputed", CLAIM_COLUMNS,
                                      [[str(r[k] or "") for k in CLAIM_COLUMNS] for r in rows], [STATUS_LEGEND]))
    return paths
