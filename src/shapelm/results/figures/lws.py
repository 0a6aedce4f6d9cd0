"""The layer-wise scaling review's figures (arXiv 2509.06518): per-layer widths and heads of the
variants (Figure 3) and their validation and training curves, whole and zoomed (Figures 4-7),
with seed bands where a run has seeds.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from shapelm import reference
from shapelm.results.context import Context
from shapelm.results.figures.common import (
    SCALE_COLORS, hide_value_axis, no_runs_panel, pending_text, run_label, scaled_note,
)


def lws_fig3_profiles(ctx: Context) -> plt.Figure:
    """Per-layer FFN width and query-head count of the layer-wise scaling variants, as built."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    runs = ctx.runs_for_table("lws_fig3_profiles")
    if not runs:
        for ax in axes:
            no_runs_panel(ax, ctx, "LWS Figure 3 (the layer-wise scaling variants)")
        return fig
    depths = set()
    for i, run in enumerate(runs):
        layers, d_model = ctx.plan.layers[run], ctx.acc(run)["d_model"]
        n_layers = len(layers["ffn_width"])
        depths.add(n_layers)
        col = SCALE_COLORS[i % len(SCALE_COLORS)]
        xs = list(range(n_layers))
        label = f"{run_label(ctx, run)} (L={n_layers})"
        axes[0].plot(xs, [w / d_model for w in layers["ffn_width"]], "o-", ms=3, color=col, label=label)
        axes[1].plot(xs, layers["n_heads"], "o-", ms=3, color=col, label=label)
        axes[1].plot(xs, layers["n_kv_heads"], ":", color=col, lw=0.9)
    axes[0].set_ylabel("FFN width / d_model  (β_i after rounding)")
    axes[1].set_ylabel("query heads (solid), KV heads (dotted)")
    for ax, title in zip(axes, ("FFN width per layer", "attention heads per layer")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("layer index")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"LWS Figure 3: per-layer allocation profiles (L = {', '.join(map(str, sorted(depths)))}; "
                 "paper: the 18-layer baseline / vanilla / framed / reverse / crown)", fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- arXiv 2509.06518: curves

LWS_COLORS = {"baseline": "black", "vanilla": "#1f77b4", "framed": "#d62728", "reverse": "#2ca02c",
              "crown": "#9467bd"}
#: The zoomed panels show the last this fraction of training (arXiv 2509.06518 does not state its ranges:
#: the review asks for them; "Zoomed in 10" of Figure 7's caption read as the last 10%).
LWS_VAL_ZOOM, LWS_CE_ZOOM = 0.3, 0.1
VAL_PENDING = "pending: no evaluations in metrics.jsonl yet (train.eval_every)"


def _lws_style(ctx: Context, run: str) -> dict:
    arch = ctx.plan.runs[run].get("arch", {})
    return dict(color=LWS_COLORS.get(arch.get("variant"), "#7f7f7f"),
                ls="-" if ctx.acc(run)["n_layers"] >= 18 else "--")


def _lws_label(ctx: Context, run: str) -> str:
    a = ctx.acc(run)
    return f"{run_label(ctx, run)} ({a['n_layers']}L, {a['total_params'] / 1e6:.1f}M)"


def _lws_paper_final(run: str):
    """The paper's printed final validation PPL of a run (LWS Table 3), or None."""
    try:
        return reference.printed("lws_table3", run, "val_ppl")
    except KeyError:
        return None


#: Units training tokens are drawn in: the largest the run's total reaches (a tiny run's 246K
#: tokens would print as 0.000246 billions).
TOKEN_UNITS = ((1e9, "billions", "B"), (1e6, "millions", "M"), (1e3, "thousands", "K"), (1.0, "", ""))


def _token_unit(total: float) -> tuple[float, str, str]:
    """(divisor, axis word, suffix) for token counts up to `total` (plain tokens below one, as for
    a figure whose experiment has no run of it: total 0)."""
    return next((u for u in TOKEN_UNITS if total >= u[0]), TOKEN_UNITS[-1])


def _tokens_text(n: float, total: float) -> str:
    div, _, suffix = _token_unit(total)
    return f"{n / div:.3g}{suffix}"


def _zoom_limits(ax, curves: list[tuple[list[float], list[float]]], start: float, end: float,
                 div: float = 1e9) -> None:
    """x from start to end; y fitted to the points inside (a bump at the end stays visible)."""
    inside = [y for xs, ys in curves for x, y in zip(xs, ys) if start <= x <= end]
    ax.set_xlim(start / div, end / div)
    if not inside:
        pending_text(ax, "no points in the zoomed range yet")
    else:
        lo, hi = min(inside), max(inside)
        pad = 0.08 * (hi - lo or abs(hi) or 1.0)
        ax.set_ylim(lo - pad, hi + pad)


def _seed_band(ctx: Context, run: str, get) -> tuple[list[float], list[float], list[float], int] | None:
    """(x, min, max, n seeds) over the seeds of a run with `seeds:` at the x all of them have;
    None for a run of one seed (or fewer than two seeds with a curve yet)."""
    curves = [c for c in (get(name) for name in ctx.instances(run)) if c]
    if len(curves) < 2:
        return None
    at = [dict(zip(*c)) for c in curves]
    xs = sorted(set.intersection(*(set(a) for a in at)))
    if not xs:
        return None
    return xs, [min(a[x] for a in at) for x in xs], [max(a[x] for a in at) for x in xs], len(curves)


def _curve_panel(ctx: Context, ax, runs: list[str], get, zoom: float | None, ylabel: str,
                 pending: str, paper: bool = True, scaled: bool = False) -> bool:
    """Every run's curve on one axis (tokens in the unit the total reads best in); `zoom`: only
    the last fraction. `paper`: the paper's printed final value of each run drawn as a hollow
    marker at the end of training (LWS Table 3), not only named; for `scaled` (scaled-down) runs
    on an axis of its own at the right, since a tiny run's perplexity is another quantity."""
    pax = ax.twinx() if paper and scaled and any(_lws_paper_final(r) for r in runs) else ax
    total = max((ctx.acc(r)["total_tokens"] for r in runs), default=1e9)
    div, unit, _ = _token_unit(total)
    curves = []
    finals = []  # (x, y) of the paper's markers, which the zoomed axis keeps in view
    for run in runs:
        style = _lws_style(ctx, run)
        printed = _lws_paper_final(run) if paper else None
        if printed is not None:
            finals.append(([total], [printed.value]))
            pax.plot([total / div], [printed.value], marker="D", ms=6, mfc="none", mew=1.3, ls="none",
                     color=style["color"], zorder=5)
            pax.annotate(printed.text, (total / div, printed.value), xytext=(6 + 28 * (len(finals) % 2 == 0), 0),
                         textcoords="offset points",
                        va="center", fontsize=7, color=style["color"])
        c = get(run)
        if not c:
            ax.plot([], [], **style, label=f"{_lws_label(ctx, run)} ({ctx.missing(run)})")
            continue
        curves.append(c)
        band = _seed_band(ctx, run, get)
        label = _lws_label(ctx, run)
        if band:
            xs, lo, hi, n = band
            ax.fill_between([x / div for x in xs], lo, hi, color=style.get("color"), alpha=0.2, lw=0)
            label += f"; band: min-max of {n} seeds"
        ax.plot([x / div for x in c[0]], c[1], lw=1.2, marker="." if len(c[0]) < 60 else None,
                ms=3, **style, label=label)
    if finals:
        ax.plot([], [], marker="D", mfc="none", mew=1.3, ls="none", color="#555555",
                label="paper's final value (printed, LWS Table 3)" + (", right axis" if pax is not ax else ""))
        if pax is not ax:
            pax.set_ylabel("paper's final PPL (its own scale)", fontsize=8)
    start = (1 - zoom) * total if zoom else 0.0  # the range the panel's title names
    end = total + (total - start) * (0.12 if finals else 0.0)  # room for the markers' values
    if not curves:
        pending_text(ax, pending)
        ax.set_xlim(start / div, end / div)
        if not finals or pax is not ax:
            hide_value_axis(ax)
    elif zoom:
        _zoom_limits(ax, curves + (finals if pax is ax else []), start, total, div)
        ax.set_xlim(start / div, end / div)
    ax.set_xlabel(f"training tokens ({unit})" if unit else "training tokens")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if runs:  # below the axes: never over a curve
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return bool(curves)


def _val_getter(ctx: Context):
    return lambda run: ctx.val_curve(run)


def lws_fig4_val_ppl(ctx: Context) -> plt.Figure:
    table = "lws_fig4_val_ppl"
    runs = ctx.runs_for_table(table)
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    for ax, depth in zip(axes, (12, 18)):
        mine = [r for r in runs if ctx.acc(r)["n_layers"] == depth]
        ax.set_title(f"{depth} layers", fontsize=10)
        if not mine:
            no_runs_panel(ax, ctx, f"{depth} layers")
            continue
        _curve_panel(ctx, ax, mine, _val_getter(ctx), None, "validation PPL (in-distribution split)",
                     VAL_PENDING, scaled=bool(scaled_note(ctx, table, mine)))
    fig.suptitle("LWS Figure 4: validation perplexity, LWS vs isotropic baseline" + scaled_note(ctx, table, runs)
                 + "\nheld-out split of the training stream, as the paper's 10M-token held-out set",
                 fontsize=9)
    fig.tight_layout()
    return fig


def lws_fig5_val_ppl_variants(ctx: Context) -> plt.Figure:
    table = "lws_fig5_val_ppl_variants"
    runs = ctx.runs_for_table(table)
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    total = max((ctx.acc(r)["total_tokens"] for r in runs), default=0)
    for ax, zoom in zip(axes, (None, LWS_VAL_ZOOM)):
        ax.set_title("all of training" if not zoom else
                     f"zoomed: {_tokens_text((1 - zoom) * total, total)} to {_tokens_text(total, total)} "
                     f"tokens (last {zoom:.0%})", fontsize=10)
        if not runs:
            no_runs_panel(ax, ctx, "LWS Figure 5")
            continue
        _curve_panel(ctx, ax, runs, _val_getter(ctx), zoom, "validation PPL (in-distribution split)",
                     VAL_PENDING, scaled=bool(scaled_note(ctx, table, runs)))
    fig.suptitle("LWS Figure 5: validation perplexity of every variant" + scaled_note(ctx, table, runs)
                 + "\npaper: all variants close, below the 18L baseline; Framed bumps late in training",
                 fontsize=9)
    fig.tight_layout()
    return fig


def _train_ce_figure(ctx: Context, table: str, zoom: float | None, title: str) -> plt.Figure:
    runs = ctx.runs_for_table(table)
    fig, ax = plt.subplots(figsize=(7.5, 6))
    total = max((ctx.acc(r)["total_tokens"] for r in runs), default=0)
    rng = (f" (zoomed: {_tokens_text((1 - zoom) * total, total)} to {_tokens_text(total, total)} tokens)"
           if zoom and runs else "")
    ax.set_title(title + rng + scaled_note(ctx, table, runs), fontsize=10)
    if not runs:
        no_runs_panel(ax, ctx, title)
        return fig
    _curve_panel(ctx, ax, runs, ctx.ce_curve, zoom, "training cross-entropy (nats/token, no z-loss)",
                 "pending: no metrics.jsonl yet\n(paper: curves plotted only, no values)", paper=False)
    return fig


def lws_fig6_train_ce(ctx: Context) -> plt.Figure:
    return _train_ce_figure(ctx, "lws_fig6_train_ce", None, "LWS Figure 6: training cross-entropy")


def lws_fig7_train_ce_zoom(ctx: Context) -> plt.Figure:
    return _train_ce_figure(ctx, "lws_fig7_train_ce_zoom", LWS_CE_ZOOM, "LWS Figure 7: training cross-entropy")
