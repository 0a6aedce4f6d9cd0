"""The special tables of the layer-wise scaling review (arXiv 2509.06518): Table 3 over seeds, the
final values behind its validation and training curves (Figures 4-7), and training throughput
of every run against its baseline at the same depth.
"""

from __future__ import annotations

import dataclasses

from shapelm.results import readers
from shapelm.results.context import Context
from shapelm.results.seeds import spread
from shapelm.results.tables.cells import (
    Col, Getter, HELDOUT_SETS_PPL_JSON, INDIST_NOTE, RowRef, accounting_value, as_float, delta_interval_cols,
    indist_get, ours_only, paper_rows, ppl_get, row_comparison_base, standard_table,
)


def table3(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """The review's Table 3 is the final validation PPL on the in-distribution held-out split, as
    its Figures 4-7 (one reader: `indist_get`); the four held-out sets' PPL stands beside it."""
    cols, rows = standard_table(ctx, name)
    for c in cols:
        if c.name == "params":
            c.get, c.header = accounting_value("total_params"), c.header + " (total, untied embeddings)"
        if c.name == "val_ppl":
            c.get, c.header = indist_get("ppl"), f"{c.header} ({INDIST_NOTE})"
        if c.name == "n_runs":  # the seeds with a final in-distribution evaluation (1 for a run without seeds)
            c.get, c.per_seed, c.style = (lambda ctx, row: float(_seeds_with(ctx, row, indist_get("ppl"))) or None), False, "int"
        if c.name == "val_ppl_std":  # sample std (ddof 1) over the seeds; none for one seed
            c.get, c.per_seed = _seed_std(indist_get("ppl")), False
    cols.append(ours_only("val_ppl_heldout_sets", HELDOUT_SETS_PPL_JSON, "metric", ppl_get("val_ppl"), "f3"))
    # The in-distribution split keeps no per-instance losses: the interval is on the held-out sets' PPL.
    cols += delta_interval_cols("val_ppl_heldout_delta", "Val PPL on the held-out sets - the baseline's",
                                row_comparison_base, "ppl", "abs", with_delta=True)
    return cols, rows


def _seeds_with(ctx: Context, row: RowRef, get: Getter) -> int:
    return sum(1 for n in ctx.instances(row.run) if get(ctx.single, dataclasses.replace(row, run=n)) is not None)


def _seed_std(get: Getter) -> Getter:
    def std(ctx: Context, row: RowRef) -> float | None:
        names = ctx.instances(row.run)
        vals = spread(get(ctx.single, dataclasses.replace(row, run=n)) for n in names)
        return vals.std
    return std


def throughput_base(ctx: Context, run: str, candidates: list[str]) -> str | None:
    """The isotropic baseline a run's throughput is compared with: among `candidates`, the same
    scale and depth, `variant: baseline` (LWS) or `kind: conventional` (Hourglass)."""
    me = ctx.plan.runs[run]
    for name in candidates:
        other = ctx.plan.runs[name]
        if (other["scale"] == me["scale"] and ctx.acc(name)["n_layers"] == ctx.acc(run)["n_layers"]
                and (other["arch"].get("variant") == "baseline" or other["arch"].get("kind") == "conventional")):
            return name
    return None


def throughput_ratio(ctx: Context, run: str, candidates: list[str]) -> float | None:
    """tokens/s of `run` over its baseline's (`throughput_base`), each its mean over seeds."""
    base = throughput_base(ctx, run, candidates)
    a, b = ctx.throughput(run), ctx.aggregated.throughput(base) if base else None
    return a["tokens_per_s"] / b["tokens_per_s"] if a and b and b["tokens_per_s"] else None


def throughput_table(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """Training throughput per run from its metrics.jsonl (docs/RESULTS.md "Throughput"): no
    paper values (the LWS paper states the claim in words; derived_claims checks it)."""
    rows = paper_rows(ctx, name)

    def T(key: str) -> Getter:
        return lambda ctx, row: as_float((ctx.throughput(row.run) or {}).get(key))

    def no_peak(ctx: Context, row: RowRef) -> str | None:
        t = ctx.throughput(row.run)
        if t and t.get("device_type") != "cuda":
            return f"n/a ({t.get('device_type') or 'unknown device'}: no peak FLOP/s)"
        return None

    cols = [ours_only("n_layers", "L", "shape", accounting_value("n_layers"), "int"),
            ours_only("flops_per_token", "train FLOPs per token (analytic)", "shape", accounting_value("flops_per_token"), "e"),
            ours_only("tokens_per_s", "tokens/s (all devices, median of logged steps)", "metric",
                       T("tokens_per_s"), "int"),
            ours_only("tokens_per_s_device", "tokens/s per device", "metric", T("tokens_per_s_device"), "int"),
            ours_only("model_tflops_device", "model FLOP/s per device (analytic FLOPs x tokens/s)", "metric",
                       T("model_flops_device"), "e"),
            ours_only("mfu", "MFU (model FLOP/s / peak)", "metric", T("mfu"), "pct_plain"),
            ours_only("tokens_per_s_rel", "tokens/s / baseline at the same depth", "metric",
                       lambda ctx, row: throughput_ratio(ctx, row.run, ctx.runs_for_table(name)) if row.run else None, "f3")]
    cols[5].absent = no_peak
    return cols, rows


def val_curve_tables(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """The runs of a validation/training-curve figure, with the curves' end points."""
    rows = [RowRef(n, ctx.plan.runs[n].get("label", n), n, False) for n in ctx.runs_for_table(name)]

    def best(key: str) -> Getter:
        def get(ctx: Context, row: RowRef) -> float | None:
            c = ctx.val_curve(row.run) if row.run else None
            if not c:
                return None
            i = min(range(len(c[1])), key=c[1].__getitem__)
            return c[1][i] if key == "ppl" else c[0][i]
        return get

    def final_ce(ctx: Context, row: RowRef) -> float | None:
        c = ctx.ce_curve(row.run) if row.run else None
        if not c:
            return None
        tail = c[1][-max(1, len(c[1]) // 20):]  # mean of the last 5% of logged steps
        return sum(tail) / len(tail)

    def final_sets(ctx: Context, row: RowRef) -> float | None:
        rec = ctx.final_val(row.run) if row.run else None
        return as_float(readers.val_value(rec, "aggregate", "val_ppl")) if rec else None

    cols = [Col("n_layers", "layers", "shape", accounting_value("n_layers"), "int", paper=False),
            Col("val_ppl", f"final validation PPL ({INDIST_NOTE})", "metric", indist_get("ppl"), "f3",
                paper_from=("lws_table3", "val_ppl")),
            ours_only("min_val_ppl", "lowest validation PPL during training", "metric", best("ppl"), "f3"),
            ours_only("min_val_ppl_tokens", "tokens at the lowest validation PPL", "metric", best("tokens"), "e"),
            ours_only("val_ppl_heldout_sets_in_training", "final Val PPL on the held-out sets during training "
                       "(mean of per-set PPLs, metrics.jsonl: at train.seq_len, at most train.eval_max_instances "
                       "per set; not ppl.json's val_ppl_heldout_sets)", "metric", final_sets, "f3"),
            ours_only("final_train_ce", "final training cross-entropy (mean of last 5% of log)", "metric",
                       final_ce, "f4")]
    return cols, rows
