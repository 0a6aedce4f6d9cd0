"""The regenerated tables: which exist (TABLE_TITLES, `regenerated_tables`), and `build_table`,
which picks a table's builder (SPECIAL, by paper; the standard rows x columns otherwise) and fills
its cells.

    cells       the cell engine: data model, getters, standard columns, cell status
    gaps        documented differences from the printed values (KNOWN_DIFFERENCES)
    hourglass   arXiv 2602.06471's special tables (Table 7, 12, decode text, Figures 2-6, long context)
    tapered     arXiv 2606.23670's (Tables 1 and 2 on the in-distribution split, decode cost)
    lws         arXiv 2509.06518's (Table 3, validation curves, throughput)
    recipe      the training-recipe tables (Hourglass Table 4, Tapered Section 3.1)

A paper's module reads the cell engine alone, never another paper's.
"""

from __future__ import annotations

from typing import Callable

from shapelm import reference
from shapelm.plan.document import Plan
from shapelm.results.context import Context
from shapelm.results.tables.cells import (
    Col, INTERVAL_NOTE, RowRef, Table, accounting_value, fill_cells, ours_only, ppl_get, standard_table,
    standin_notes,
)
from shapelm.results.tables import hourglass, lws, recipe, tapered


TABLE_TITLES = {
    "hourglass_table1": "Hourglass Table 1: FFN shape at d_model 768, L 12 (113M)",
    "hourglass_table2": "Hourglass Table 2: configurations and quality-compute efficiency (906M, 3B, 8B)",
    "hourglass_table4": "Hourglass Table 4: training hyperparameters per scale (config vs paper)",
    "hourglass_table5": "Hourglass Table 5: conventional baseline controls",
    "hourglass_table6": "Hourglass Table 6: per-set validation loss and perplexity",
    "hourglass_table7": "Hourglass Table 7: per-task downstream results",
    "hourglass_table8": "Hourglass Table 8: sensitivity to reduced d_attn (0.9x) at 906M",
    "hourglass_table9": "Hourglass Table 9: no-attention (bigram) control",
    "hourglass_table10": "Hourglass Table 10: hourglass depth K at d_model 1032",
    "hourglass_table11": "Hourglass Table 11: d_h/d_model at d_model 1032, K 4",
    "hourglass_table12": "Hourglass Table 12: decode speedup and KV-cache reduction per mixer (906M)",
    "hourglass_decode_text": "Hourglass Section 1/4.7: 64k KV-cache reduction and decode speedups",
    "hourglass_fig2_frozen_head": "Hourglass Figure 2: frozen-LM-head configurations (403M)",
    "hourglass_fig3_906m_sweep": "Hourglass Figure 3: d_h/d_model x L sweep at 906M",
    "hourglass_fig4_compute_fit": "Hourglass Figure 4: accuracy vs training compute (points)",
    "hourglass_fig5_decode_latency": "Hourglass Figure 5: relative decode latency vs context",
    "hourglass_fig6_403m_sweep": "Hourglass Figure 6: d_h/d_model sweep at 403M",
    "hourglass_longctx": "Hourglass Table 3 (8B long context): Proof-pile PPL and RULER after YaRN",
    "tapered_table1": "Tapered Table 1: schedule x width-ratio sweep (440M)",
    "tapered_fig2_blocks": "Tapered Figure 2: three-block MLP widths (440M)",
    "tapered_table2": "Tapered Table 2: 760M / 1.3B language modeling and reasoning",
    "tapered_recipe": "Tapered Section 3.1: training recipe (config vs paper)",
    "lws_table3": "LWS Table 3: layer-wise scaling variants (~180M, 5B tokens)",
    "lws_throughput": "LWS abstract: training throughput of the variants vs the isotropic baseline",
    "throughput": "Training throughput per run (tokens/s, MFU)",
    "tapered_decode": "Tapered backbones: per-token decode cost vs the Transformer of the same size (ours)",
    "tapered_fig3_schedules": "Tapered Figure 3: the runs drawn in the schedule figure (shapes)",
    "tapered_fig4_novelty": "Tapered Figure 4: the runs whose layer-wise novelty is measured",
    "lws_fig3_profiles": "LWS Figure 3: the runs drawn in the per-layer profile figure (shapes)",
    "lws_fig4_val_ppl": "LWS Figure 4: validation PPL, LWS vs baseline at 12 and 18 layers (final values)",
    "lws_fig5_val_ppl_variants": "LWS Figure 5: validation PPL of every variant (final values)",
    "lws_fig6_train_ce": "LWS Figure 6: training cross-entropy (final values)",
    "lws_fig7_train_ce_zoom": "LWS Figure 7: training cross-entropy, zoomed (final values)",
}

# Tables in paper_values.yaml that this project does not regenerate (and why).
NOT_REGENERATED = {
    "hourglass_text_claims": "folded into derived_claims",
    "hourglass_v1_summary": "informational only (arXiv 2602.06471v1, a different setup)",
    "tapered_sec4_novelty": "its printed r ranges are drawn in the tapered_fig4_novelty figure",
}
# Tables without rows in paper_values.yaml that the project regenerates anyway.
EXTRA_TABLES = ["hourglass_fig5_decode_latency", "hourglass_longctx"]


def paper_tables() -> list[str]:
    """The papers' tables the project regenerates: paper_values order, then EXTRA_TABLES."""
    names = [t for t in reference.tables() if t not in NOT_REGENERATED]
    return names + [t for t in EXTRA_TABLES if t not in names]


def regenerated_tables(plan: Plan, papers: bool = True) -> list[str]:
    """Every table the experiment writes, in a fixed order: the papers' tables (paper_values
    order, then extra tables) if ``papers`` (shapelm.results.reproduces_papers), then any other
    table named in `tables:` of a run (sorted). Independent of finished runs."""
    names = paper_tables() if papers else []
    from shapelm.results.plain import LISTED_NAMES, TABLE_NAMES as PLAIN_TABLES  # shapelm.results.analyses

    extra = sorted({t for run in plan.runs.values() for t in run["tables"]} - set(paper_tables())
                   - set(PLAIN_TABLES) - set(LISTED_NAMES))
    return names + extra


def build_table(ctx: Context, name: str) -> Table:
    info = reference.table_info(name) if name in reference.tables() else {}
    title = TABLE_TITLES.get(name, name)
    caption = info.get("caption", "")
    notes = [n if isinstance(n, str) else n.get("text", "") for n in (info.get("notes") or [])]
    builder = SPECIAL.get(name, standard_table)
    cols, rows = builder(ctx, name)
    if name == "hourglass_table1":
        # Table 1 prints exp(Val Loss) as its Val PPL; the mean of per-set PPLs is shown beside.
        for c in cols:
            if c.name == "val_ppl":
                c.get, c.header = ppl_get("exp_mean_loss"), c.header + " (= exp(Val Loss), as Table 1)"
        cols.append(ours_only("val_ppl_mean_sets", "Val PPL, mean of per-set PPLs (Tables 5-11 aggregate)",
                               "metric", ppl_get("val_ppl"), "f3"))
    if name in ("hourglass_table7", "hourglass_table9", "hourglass_table10", "hourglass_table11"):
        cols.append(ours_only("val_ppl_exp_mean_loss", "exp(Val Loss) (Table 1 aggregate)", "metric",
                               ppl_get("exp_mean_loss"), "f3"))
    if name in ("tapered_table1", "tapered_fig2_blocks", "lws_table3") or name.startswith("hourglass_fig6"):
        have = {c.name for c in cols}
        if "params" not in have:
            cols.append(ours_only("params", "non-embedding params (ours)", "shape", accounting_value("non_embedding"), "M"))
        cols.append(ours_only("train_flops", "train FLOPs per step (ours)", "shape", accounting_value("flops_step"), "e"))
    if not caption:
        caption = title
    data_notes = standin_notes(ctx, rows, cols)
    if any(c.name.endswith("_hi95") for c in cols):
        data_notes.append(INTERVAL_NOTE)
    table = Table(name, title, caption, cols, rows, notes=notes, data_notes=data_notes)
    fill_cells(ctx, table)
    return table


# Tables whose rows or columns are not the paper's standard ones: name -> its builder, by paper.
SPECIAL: dict[str, Callable[[Context, str], tuple[list[Col], list[RowRef]]]] = {
    "hourglass_table4": recipe.recipe_table,
    "hourglass_table7": hourglass.table7,
    "hourglass_table12": hourglass.table12,
    "hourglass_decode_text": hourglass.decode_text,
    "hourglass_fig2_frozen_head": hourglass.fig2_frozen_head,
    "hourglass_fig3_906m_sweep": hourglass.fig3_906m_sweep,
    "hourglass_fig4_compute_fit": hourglass.fig4_compute_fit,
    "hourglass_fig5_decode_latency": hourglass.fig5_decode_latency,
    "hourglass_fig6_403m_sweep": hourglass.fig6_403m_sweep,
    "hourglass_longctx": hourglass.longctx_table,
    "tapered_table1": tapered.indist_tables,
    "tapered_fig2_blocks": tapered.indist_tables,
    "tapered_table2": tapered.table2,
    "tapered_recipe": recipe.recipe_table,
    "tapered_decode": tapered.decode_table,
    "lws_table3": lws.table3,
    **{t: lws.val_curve_tables for t in ("lws_fig4_val_ppl", "lws_fig5_val_ppl_variants", "lws_fig6_train_ce",
                                         "lws_fig7_train_ce_zoom")},
    "lws_throughput": lws.throughput_table,
    "throughput": lws.throughput_table,
}
