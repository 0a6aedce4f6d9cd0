"""The special tables of the Hourglass paper (arXiv 2602.06471): Tables 7 and 12, the decode
numbers of its text, the points behind Figures 2-6 and the 8B long-context table. Each builder
returns (columns, rows) for `shapelm.results.tables.build_table` to fill.
"""

from __future__ import annotations

from shapelm.results import fmt
from shapelm.results.context import Context, LONGCTX_LENGTHS, MLA_D_ROPE, MLA_R_KV
from shapelm.results.tables.cells import (
    Col, Getter, RowRef, accounting_value, avg_get, ours_only, paper_rows, ppl_get, standard_table,
    tasks_mean,
)


# ----------------------------------------------------------------------------- special tables


def _scale_of(row_id: str) -> str:
    """decode906m_mha -> 906m; decode_3b -> 3b."""
    s = row_id.removeprefix("decode").lstrip("_")
    return s.split("_")[0]


def table12(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """One row per mixer, each read from the decode pair of its scale, or (the tiny default, whose
    pair has another scale) from the pair whose runs list this table; those runs are not rows of
    their own. Beside the paper's lengths, the speedup at every length the benchmark measured."""
    listed = set(ctx.runs_for_table(name))
    table_pair = next((s for s, pair in ctx.decode_pairs.items() if set(pair) <= listed), None)
    pair_runs = set(ctx.decode_pairs.get(table_pair, ()))
    rows = [r for r in paper_rows(ctx, name) if r.in_paper or r.run not in pair_runs]
    for r in rows:
        if r.in_paper:
            scale = _scale_of(r.id)
            r.meta["scale"] = scale if scale in ctx.decode_pairs or not table_pair else table_pair
            r.meta["mixer"] = r.id.rsplit("_", 1)[-1]
            r.run = (ctx.decode_pairs.get(r.meta["scale"]) or (None,))[0]  # the pair's conventional run

    def pair_acc(ctx: Context, row: RowRef):
        pair = ctx.decode_pairs.get(row.meta.get("scale", ""))
        return (ctx.acc(pair[0]), ctx.acc(pair[1])) if pair else (None, None)

    def g(ctx: Context, row: RowRef) -> float | None:
        conv, _ = pair_acc(ctx, row)
        if not conv:
            return None
        mixer = row.meta["mixer"]
        if mixer == "mha":
            return 1.0
        if mixer == "gqa":
            return float(conv["n_heads"] // max(1, conv["n_heads"] // 4))
        return 2 * conv["d_attn"] / (MLA_R_KV + MLA_D_ROPE)

    def speedup(length: int) -> Getter:
        return lambda ctx, row: ctx.speedup(row.meta.get("scale", ""), row.meta.get("mixer", "mha"), length)

    def kv(ctx: Context, row: RowRef) -> float | None:
        conv, hg = pair_acc(ctx, row)
        if not conv or not hg:
            return None
        return 1 - hg["kv_bytes_per_token"] / conv["kv_bytes_per_token"]

    cols = [Col("g", "grouping factor g", "shape", g, "f2"),
            Col("speedup_32k", "decode speedup 32k", "metric", speedup(32768), "x"),
            Col("speedup_64k", "decode speedup 64k", "metric", speedup(65536), "x"),
            Col("speedup_128k", "decode speedup 128k", "metric", speedup(131072), "x"),
            Col("kv_reduction", "KV-cache reduction (1 - M_hg/M_conv)", "shape", kv, "pct_plain")]
    measured = sorted({int(r["length"]) for r in ctx.decode_rows} - {32768, 65536, 131072})
    cols += [ours_only(f"speedup_{fmt.length_label(L)}", f"decode speedup {fmt.length_label(L)} (measured)", "metric",
                        speedup(L), "x") for L in measured]
    return cols, rows


def decode_text(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)
    for r in rows:
        r.meta["scale"] = {"abstract": "906m"}.get(_scale_of(r.id), _scale_of(r.id))
        if r.id == "decode_abstract_1b":
            r.meta["scale"] = "906m"

    def pair(ctx: Context, row: RowRef):
        p = ctx.decode_pairs.get(row.meta.get("scale", ""))
        return (ctx.acc(p[0]), ctx.acc(p[1])) if p else (None, None)

    def kv(ctx: Context, row: RowRef) -> float | None:
        conv, hg = pair(ctx, row)
        return 1 - hg["kv_bytes_per_token"] / conv["kv_bytes_per_token"] if conv and hg else None

    def asym(ctx: Context, row: RowRef) -> float | None:
        conv, hg = pair(ctx, row)
        return conv["n_attn_layers"] / hg["n_attn_layers"] if conv and hg else None

    cols = [Col("kv_reduction_64k", "KV-cache reduction at 64k", "shape", kv, "pct_plain"),
            Col("speedup_64k", "decode speedup at 64k (MHA)", "metric",
                lambda c, r: c.speedup(r.meta.get("scale", ""), "mha", 65536), "x"),
            Col("speedup_asymptote", "asymptotic speedup L_conv/L_hg", "shape", asym, "x")]
    return cols, rows


def fig2_frozen_head(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    cols, rows = standard_table(ctx, name)

    def final_loss(ctx: Context, row: RowRef) -> float | None:
        c = ctx.curve(row.run) if row.run else None
        if not c:
            return None
        tail = c[1][-max(1, len(c[1]) // 20):]  # mean of the last 5% of logged steps
        return sum(tail) / len(tail)

    cols += [ours_only("params_matrices", "attention + FFN params (text: 403M)", "shape", accounting_value("matrices"), "M"),
             ours_only("train_flops", "train FLOPs per step", "shape", accounting_value("flops_step"), "e"),
             ours_only("final_train_loss", "final train loss (mean of last 5% of log)", "metric", final_loss, "f4")]
    return cols, rows


def _base_conv(ctx: Context, rows: list[RowRef]) -> RowRef | None:
    for r in rows:
        a = ctx.acc(r.run)
        if a and a["kind"] == "conventional":
            return r
    return None


def fig3_906m_sweep(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)

    def base(ctx: Context) -> RowRef | None:
        return _base_conv(ctx, rows)

    def runs_like(ctx: Context, row: RowRef) -> list[RowRef]:
        if row.run:
            return [row]
        if row.id.endswith("_r0p9"):  # the text's "≈0.9 squares": every 0.9 run
            return [r for r in rows if r.run and "_r0p9_" in r.run]
        return []

    def fraction(ctx: Context, row: RowRef) -> float | None:
        b, a = base(ctx), ctx.acc(row.run)
        return a["n_layers"] / ctx.acc(b.run)["n_layers"] if a and b else None

    def gain(ctx: Context, row: RowRef) -> float | None:
        b = base(ctx)
        pb = ctx.ppl(b.run) if b else None
        vals = [ctx.ppl(r.run) for r in runs_like(ctx, row)]
        vals = [1 - v.val_ppl / pb.val_ppl for v in vals if v and v.val_ppl and pb and pb.val_ppl]
        return max(vals) if vals else None

    def saving(ctx: Context, row: RowRef) -> float | None:
        b = base(ctx)
        if not b:
            return None
        fb = ctx.acc(b.run)["flops_step"]
        vals = [1 - ctx.acc(r.run)["flops_step"] / fb for r in runs_like(ctx, row)]
        return max(vals) if vals else None

    def ratio(ctx: Context, row: RowRef) -> float | None:
        vals = [ctx.acc(r.run)["ffn_ratio"] for r in runs_like(ctx, row) if ctx.acc(r.run)["ffn_ratio"]]
        return sum(vals) / len(vals) if vals else None

    cols = [Col("ffn_ratio", "d_h/d_model", "shape", ratio, "f3"),
            Col("n_layers", "L", "shape", accounting_value("n_layers"), "int"),
            Col("layer_fraction", "fraction of the baseline's layers", "shape", fraction, "pct_plain"),
            Col("val_ppl_gain", "Val PPL gain over the conventional baseline (1 - PPL/PPL_conv)", "metric", gain, "pct"),
            Col("flops_saving", "training FLOPs saving (1 - C/C_conv)", "shape", saving, "pct"),
            ours_only("train_flops", "train FLOPs per step", "shape", accounting_value("flops_step"), "e"),
            ours_only("val_ppl", "Val PPL", "metric", ppl_get("val_ppl"), "f3")]
    return cols, rows


def fig4_compute_fit(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = [RowRef(n, ctx.plan.runs[n].get("label", n), n, False) for n in ctx.runs_for_table(name)]
    cols = [ours_only("total_compute", "total training compute C (FLOPs)", "shape", accounting_value("total_compute"), "e"),
            Col("avg_acc", "Avg downstream accuracy", "metric", avg_get("avg_acc"), "f4",
                paper_from=("hourglass_table2", "avg_acc")),
            Col("train_flops", "train FLOPs per step", "shape", accounting_value("flops_step"), "e",
                paper_from=("hourglass_table2", "train_flops"))]
    return cols, rows


def fig5_decode_latency(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = []
    for scale, (conv, hg) in sorted(ctx.decode_pairs.items(), key=lambda kv: ctx.acc(kv[1][0])["non_embedding"]):
        rows.append(RowRef(hg, f"{scale} hourglass / conventional (MHA)", hg, False,
                           {"scale": scale, "conv": conv, "hg": hg}))

    def rel(length: int) -> Getter:
        def get(ctx: Context, row: RowRef) -> float | None:
            s = ctx.speedup(row.meta["scale"], "mha", length)
            return 1 / s if s else None
        return get

    def asym(ctx: Context, row: RowRef) -> float | None:
        return ctx.acc(row.meta["hg"])["n_attn_layers"] / ctx.acc(row.meta["conv"])["n_attn_layers"]

    cols = []
    for length in ctx.decode_lengths():
        paper_from = ("hourglass_table2", "decode_latency_64k") if length == 65536 else None
        cols.append(Col(f"latency_{fmt.length_label(length)}", f"relative latency at {fmt.length_label(length)}", "metric",
                        rel(length), "x", paper=paper_from is not None, paper_from=paper_from))
    cols.append(ours_only("asymptote", "L_hg/L_conv (asymptote)", "shape", asym, "x"))
    return cols, rows


def longctx_lengths(ctx: Context, runs: list[str]) -> list[int]:
    found: set[int] = set()
    for r in runs:
        found |= set((ctx.proofpile(r) or {}).keys()) | set((ctx.ruler(r) or {}).keys())
    return sorted(found) or LONGCTX_LENGTHS


def longctx_table(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)
    lengths = longctx_lengths(ctx, [r.run for r in rows if r.run])
    cols = []
    for L in lengths:
        cols.append(Col(f"proofpile_ppl_{fmt.length_label(L)}", f"Proof-pile PPL {fmt.length_label(L)}", "metric",
                        lambda c, r, L=L: (c.proofpile(r.run) or {}).get(L), "f3"))
    for L in lengths:
        cols.append(Col(f"ruler_{fmt.length_label(L)}", f"RULER {fmt.length_label(L)}", "metric",
                        lambda c, r, L=L: (c.ruler(r.run) or {}).get(L), "f2"))
    return cols, rows


def fig6_403m_sweep(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)
    cols = [Col("n_layers", "L", "shape", accounting_value("n_layers"), "int"),
            Col("ffn_ratio", "d_h/d_model", "shape", accounting_value("ffn_ratio"), "f3"),
            Col("val_loss", "Val Loss", "metric", ppl_get("val_loss"), "f4"),
            Col("val_ppl", "Val PPL", "metric", ppl_get("val_ppl"), "f3")]
    return cols, rows


def table7(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """Table 7's averages over its own five accuracy and two PPL tasks (the tiny default's
    held-out tasks are not among them, so there its averages stay pending with the columns)."""
    cols, rows = standard_table(ctx, name)
    for c in cols:
        if c.name == "avg_acc":
            c.get = tasks_mean(["arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa"])
        if c.name == "avg_ppl":
            c.get = tasks_mean(["trivia_qa", "natural_qs"])
    return cols, rows
