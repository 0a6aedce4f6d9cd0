"""The depth analyses' table and figure: every run that has a depth.json (`shapelm analyze depth`,
the runs listing `depth_analyses` in `tables:`, shapelm.plan.analyses), docs/RESULTS.md "Depth analyses".

Table: one row per applied block of every run instance (each seed its own rows; a looped model's
stored layers once per round): the residual-stream norm after the block, its relative write, and,
on the block's first round, the loss with that stored layer skipped (in every round) and its
increase over the intact model's loss. Runs listed but not measured yet are one "pending" row.
Figure: per run (the mean over its measured seeds) the norm per applied depth and the skip
increase per stored layer.
"""

from __future__ import annotations

import math
from typing import Any

from shapelm.plan.analyses import DEPTH_FILE, DEPTH_TABLE
from shapelm.records import DepthRecord
from shapelm.results.plain import PlainTable
from shapelm.results.readers import read_depth

TITLE = "Depth analyses: residual-stream norm per layer and the loss when a layer is skipped"
CAPTION = ("Per applied block of each run that lists the table (every seed): the mean L2 norm of the residual "
           "stream after the block (arXiv 2606.16112), its relative write ||h_{l+1} - h_l|| / ||h_l|| (blank where "
           "the block changes the stream's width), and on the block's first round the held-out loss with that stored "
           "layer replaced by the identity in every round, and its increase over the intact model's loss "
           "(arXiv 2606.26538). Measured on the first tokens of the experiment's wiki validation set.")

COLUMNS = [("run", "run"), ("seed_of", "seeds of"), ("depth", "applied depth"), ("layer", "stored layer"),
           ("round", "round"), ("residual_norm", "residual norm after the block"),
           ("write_ratio", "relative write"), ("skip_loss", "loss with the layer skipped"),
           ("skip_delta", "Δ loss when skipped"), ("loss", "loss (intact)"), ("tokens", "tokens"),
           ("status", "status")]


def measured(ctx) -> list[tuple[str, str, DepthRecord | None]]:
    """(instance, its run, its depth record or None) for every seed of every listing run."""
    return [(inst, run, read_depth(ctx.run_file(inst, DEPTH_FILE)))
            for run in ctx.runs_for_table(DEPTH_TABLE) for inst in ctx.instances(run)]


def record_rows(instance: str, run: str, record: DepthRecord) -> list[dict[str, Any]]:
    """The rows of one measured instance (module docstring)."""
    n_stored = len(record.layers)
    skip = {row["layer"]: row for row in record.layers}
    rows = []
    for applied in record.applied:
        layer, rnd = applied["layer"], applied["depth"] // max(n_stored, 1) + 1
        row = {"run": instance, "seed_of": run, "depth": applied["depth"] + 1, "layer": layer + 1, "round": rnd,
               "residual_norm": applied["residual_norm"], "write_ratio": _finite(applied["write_ratio"]),
               "loss": record.loss, "tokens": record.extra.get("tokens"), "status": "measured"}
        if rnd == 1 and layer in skip:
            row.update(skip_loss=skip[layer]["skip_loss"], skip_delta=skip[layer]["skip_delta"])
        rows.append(row)
    return rows


def _finite(value: float) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def depth_table(ctx) -> PlainTable:
    rows: list[dict[str, Any]] = []
    for instance, run, record in measured(ctx):
        rows += record_rows(instance, run, record) if record else [
            {"run": instance, "seed_of": run, "status": ctx.missing(instance)}]
    notes = ["Applied depth counts every block application (a looped model's stored layers once per round); the "
             "skip columns stand on a stored layer's first round and skip it in every round.",
             "Residual norm: before the final norm; h_0, the embeddings, is in depth.json as embedding_norm."]
    return PlainTable(DEPTH_TABLE, TITLE, COLUMNS, rows, notes)


def _mean_curves(records: list[DepthRecord]) -> tuple[list[float], list[float]]:
    """(norm per applied depth, skip increase per stored layer), averaged over the seeds' records."""
    norms = [sum(r.applied[i]["residual_norm"] for r in records) / len(records) for i in range(len(records[0].applied))]
    skips = [sum(r.layers[i]["skip_delta"] for r in records) / len(records) for i in range(len(records[0].layers))]
    return norms, skips


def depth_figure(ctx):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from shapelm.results.figures.common import pending_text

    by_run: dict[str, list[DepthRecord]] = {}
    for _, run, record in measured(ctx):
        if record is not None:
            by_run.setdefault(run, []).append(record)
    fig, (norm_ax, skip_ax) = plt.subplots(1, 2, figsize=(10, 4))
    if not by_run:
        for ax in (norm_ax, skip_ax):
            pending_text(ax, "pending: no depth.json yet")
            ax.set_axis_off()
        return fig
    for run, records in by_run.items():
        norms, skips = _mean_curves(records)
        label = f"{run} (n={len(records)})"
        norm_ax.plot(range(1, len(norms) + 1), norms, marker="o", ms=3, label=label)
        skip_ax.plot(range(1, len(skips) + 1), skips, marker="o", ms=3, label=label)
    for ax in (norm_ax, skip_ax):  # depths and layers are whole numbers
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    norm_ax.set(xlabel="applied depth (block applications)", ylabel="mean ||h|| after the block",
                title="Residual-stream norm per layer")
    skip_ax.axhline(0, color="k", lw=0.6)
    skip_ax.set(xlabel="stored layer skipped (every round)", ylabel="Δ held-out loss vs intact",
                title="Loss increase when a layer is skipped")
    skip_ax.legend(fontsize=7, frameon=False)
    fig.suptitle("Depth analyses (mean over each run's seeds)", fontsize=10)
    fig.tight_layout()
    return fig
