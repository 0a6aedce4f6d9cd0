"""The Tapered paper's figures (arXiv 2606.23670): Table 1 as a schedule x width-ratio heatmap,
the three-block MLP bars (Figure 2), the width schedules across depth (Figure 3) and layer-wise
novelty with its Pearson r (Figure 4).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from shapelm import reference
from shapelm.results.context import Context
from shapelm.results.figures.common import (
    SCALE_COLORS, arch_of, no_runs_panel, pending_text, run_label, scales_of,
)


# --------------------------------------------------------------------------- arXiv 2606.23670

SCHEDULES = ("linear", "cosine", "sigmoid")
RATIOS = ("1p25_0p75", "1p375_0p625", "1p5_0p5", "1p625_0p375", "1p75_0p25")


def _indist_ppl(ctx: Context, run: str) -> float | None:
    """A run's final PPL on the held-out split of its training stream (None: pending)."""
    from shapelm.results.readers import val_value

    rec = ctx.final_val(run) if ctx.has_run(run) else None
    return val_value(rec) if rec else None


def _sets_ppl(ctx: Context, run: str) -> float | None:
    p = ctx.ppl(run) if ctx.has_run(run) else None
    return p.val_ppl if p else None


def heatmap_runs(ctx: Context) -> tuple[dict[tuple[str, str], str], str]:
    """{(schedule, ratio): run} of the configured runs listing Tapered Table 1, placed by their
    shape (the tiny default's pair is not named tp440m_*), and the uniform run ('' if none)."""
    cells: dict[tuple[str, str], str] = {}
    uniform = ""
    for run in ctx.runs_for_table("tapered_table1"):
        arch = arch_of(ctx, run)
        if arch.get("kind") == "tapered" and "start" in arch and "end" in arch:
            ratio = f"{float(arch['start']):g}_{float(arch['end']):g}".replace(".", "p")
            cells.setdefault((str(arch.get("schedule")), ratio), run)
        elif arch.get("kind") == "conventional" and not uniform:
            uniform = run
    return cells, uniform


def _text_colour(rgba) -> str:
    """Black or white, whichever reads on a cell of this colour (WCAG relative luminance)."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in rgba[:3])
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 else "white"


def tapered_heatmap(ctx: Context) -> plt.Figure:
    # one panel per row: a column-width figure keeps its cells and their numbers readable
    fig, axes = plt.subplots(3, 1, figsize=(8, 9))
    our_cells, our_uniform = heatmap_runs(ctx)
    uniform_p = reference.printed("tapered_table1", "tp440m_uniform", "val_ppl").value
    ours = {1: _indist_ppl, 2: _sets_ppl}  # the paper's quantity first, the held-out sets beside it
    for k, (ax, who) in enumerate(zip(axes, ("paper (prose; 11 of 15 cells missing)",
                                             "ours, in-distribution split", "ours, held-out sets"))):
        grid: list[list[float]] = []
        unconfigured: set[tuple[int, int]] = set()
        for s in SCHEDULES:
            row = []
            for r in RATIOS:
                run = f"tp440m_{s}_{r}"
                v = None
                if k == 0:
                    try:
                        v = reference.printed("tapered_table1", run, "val_ppl").value
                    except KeyError:
                        v = None
                else:
                    mine = our_cells.get((s, r))
                    v = ours[k](ctx, mine) if mine else None
                    if not mine:
                        unconfigured.add((len(grid), len(row)))
                row.append(float("nan") if v is None else v)
            grid.append(row)
        finite = [v for row in grid for v in row if not math.isnan(v)]
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto",
                       vmin=min(finite) if finite else 0, vmax=max(finite) if finite else 1)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                mine = our_cells.get((SCHEDULES[i], RATIOS[j]))
                txt = ("n/a" if k == 0 else "not\nconfigured" if (i, j) in unconfigured
                       else ctx.missing(mine).replace(" at ", "\nat ")) if math.isnan(v) else f"{v:.2f}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=8,
                        color=_text_colour(im.cmap(im.norm(v))) if not math.isnan(v) else "#777777")
        ax.set_xticks(range(len(RATIOS)))
        ax.set_xticklabels([r.replace("p", ".").replace("_", "/") for r in RATIOS], fontsize=8)
        ax.set_yticks(range(len(SCHEDULES)))
        ax.set_yticklabels(SCHEDULES)
        ax.set_xlabel("d_ff start/end multiplier (first layer / last layer)")
        base = uniform_p if k == 0 else (ours[k](ctx, our_uniform) if our_uniform else None)
        missing = "not configured" if k > 0 and not our_uniform else "pending"
        runs_note = f", {scales_of(ctx, [our_uniform, *our_cells.values()])}" if k > 0 and our_cells else ""
        ax.set_title(f"{who}{runs_note}: validation PPL (uniform: {base:.2f})" if base else
                     f"{who}: validation PPL (uniform: {missing})", fontsize=9)
        if finite:
            fig.colorbar(im, ax=ax, label="validation PPL")
    fig.suptitle("Tapered Table 1: schedule x width-ratio sweep at 440M (lower is better);\nthe paper "
                 "reports in-distribution validation PPL (a held-out split of the training data)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def tapered_blocks(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    rows = reference.table("tapered_fig2_blocks")
    xs = range(len(rows))
    drawn: set[str] = set()
    bottom = 0.0  # bars start at zero: a cut axis makes an 8% difference look twice as tall
    for i, r in enumerate(rows):
        p = reference.printed("tapered_fig2_blocks", r["run"], "val_ppl").value
        ax.bar(i - 0.22, p, width=0.28, facecolor="none", edgecolor="#d62728", hatch="//",
               label="paper (text; in-distribution)" if i == 0 else None)
        ax.text(i - 0.22, p, f"{p:.2f}", ha="center", va="bottom", fontsize=7)
        for dx, get, color, what in ((0.06, _indist_ppl, "#1f77b4", "ours, in-distribution split"),
                                     (0.30, _sets_ppl, "#9ecae1", "ours, held-out sets")):
            v = get(ctx, r["run"])
            if v:
                ax.bar(i + dx, v, width=0.24, color=color, label=what if what not in drawn else None)
                drawn.add(what)
                ax.text(i + dx, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
            else:
                ax.text(i + dx, (bottom + p) / 2, ctx.missing(r["run"]) if ctx.has_run(r["run"]) else "not configured",
                        rotation=90, ha="center", va="center", fontsize=7, color="#888888")
    labels = []
    for r in rows:
        m = (r.get("shape") or {}).get("multipliers")
        labels.append(f"{r['label']}\n" + ("/".join(f"{x:g}" for x in m) if m else "1/1/1"))
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4 + 0.1)  # room for the "ours" slots of the last row
    ax.set_ylim(bottom, None)
    ax.set_ylabel("validation perplexity (axis from 0)")
    ax.set_title("Tapered Figure 2: three equal blocks, MLP width multipliers (440M)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # clear of the bars
    ax.grid(alpha=0.3, axis="y")
    return fig


# ------------------------------------------------- arXiv 2606.23670 Section 4 and the static shape figures


def _novelty_results(ctx: Context) -> list[tuple[str, dict, bool]]:
    """(label, novelty JSON, is ours) for our runs listing the figure, then the cached HF models."""
    from shapelm.results.readers import read_novelty

    out = []
    for run in ctx.runs_for_table("tapered_fig4_novelty"):
        data = read_novelty(ctx.run_file(run, "novelty.json"))
        if data is not None:
            out.append((run_label(ctx, run), data, True))
    hf_dir = ctx.results_dir / "analysis" / "novelty"
    for path in sorted(hf_dir.glob("*.json")) if hf_dir.is_dir() else []:
        data = read_novelty(path)
        if data is not None:
            out.append((path.stem, data, False))
    return out


def tapered_fig4_novelty(ctx: Context) -> plt.Figure:
    """rho^MLP and rho^block per layer (relative depth), and their Pearson r with layer index
    beside the paper's printed ranges (Section 4: GPT-2 family, 2,048 WikiText-2 tokens)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    results = _novelty_results(ctx)
    runs = ctx.runs_for_table("tapered_fig4_novelty")
    paper = {q: (reference.printed("tapered_sec4_novelty", f"novelty_rho_{q}", "r_min").value,
                 reference.printed("tapered_sec4_novelty", f"novelty_rho_{q}", "r_max").value) for q in ("mlp", "block")}
    for ax, q, title in ((axes[0], "mlp", r"$\rho_l^{\mathrm{MLP}}$: MLP write vs the residual it joins"),
                         (axes[1], "block", r"$\rho_l^{\mathrm{block}}$: layer write vs its input")):
        ax.set_title(title, fontsize=9)
        for i, (label, data, ours) in enumerate(results):
            rho = data.get(f"rho_{q}") or []
            n = len(rho)
            if n < 2:
                continue
            xs = [layer / (n - 1) for layer in range(n)]
            col = SCALE_COLORS[i % len(SCALE_COLORS)] if ours else plt.cm.Greys(0.45 + 0.5 * i / max(1, len(results)))
            inner = set(data.get("pearson_layers") or [])
            ax.plot(xs, [v if v is not None else float("nan") for v in rho], color=col, lw=1.2,
                    ls="-" if ours else "--", label=f"{label}{'' if ours else ' (HF)'}")
            ax.scatter([x for j, x in enumerate(xs) if j in inner], [rho[j] for j in range(n) if j in inner],
                       color=col, s=14, zorder=3)
            ax.scatter([x for j, x in enumerate(xs) if j not in inner and rho[j] is not None],
                       [rho[j] for j in range(n) if j not in inner and rho[j] is not None],
                       facecolors="none", edgecolors=col, s=18, zorder=3)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xlabel("relative depth l / (L-1)  (hollow: first/last, omitted from r)")
        ax.set_ylabel("mean cosine over tokens")
        ax.grid(alpha=0.3)
        if results:
            ax.legend(fontsize=7, loc="best")
    ax = axes[2]
    ax.set_title("Pearson r with layer index (layers 1..L-2)\nhatched: the paper's printed range (GPT-2 family)",
                 fontsize=9)
    for k, q in enumerate(("mlp", "block")):
        lo, hi = paper[q]
        ax.add_patch(plt.Rectangle((k - 0.35, lo), 0.7, hi - lo, facecolor="none", edgecolor="#d62728",
                                   hatch="//", lw=1.0))
        ax.text(k, hi + 0.03, f"paper {lo:.2f}-{hi:.2f}", ha="center", fontsize=7, color="#d62728")
        for i, (label, data, ours) in enumerate(results):
            r = data.get(f"pearson_r_{q}")
            if r is None:
                continue
            col = SCALE_COLORS[i % len(SCALE_COLORS)] if ours else "#555555"
            ax.scatter([k + 0.25 * (i / max(1, len(results) - 1) - 0.5)], [r], color=col,
                       marker="o" if ours else "s", s=28, zorder=3)
    ax.set_xticks([0, 1])
    ax.set_xticklabels([r"$\rho^{\mathrm{MLP}}$", r"$\rho^{\mathrm{block}}$"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-1.05, 1.1)
    ax.axhline(0, color="black", lw=0.6)
    ax.grid(alpha=0.3, axis="y")
    if not results:
        for a in axes[:2]:
            a.set_ylim(-1.05, 1.05)  # a cosine's own range, known before any run, as in the right panel
            pending_text(a, "pending: no novelty.json yet" if runs else
                         f"no runs configured\nin experiment '{ctx.plan.name}'")
    n_tok = sorted({d.get("n_tokens") for _, d, _ in results})
    fig.suptitle("Tapered Figure 4: layer-wise novelty" + (f" ({', '.join(map(str, n_tok))} tokens)" if n_tok else "")
                 + "; paper: GPT-2 family, 2,048 WikiText-2 tokens; ρ as defined in docs/RESULTS.md", fontsize=9)
    fig.tight_layout()
    return fig


def tapered_fig3_schedules(ctx: Context) -> plt.Figure:
    """The three decay schedules (linear, cosine, sigmoid) as d_ff(l)/d_ff across depth, at the
    shape of the first tapered run listing the figure; every listed run's built widths on top."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.set_title("Tapered Figure 3: MLP width schedules across depth", fontsize=10)
    runs = ctx.runs_for_table("tapered_fig3_schedules")
    ref = next((r for r in runs if r in ctx.plan.tapered_schedules), None)
    if ref is None:
        no_runs_panel(ax, ctx, "Tapered Figure 3 (a tapered run)")
        return fig
    shape = ctx.plan.tapered_schedules[ref]
    d_ff, n_layers, start, end = shape["d_ff"], shape["n_layers"], shape["start"], shape["end"]
    multiple, k = shape["multiple"], shape["sigmoid_k"]
    xs = list(range(n_layers))
    colors = {"linear": "#1f77b4", "cosine": "#d62728", "sigmoid": "#2ca02c"}
    for s in shape["widths"]:  # the schedules the plan drew at this shape (plan.build.TAPERED_SCHEDULES)
        ax.plot(xs, [v / d_ff for v in shape["raw"][s]], color=colors[s], lw=1.0, ls=":")
        ax.step(xs, [w / d_ff for w in shape["widths"][s]], where="mid", color=colors[s], lw=1.4,
                label=f"{s} (built, multiples of {multiple}; dotted: unrounded)")
    ax.axhline(1.0, color="black", lw=0.9, ls="--", label="uniform d_ff")
    for i, run in enumerate(runs):
        widths = ctx.plan.layers[run]["ffn_width"]
        ax.scatter(range(len(widths)), [w / d_ff for w in widths], s=12, zorder=3, color="black",
                   marker="ox+^v"[i % 5], label=f"{run_label(ctx, run)} (config)")
    ax.set_xlabel("layer index l")
    ax.set_ylabel(f"d_ff(l) / d_ff   (d_ff = {d_ff})")
    ax.text(0.99, 0.97, f"start/end {start:g}/{end:g}, L = {n_layers}, sigmoid k = {k:g}\n"
            f"every schedule sums to L·d_ff (matched parameters)", transform=ax.transAxes, ha="right",
            va="top", fontsize=7)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    return fig
