"""The long-context table and figure: Proof-pile PPL and RULER score vs context length, per run.

Input: result JSON files written by ``shapelm longctx proofpile`` and ``shapelm longctx ruler``
(``{"kind": "proofpile"|"ruler", "run": NAME, ...}``; `shapelm.records`), or those records as
dicts. Results of the same run are merged.
"""

from __future__ import annotations

import csv
from pathlib import Path

from shapelm import files
from shapelm.errors import DataError
from shapelm.records import ProofpileRecord, RulerRecord, load_json
from shapelm.longctx.ruler.tasks import TASK_NAMES

TABLE = "longctx"


RECORDS = {"proofpile": ProofpileRecord, "ruler": RulerRecord}


def _load(item) -> ProofpileRecord | RulerRecord:
    """A result of `shapelm longctx proofpile` or `ruler` (a path, or the dict it wrote)."""
    source = item if not isinstance(item, dict) else None
    obj = item if isinstance(item, dict) else load_json(item)
    if obj is None:
        raise DataError(f"{item}: no long-context result file")
    kind = obj.get("kind") if isinstance(obj, dict) else None
    if kind not in RECORDS:
        raise DataError(f"{source or 'result'}: key 'kind' should be 'proofpile' or 'ruler', not {kind!r}")
    return RECORDS[kind].from_dict(obj, source)


def collect(results_jsons) -> dict[str, dict]:
    """{run: {"proofpile": {length: ppl}, "ruler": {length: {task: score, "mean": m}}}}."""
    runs: dict[str, dict] = {}
    for item in results_jsons:
        rec = _load(item)
        run = rec.extra.get("run") or "run"
        entry = runs.setdefault(run, {"proofpile": {}, "ruler": {}})
        if isinstance(rec, ProofpileRecord):
            for L, v in rec.ppl.items():
                entry["proofpile"][int(L)] = float(v)
        else:
            for L, v in rec.scores.items():
                entry["ruler"][int(L)] = dict(v)
    return runs


def table_rows(runs: dict[str, dict]) -> list[dict]:
    rows = []
    for run in sorted(runs):
        e = runs[run]
        for L in sorted(set(e["proofpile"]) | set(e["ruler"])):
            row = {"run": run, "length": L, "proofpile_ppl": e["proofpile"].get(L)}
            r = e["ruler"].get(L, {})
            for t in TASK_NAMES:
                row[f"ruler_{t}"] = r.get(t)
            row["ruler_mean"] = r.get("mean")
            rows.append(row)
    return rows


def _fmt_len(L: int) -> str:
    return f"{L // 1024}k" if L >= 1024 and L % 1024 == 0 else str(L)


def write_longctx_report(results_jsons, out_dir_tables, out_dir_figures) -> dict[str, Path]:
    """Write ``longctx.csv`` / ``longctx.json`` and ``longctx.png`` / ``longctx.pdf``; return paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = collect(results_jsons)
    rows = table_rows(runs)
    tdir, fdir = Path(out_dir_tables), Path(out_dir_figures)
    tdir.mkdir(parents=True, exist_ok=True)
    fdir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": tdir / f"{TABLE}.csv", "json": tdir / f"{TABLE}.json",
             "png": fdir / f"{TABLE}.png", "pdf": fdir / f"{TABLE}.pdf"}
    fields = ["run", "length", "proofpile_ppl"] + [f"ruler_{t}" for t in TASK_NAMES] + ["ruler_mean"]
    with files.atomic_open(paths["csv"], newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else (round(r[k], 4) if isinstance(r[k], float) else r[k])) for k in fields})
    files.write_json(paths["json"], {"columns": fields, "rows": rows}, indent=1)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    all_lengths = sorted({r["length"] for r in rows})
    for run in sorted(runs):
        e = runs[run]
        if e["proofpile"]:
            xs = sorted(e["proofpile"])
            ax1.plot(xs, [e["proofpile"][x] for x in xs], marker="o", label=run)
        ruler = {L: v.get("mean") for L, v in e["ruler"].items() if v.get("mean") is not None}
        if ruler:
            xs = sorted(ruler)
            ax2.plot(xs, [ruler[x] for x in xs], marker="o", label=run)
    for ax, title, ylabel in (
        (ax1, "Proof-pile perplexity", "perplexity (lower is better)"),
        (ax2, "RULER (mean of tasks)", "score, % (higher is better)"),
    ):
        ax.set_xscale("log", base=2)
        if all_lengths:
            ax.set_xticks(all_lengths)
            ax.set_xticklabels([_fmt_len(L) for L in all_lengths])
            ax.minorticks_off()
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(title="run")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax2.set_ylim(-2, 102)
    fig.savefig(paths["png"], dpi=150)
    fig.savefig(paths["pdf"])
    plt.close(fig)
    return paths
