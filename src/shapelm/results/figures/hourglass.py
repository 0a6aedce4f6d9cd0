"""The Hourglass paper's figures (arXiv 2602.06471): the frozen-head losses (Figure 2), the 906M
and 403M sweeps (Figures 3 and 6), accuracy against compute with its fits (Figure 4), decode
latency against context (Figure 5) and the 8B long-context panels (Section 4.6).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import matplotlib.ticker

from shapelm import reference
from shapelm.results import claims, fmt, intervals
from shapelm.results.context import Context
from shapelm.results.figures.common import (
    ARCH_COLOR, SCALE_COLORS, hide_value_axis, no_runs_panel, pending_panel, pending_text, run_label, scaled_note,
    scales_of,
)
from shapelm.results.tables.cells import RowRef, task_stderr
from shapelm.results.tables.hourglass import longctx_lengths


# --------------------------------------------------------------------------- arXiv 2602.06471


def fig2_frozen_head(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"hg403m_frozen_conv": "black", "hg403m_frozen_conv_wide": "#d62728", "hg403m_frozen_hg": "#1f77b4"}
    runs = ctx.runs_for_table("hourglass_fig2_frozen_head")
    ax.set_title("Figure 2: frozen LM head at 403M — training loss")
    if not runs:
        no_runs_panel(ax, ctx, "Figure 2 (the 403M frozen-head runs)")
        return fig
    any_curve = False
    for i, run in enumerate(runs):
        curve = ctx.curve(run)
        a = ctx.acc(run)
        desc = (f"{run}: d_model {a['d_model']}, d_h {a['d_h']}, K {a['k']}, L {a['n_layers']} "
                f"({a['matrices'] / 1e6:.0f}M attn+FFN)")
        if not curve:
            ax.plot([], [], color=colors.get(run, SCALE_COLORS[i % 5]), label=f"{desc} ({ctx.missing(run)})")
            continue
        any_curve = True
        xs, ys = curve
        ax.plot([x / 1e9 for x in xs], ys, color=colors.get(run, SCALE_COLORS[i % 5]), lw=1.2, label=desc)
    if not any_curve:
        pending_text(ax, "pending: no metrics.jsonl yet\n(paper: curves plotted only, no values printed)")
        total = max((ctx.acc(r)["total_tokens"] for r in runs), default=1e9)
        ax.set_xlim(0, total / 1e9)
        ax.set_yticks([])
    else:
        ax.set_yscale("log")
        ax.text(0.99, 0.97, "paper: curves not printed in the paper", transform=ax.transAxes,
                ha="right", va="top", fontsize=8, color="#666666")
    ax.set_xlabel("training tokens (billions)")
    ax.set_ylabel("training loss (nats/token)")
    if runs:
        ax.legend(fontsize=7, loc="upper right" if not any_curve else "lower left")
    ax.grid(alpha=0.3)
    return fig


def fig3_906m_sweep(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    runs = ctx.runs_for_table("hourglass_fig3_906m_sweep")
    ax.set_title("Figure 3: 906M sweep over d_h/d_model and L (K=4)")
    if not runs:
        no_runs_panel(ax, ctx, "Figure 3 (the 906M sweep)")
        paper_base = reference.printed("hourglass_table2", "hg906m_conv", "val_ppl").value
        ax.text(0.5, 0.2, f"paper: conventional Val PPL {paper_base:.2f}; (0.6, 12) and (0.6, 16) beat it by "
                "0.5%", transform=ax.transAxes, ha="center", fontsize=8, color="#d62728")
        return fig
    # As the paper: the marker encodes d_h/d_model (circles ~0.6, squares ~0.9; triangles ~0.7),
    # the colour the layer count.
    markers = {0.6: "o", 0.7: "^", 0.9: "s"}
    layer_colors = {12: ARCH_COLOR["hg"], 16: "#2ca02c"}

    def marker(ratio: float) -> str:
        return markers.get(round(ratio, 1), "D")

    drawn: set[tuple[str, int, float]] = set()
    have = False
    base = next((r for r in runs if ctx.acc(r)["kind"] == "conventional"), None)
    for run in runs:
        a, p = ctx.acc(run), ctx.ppl(run)
        if p and p.val_ppl:
            have = True
            conv = a["kind"] == "conventional"
            ax.scatter([a["flops_step"]], [p.val_ppl], marker="*" if conv else marker(a["ffn_ratio"]),
                       s=160 if conv else 55, zorder=3,
                       color="black" if conv else layer_colors.get(a["n_layers"], "#9467bd"))
            drawn.add(("conv" if conv else "hg", a["n_layers"], 0.0 if conv else round(a["ffn_ratio"], 1)))
    if base and ctx.ppl(base) and ctx.ppl(base).val_ppl:
        ax.axhline(ctx.ppl(base).val_ppl, color="black", ls="--", lw=0.8, label="conventional baseline (ours)")
    paper_base = reference.printed("hourglass_table2", "hg906m_conv", "val_ppl").value
    ax.axhline(paper_base, color="#d62728", ls=":", lw=1.0, label=f"paper: conventional Val PPL {paper_base:.2f}")
    # every configured point's FLOPs (accounting), as ticks along the bottom
    for run in runs:
        a = ctx.acc(run)
        conv = a["kind"] == "conventional"
        ax.axvline(a["flops_step"], ymax=0.05, color="black" if conv else "#1f77b4", lw=1)
        ax.annotate("conv" if conv else f"{a['ffn_ratio']:.1f},L{a['n_layers']}", (a["flops_step"], 0.06),
                    xycoords=("data", "axes fraction"), rotation=90, fontsize=6, ha="center", va="bottom")
    # legend entries only for the markers drawn
    for kind, n_layers, ratio in sorted(drawn):
        if kind == "conv":
            ax.scatter([], [], marker="*", s=120, color="black", label=f"conventional L={n_layers}"
                       + scaled_note(ctx, "hourglass_fig3_906m_sweep", runs))
        else:
            ax.scatter([], [], marker=marker(ratio), color=layer_colors.get(n_layers, "#9467bd"),
                       label=f"hourglass K=4, d_h/d_model ~{ratio:.1f}, L={n_layers}")
    if not have:
        pending_text(ax, "pending: no ppl.json yet\n(ticks at the bottom: each configuration's FLOPs)")
    ax.set_xlabel("training FLOPs per optimizer step (FLOPs per 4.19M tokens)")
    ax.set_ylabel("validation PPL (mean of per-set PPLs)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.text(1.02, 0.55, "paper (text only):\n(0.6, 12) and (0.6, 16) beat\nthe baseline by 0.5%;\n"
            "ratio ≈0.9 saves up to ~3% FLOPs\n\nticks: every configuration\n(d_h/d_model, L)",
            transform=ax.transAxes, va="top", fontsize=7, color="#d62728")
    ax.grid(alpha=0.3)
    return fig


#: Chance accuracy of each multiple-choice task shapelm runs: 1 / its choices (make-tasks'
#: held-out items have 4); LAMBADA's word accuracy has no chance level worth a line.
CHANCE = {"arc_easy": 1 / 4, "arc_challenge": 1 / 4, "hellaswag": 1 / 4, "piqa": 1 / 2, "sciq": 1 / 4,
          "commonsense_qa": 1 / 5, "winogrande": 1 / 2, "boolq": 1 / 2, "social_iqa": 1 / 3, "heldout_mc": 1 / 4}


def chance_level(tasks: list[str]) -> float | None:
    """The Avg Acc of guessing over `tasks` (the mean of their chance levels), None if one has none."""
    if not tasks or any(t not in CHANCE for t in tasks):
        return None
    return sum(CHANCE[t] for t in tasks) / len(tasks)


def _our_acc_tasks(ctx: Context, runs: list[str]) -> list[str]:
    """The tasks our Avg Acc averages (from downstream.json), in first-seen order."""
    tasks: dict[str, None] = {}
    for run in runs:
        tasks.update(dict.fromkeys(ctx.downstream_json(run).get("acc_tasks") or []))
    return list(tasks)


def fig4_compute_fit(ctx: Context) -> plt.Figure:
    """Paper points and fits on the left; ours in a panel of their own on the right, on an
    accuracy axis from 0 to 1: our Avg Acc averages whatever tasks the experiment runs, another
    quantity at another compute, and an autoscaled axis would blow a spread of 0.01 up to full height."""
    table = "hourglass_fig4_compute_fit"
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.4, 1]})
    paper = claims.fig4_points_paper()
    ours = claims.fig4_points_ours(ctx)
    pfits = claims.fig4_fits(paper)
    ofits = claims.fig4_fits(ours)
    names = {"conv": "conventional", "hg": "hourglass"}
    our_runs = [r for a in ours for r in ours[a][2]]
    scaled = scaled_note(ctx, table, our_runs)
    banded = False  # a bootstrap band drawn for one of our fits
    for i, arch in enumerate(("conv", "hg")):
        col = ARCH_COLOR[arch]
        ax.scatter(paper[arch][0], paper[arch][1], facecolors="none", edgecolors=col, s=55, zorder=3,
                   label=f"paper {names[arch]} (Table 2)")
        fit = pfits[i]
        if fit:  # drawn over the paper's own compute range: a log fit says nothing far outside it
            pc = [math.log10(c) for c in paper[arch][0]]
            pgrid = [min(pc) - 0.1 + (max(pc) - min(pc) + 0.2) * k / 20 for k in range(21)]
            ax.plot([10 ** g for g in pgrid], [fit.a + fit.b * g for g in pgrid], color=col, ls="--",
                    lw=0.9, label=f"paper fit {names[arch]}: R²={fit.r2:.3f}")
        if ours[arch][0]:
            ax2.scatter(ours[arch][0], ours[arch][1], color=col, s=45, zorder=4, marker="v" if scaled else "o",
                        label=f"ours {names[arch]}{scaled}")
            fit = ofits[i]
            if fit:
                oc = [math.log10(c) for c in ours[arch][0]]
                ogrid = [min(oc) - 0.1 + (max(oc) - min(oc) + 0.2) * k / 20 for k in range(21)]
                band = intervals.log_compute_fit_band(ours[arch][0], ours[arch][1],
                                              [avg_acc_stderr(ctx, r) for r in ours[arch][2]], ogrid)
                slope = ""
                if band:
                    banded = True
                    ax2.fill_between([10 ** g for g in ogrid], band.lo, band.hi, color=col, alpha=0.15, lw=0)
                    slope = f", b={band.slope.estimate:+.3f} [{band.slope.lo:+.3f}, {band.slope.hi:+.3f}]/decade"
                ax2.plot([10 ** g for g in ogrid], [fit.a + fit.b * g for g in ogrid], color=col, lw=1.4,
                         label=f"ours fit {names[arch]}: R²={fit.r2:.3f}{slope}")
    saving = pfits[2]
    ax.text(0.01, 0.97, f"8.7% less compute at matched accuracy (printed);\nrecomputed from the printed points: "
            f"{saving:.1%}", transform=ax.transAxes, va="top", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("total training compute C (FLOPs)")
    ax.set_ylabel("average downstream accuracy (5 tasks)")
    ax.set_title("paper: Acc = a + b log C", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    if our_runs:
        tasks = _our_acc_tasks(ctx, our_runs)
        ax2.set_xscale("log")
        our_c = [c for a in ours for c in ours[a][0]]
        ax2.set_xlim(min(our_c) / 3, max(our_c) * 3)  # a decade or so: readable ticks, no minor labels
        ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax2.set_ylim(0, 1)
        chance = chance_level(tasks)
        if chance is not None:  # tiny runs sit at it: the line says so
            ax2.axhline(chance, color="#777777", ls=":", lw=1.0, label=f"chance: {chance:.3f} (1/choices, mean over tasks)")
        ax2.set_ylabel(f"Avg Acc over {', '.join(tasks) or 'our tasks'}", fontsize=8)
        ax2.legend(fontsize=7, loc="lower right")  # the points sit high on the 0-1 axis
        if ofits[2] is not None:
            ax2.text(0.98, 0.97, f"ours: {ofits[2]:.1%} less compute at matched accuracy",
                     transform=ax2.transAxes, ha="right", va="top", fontsize=7)
        if banded:
            ax2.text(0.98, 0.91, "shaded, [ ]: 95% bootstrap of the points' evaluation noise (lm-eval stderr)",
                     transform=ax2.transAxes, ha="right", va="top", fontsize=7)
    else:
        # No compute or accuracy scale before there is a point: which tasks, at which compute.
        pending_panel(ax2, "ours: pending (no downstream.json yet)" if ctx.runs_for_table(table)
                      else "ours: no runs configured", value_axes="xy")
        ax2.set_ylabel("Avg Acc over our tasks", fontsize=8)
    ax2.set_xlabel("total training compute C (FLOPs)")
    ax2.set_title(f"ours{scaled}: another quantity, axis from 0 to 1" if our_runs else "ours", fontsize=10)
    ax2.grid(alpha=0.3, which="both")
    fig.suptitle("Hourglass Figure 4: accuracy vs training compute", fontsize=11)
    fig.tight_layout()
    return fig


def avg_acc_stderr(ctx: Context, run: str) -> float | None:
    """Standard error of a run's Avg Acc, the mean over its accuracy tasks: the tasks' lm-eval
    standard errors combined as independent, sqrt(sum se^2) / T (a run with seeds: its first
    seed's, an upper bound for the evaluation noise of the seeds' mean). None where one is missing."""
    row = RowRef(run, run, run, False)
    ses = [task_stderr(t)(ctx, row) for t in ctx.downstream_json(run).get("acc_tasks") or ()]
    if not ses or any(s is None for s in ses):
        return None
    return math.sqrt(sum(s * s for s in ses)) / len(ses)


def fig5_decode_latency(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lengths = ctx.decode_lengths()
    ticks = set(lengths)
    have = False
    pairs = sorted(ctx.decode_pairs.items(), key=lambda kv: ctx.acc(kv[1][0])["non_embedding"])
    ax.set_title("Figure 5: relative single-token decode latency (lower is faster)")
    if not pairs:
        no_runs_panel(ax, ctx, "Figure 5 (no run marked decode: true)")
        return fig
    top = 1.1  # the axis reaches every point drawn (a tiny pair's ratio can exceed 1)
    for i, (scale, (conv, hg)) in enumerate(pairs):
        col = SCALE_COLORS[i % len(SCALE_COLORS)]
        name = ctx.plan.runs[conv]["scale"]
        xs, ys, spans = [], [], []
        for L in lengths:
            s = ctx.speedup(scale, "mha", L)
            if s:
                xs.append(L)
                ys.append(1 / s)
                spans.append(ctx.latency_ratio_iqr(scale, "mha", L) or (1 / s, 1 / s))
        if xs:
            have = True
            top = max(top, 1.08 * max(ys), 1.08 * max(hi for _, hi in spans))
            ax.plot(xs, ys, "o-", color=col,
                    label=f"ours {name} (MHA){scaled_note(ctx, 'hourglass_fig5_decode_latency', [conv, hg])}")
            if any(lo != hi for lo, hi in spans):
                # The median ratio's spread from the recorded timings: Q1/Q3 of both runs combined.
                ax.errorbar(xs, ys, yerr=[[y - lo for y, (lo, _) in zip(ys, spans)],
                                          [hi - y for y, (_, hi) in zip(ys, spans)]],
                            fmt="none", ecolor=col, elinewidth=1, capsize=4,
                            label=f"{name}: range over both runs' latency IQRs")
        asym = ctx.acc(hg)["n_attn_layers"] / ctx.acc(conv)["n_attn_layers"]
        ax.axhline(asym, color=col, ls=":", lw=0.9, label=f"{name} asymptote L_hg/L_conv = {asym:.3f}")
        p = None
        try:
            p = reference.printed("hourglass_table2", hg, "decode_latency_64k")
        except KeyError:
            pass
        if p:
            paper_scale = {"hg906m_hg": "906M", "hg3b_hg": "3B", "hg8b_hg": "8B"}.get(hg, name)
            ax.scatter([65536], [p.value], facecolors="none", edgecolors=col, s=80, lw=1.5, zorder=4,
                       label=f"paper {paper_scale} 64k: {p.text}")
            ticks.add(65536)
    ax.axhline(1.0, color="black", lw=0.8)
    if not have:
        pending_text(ax, "pending: no decode.json yet\n(dotted: asymptotes from the configs; hollow: paper)", y=0.3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([fmt.length_label(L) for L in sorted(ticks)])
    ax.set_ylim(0, top)
    ax.set_xlabel("context length (tokens, cache built at this length)")
    ax.set_ylabel("decode latency, hourglass / conventional")
    ax.legend(fontsize=8, loc="lower left", ncol=2)
    ax.grid(alpha=0.3)
    return fig


def fig6_403m_sweep(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.3))
    runs = ctx.runs_for_table("hourglass_fig6_403m_sweep")
    ax.set_title("Figure 6: 403M sweep over d_h/d_model at (K, L) = (4, 12), (4, 24)")
    if not runs:
        no_runs_panel(ax, ctx, "Figure 6 (the 403M sweep)")
        return fig
    series: dict[int, list[tuple[float, float]]] = {}
    base = None
    for run in runs:
        a, p = ctx.acc(run), ctx.ppl(run)
        if a["kind"] == "conventional":
            base = (run, p.val_ppl if p else None)
            continue
        if p and p.val_ppl:
            series.setdefault(a["n_layers"], []).append((a["ffn_ratio"], p.val_ppl))
    for i, (L, pts) in enumerate(sorted(series.items())):
        pts.sort()
        ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=SCALE_COLORS[i], label=f"hourglass K=4, L={L}")
    if base and base[1]:
        ax.axhline(base[1], color="black", ls="--", lw=0.9, label="conventional 403M (ours)")
    ratios = sorted({ctx.acc(r)["ffn_ratio"] for r in runs if ctx.acc(r)["kind"] != "conventional"})
    for r in ratios:
        ax.axvline(r, ymax=0.04, color="#1f77b4", lw=1)
    if not series:
        pending_panel(ax, "pending: no ppl.json yet\n(ticks: configured d_h/d_model; paper: no values printed in the paper)")
    else:
        ax.text(0.99, 0.97, "paper: no values printed in the paper", transform=ax.transAxes, ha="right",
                va="top", fontsize=7, color="#666666")
    ax.set_xlabel("d_h / d_model")
    ax.set_ylabel("validation PPL (mean of per-set PPLs)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def longctx(ctx: Context) -> plt.Figure:
    table = "hourglass_longctx"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    runs = ctx.runs_for_table(table)
    lengths = longctx_lengths(ctx, runs)
    have = [False, False]
    for run in runs:
        col = ARCH_COLOR["conv"] if ctx.acc(run)["kind"] == "conventional" else ARCH_COLOR["hg"]
        for i, data in enumerate((ctx.proofpile(run), ctx.ruler(run))):
            if data:
                have[i] = True
                xs = sorted(data)
                axes[i].plot(xs, [data[x] for x in xs], "o-", color=col, label=run_label(ctx, run))
    for i, (ax, ylabel, title) in enumerate(zip(
            axes, ("Proof-pile perplexity", "RULER score (0-100, mean over tasks)"),
            ("Proof-pile PPL vs context (after YaRN)", "RULER vs context (after YaRN)"))):
        ax.set_title(title, fontsize=10)
        if not runs:
            no_runs_panel(ax, ctx, "the long-context table")
            continue
        if not have[i]:
            pending_text(ax, "pending: no results yet")
        else:
            ax.legend(fontsize=8)
        if i == 1:
            ax.set_ylim(-2, 102)  # RULER's own range: an all-zero score is a floor, not a flat line
            scores = [v for r in runs for v in (ctx.ruler(r) or {}).values()]
            if scores and not any(scores):
                pending_text(ax, "every run scores 0 at every length\n(the lines lie on top of each other)", y=0.5)
        ax.set_xscale("log", base=2)
        if lengths:  # one octave per tick, evenly spaced, whether or not a point is drawn yet
            ax.set_xlim(lengths[0] / 1.4, lengths[-1] * 1.4)
            ax.set_xticks(lengths)
            ax.set_xticklabels([fmt.length_label(L) for L in lengths])
            ax.minorticks_off()
        if not have[i] and i == 0:
            hide_value_axis(ax)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    who = " vs ".join(run_label(ctx, r) for r in runs) or "no runs"
    scale = scales_of(ctx, runs)
    scaled = ", scaled down ↓" if scaled_note(ctx, table, runs) else ""
    fig.suptitle(f"Long context: {who}" + (f" (scale {scale}{scaled})" if runs else "")
                 + "\npaper: the 8B pair; Table 3 body not in the paper's available text (lower PPL / higher RULER for "
                 "hourglass at every length)", fontsize=9)
    fig.tight_layout()
    return fig
