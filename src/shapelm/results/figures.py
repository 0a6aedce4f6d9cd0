"""The papers' figures from our runs, with the paper's printed values marked (hollow markers,
dashed lines, "paper"). A figure whose runs have not finished says so on the canvas."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from shapelm import reference as R  # noqa: E402
from shapelm import files  # noqa: E402
from shapelm.results import claims as C  # noqa: E402
from shapelm.results import fmt as F  # noqa: E402
from shapelm.results import intervals as I  # noqa: E402
from shapelm.results.context import Context  # noqa: E402
from shapelm.results.tables import RowRef, longctx_lengths, task_stderr  # noqa: E402

ARCH_COLOR = {"conv": "#444444", "hg": "#1f77b4"}
SCALE_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
PENDING_STYLE = dict(ha="center", va="center", fontsize=11, color="#888888",
                     bbox=dict(boxstyle="round", fc="#f7f7f7", ec="#cccccc"))


def _pending(ax, text: str, y: float = 0.5) -> None:
    ax.text(0.5, y, text, transform=ax.transAxes, **PENDING_STYLE)


def _no_value_axis(ax, axis: str = "y") -> None:
    """A placeholder panel's value axis has no scale yet: no 0-1 ticks that read as data."""
    getattr(ax, f"set_{axis}ticks")([])
    getattr(ax, f"set_{axis}ticklabels")([])


def _no_runs(ax, ctx: Context, what: str) -> None:
    """A panel this experiment configures no run for: say so, draw no axes that would mean data."""
    _pending(ax, f"no runs configured for {what}\nin experiment '{ctx.plan.name}'")
    ax.set_xticks([])
    ax.set_yticks([])


def _scaled_note(ctx: Context, table: str, runs: list[str]) -> str:
    """' (scaled down ↓)' when any of the runs is, as the tables flag it."""
    from shapelm.results.tables import is_scaled_down

    return " (scaled down ↓)" if any(is_scaled_down(ctx, table, r) for r in runs) else ""


def _scales(ctx: Context, runs: list[str]) -> str:
    return ", ".join(dict.fromkeys(str(ctx.plan.runs[r].get("scale", "?")) for r in runs if r in ctx.plan.runs))


def _save(fig, figures_dir: Path, name: str) -> list[Path]:
    figures_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        p = figures_dir / f"{name}.{ext}"
        with files.atomic_path(p, suffix=f".tmp.{ext}") as tmp:  # savefig picks the format by extension
            fig.savefig(tmp, dpi=150, bbox_inches="tight", metadata={"CreationDate": None} if ext == "pdf" else {})
        paths.append(p)
    plt.close(fig)
    return paths


def _label(ctx: Context, run: str) -> str:
    return ctx.plan.runs[run].get("label", run) if run in ctx.plan.runs else run


# --------------------------------------------------------------------------- arXiv 2602.06471


def fig2_frozen_head(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"hg403m_frozen_conv": "black", "hg403m_frozen_conv_wide": "#d62728", "hg403m_frozen_hg": "#1f77b4"}
    runs = ctx.runs_for_table("hourglass_fig2_frozen_head")
    ax.set_title("Figure 2: frozen LM head at 403M — training loss")
    if not runs:
        _no_runs(ax, ctx, "Figure 2 (the 403M frozen-head runs)")
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
        _pending(ax, "pending: no metrics.jsonl yet\n(paper: curves plotted only, no values printed)")
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
        _no_runs(ax, ctx, "Figure 3 (the 906M sweep)")
        paper_base = R.printed("hourglass_table2", "hg906m_conv", "val_ppl").value
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
    paper_base = R.printed("hourglass_table2", "hg906m_conv", "val_ppl").value
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
                       + _scaled_note(ctx, "hourglass_fig3_906m_sweep", runs))
        else:
            ax.scatter([], [], marker=marker(ratio), color=layer_colors.get(n_layers, "#9467bd"),
                       label=f"hourglass K=4, d_h/d_model ~{ratio:.1f}, L={n_layers}")
    if not have:
        _pending(ax, "pending: no ppl.json yet\n(ticks at the bottom: each configuration's FLOPs)")
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
    paper = C.fig4_points_paper()
    ours = C.fig4_points_ours(ctx)
    pfits = C.fig4_fits(paper)
    ofits = C.fig4_fits(ours)
    names = {"conv": "conventional", "hg": "hourglass"}
    our_runs = [r for a in ours for r in ours[a][2]]
    scaled = _scaled_note(ctx, table, our_runs)
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
                band = I.log_compute_fit_band(ours[arch][0], ours[arch][1],
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
        _pending(ax2, "ours: pending (no downstream.json yet)" if ctx.runs_for_table(table)
                 else "ours: no runs configured")
        _no_value_axis(ax2, "x")  # no compute or accuracy scale before there is a point
        _no_value_axis(ax2, "y")
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
        _no_runs(ax, ctx, "Figure 5 (no run marked decode: true)")
        return fig
    top = 1.1  # the axis reaches every point drawn (a tiny pair's ratio can exceed 1)
    for i, (scale, (conv, hg)) in enumerate(pairs):
        col = SCALE_COLORS[i % len(SCALE_COLORS)]
        name = ctx.plan.runs[conv]["scale"]
        xs, ys = [], []
        for L in lengths:
            s = ctx.speedup(scale, "mha", L)
            if s:
                xs.append(L)
                ys.append(1 / s)
        if xs:
            have = True
            top = max(top, 1.08 * max(ys))
            ax.plot(xs, ys, "o-", color=col,
                    label=f"ours {name} (MHA){_scaled_note(ctx, 'hourglass_fig5_decode_latency', [conv, hg])}")
        asym = ctx.acc(hg)["n_attn_layers"] / ctx.acc(conv)["n_attn_layers"]
        ax.axhline(asym, color=col, ls=":", lw=0.9, label=f"{name} asymptote L_hg/L_conv = {asym:.3f}")
        p = None
        try:
            p = R.printed("hourglass_table2", hg, "decode_latency_64k")
        except KeyError:
            pass
        if p:
            paper_scale = {"hg906m_hg": "906M", "hg3b_hg": "3B", "hg8b_hg": "8B"}.get(hg, name)
            ax.scatter([65536], [p.value], facecolors="none", edgecolors=col, s=80, lw=1.5, zorder=4,
                       label=f"paper {paper_scale} 64k: {p.text}")
            ticks.add(65536)
    ax.axhline(1.0, color="black", lw=0.8)
    if not have:
        _pending(ax, "pending: no decode.json yet\n(dotted: asymptotes from the configs; hollow: paper)", y=0.3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([F.length_label(L) for L in sorted(ticks)])
    ax.set_ylim(0, top)
    ax.set_xlabel("context length (tokens, cache built at this length)")
    ax.set_ylabel("decode latency, hourglass / conventional")
    ax.legend(fontsize=7, loc="lower left", ncol=2)
    ax.grid(alpha=0.3)
    return fig


def fig6_403m_sweep(ctx: Context) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4.3))
    runs = ctx.runs_for_table("hourglass_fig6_403m_sweep")
    ax.set_title("Figure 6: 403M sweep over d_h/d_model at (K, L) = (4, 12), (4, 24)")
    if not runs:
        _no_runs(ax, ctx, "Figure 6 (the 403M sweep)")
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
        _pending(ax, "pending: no ppl.json yet\n(ticks: configured d_h/d_model; paper: no values printed in the paper)")
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
                axes[i].plot(xs, [data[x] for x in xs], "o-", color=col, label=_label(ctx, run))
    for i, (ax, ylabel, title) in enumerate(zip(
            axes, ("Proof-pile perplexity", "RULER score (0-100, mean over tasks)"),
            ("Proof-pile PPL vs context (after YaRN)", "RULER vs context (after YaRN)"))):
        ax.set_title(title, fontsize=10)
        if not runs:
            _no_runs(ax, ctx, "the long-context table")
            continue
        if not have[i]:
            _pending(ax, "pending: no results yet")
        else:
            ax.legend(fontsize=8)
        if i == 1:
            ax.set_ylim(-2, 102)  # RULER's own range: an all-zero score is a floor, not a flat line
            scores = [v for r in runs for v in (ctx.ruler(r) or {}).values()]
            if scores and not any(scores):
                _pending(ax, "every run scores 0 at every length\n(the lines lie on top of each other)", y=0.5)
        ax.set_xscale("log", base=2)
        if lengths:  # one octave per tick, evenly spaced, whether or not a point is drawn yet
            ax.set_xlim(lengths[0] / 1.4, lengths[-1] * 1.4)
            ax.set_xticks(lengths)
            ax.set_xticklabels([F.length_label(L) for L in lengths])
            ax.minorticks_off()
        if not have[i] and i == 0:
            _no_value_axis(ax)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    who = " vs ".join(_label(ctx, r) for r in runs) or "no runs"
    scale = _scales(ctx, runs)
    scaled = ", scaled down ↓" if _scaled_note(ctx, table, runs) else ""
    fig.suptitle(f"Long context: {who}" + (f" (scale {scale}{scaled})" if runs else "")
                 + "\npaper: the 8B pair; Table 3 body not in the paper's available text (lower PPL / higher RULER for "
                 "hourglass at every length)", fontsize=9)
    fig.tight_layout()
    return fig


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


def _heatmap_runs(ctx: Context) -> tuple[dict[tuple[str, str], str], str]:
    """{(schedule, ratio): run} of the configured runs listing Tapered Table 1, placed by their
    shape (the tiny default's pair is not named tp440m_*), and the uniform run ('' if none)."""
    cells: dict[tuple[str, str], str] = {}
    uniform = ""
    for run in ctx.runs_for_table("tapered_table1"):
        arch = _arch_of(ctx, run)
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
    our_cells, our_uniform = _heatmap_runs(ctx)
    uniform_p = R.printed("tapered_table1", "tp440m_uniform", "val_ppl").value
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
                        v = R.printed("tapered_table1", run, "val_ppl").value
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
        runs_note = f", {_scales(ctx, [our_uniform, *our_cells.values()])}" if k > 0 and our_cells else ""
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
    rows = R.table("tapered_fig2_blocks")
    xs = range(len(rows))
    drawn: set[str] = set()
    bottom = 0.0  # bars start at zero: a cut axis makes an 8% difference look twice as tall
    for i, r in enumerate(rows):
        p = R.printed("tapered_fig2_blocks", r["run"], "val_ppl").value
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
    from shapelm.results.readers import load_json

    out = []
    for run in ctx.runs_for_table("tapered_fig4_novelty"):
        data = load_json(ctx.run_file(run, "novelty.json"))
        if isinstance(data, dict):
            out.append((_label(ctx, run), data, True))
    hf_dir = ctx.results_dir / "analysis" / "novelty"
    for path in sorted(hf_dir.glob("*.json")) if hf_dir.is_dir() else []:
        data = load_json(path)
        if isinstance(data, dict):
            out.append((path.stem, data, False))
    return out


def tapered_fig4_novelty(ctx: Context) -> plt.Figure:
    """rho^MLP and rho^block per layer (relative depth), and their Pearson r with layer index
    beside the paper's printed ranges (Section 4: GPT-2 family, 2,048 WikiText-2 tokens)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), gridspec_kw={"width_ratios": [1, 1, 0.8]})
    results = _novelty_results(ctx)
    runs = ctx.runs_for_table("tapered_fig4_novelty")
    paper = {q: (R.printed("tapered_sec4_novelty", f"novelty_rho_{q}", "r_min").value,
                 R.printed("tapered_sec4_novelty", f"novelty_rho_{q}", "r_max").value) for q in ("mlp", "block")}
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
            _pending(a, "pending: no novelty.json yet" if runs else
                     f"no runs configured\nin experiment '{ctx.plan.name}'")
    n_tok = sorted({d.get("n_tokens") for _, d, _ in results})
    fig.suptitle("Tapered Figure 4: layer-wise novelty" + (f" ({', '.join(map(str, n_tok))} tokens)" if n_tok else "")
                 + "; paper: GPT-2 family, 2,048 WikiText-2 tokens; ρ as defined in docs/RESULTS.md", fontsize=9)
    fig.tight_layout()
    return fig


def _arch_of(ctx: Context, run: str) -> dict:
    return ctx.plan.runs[run].get("arch", {})


def tapered_fig3_schedules(ctx: Context) -> plt.Figure:
    """The three decay schedules (linear, cosine, sigmoid) as d_ff(l)/d_ff across depth, at the
    shape of the first tapered run listing the figure; every listed run's built widths on top."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.set_title("Tapered Figure 3: MLP width schedules across depth", fontsize=10)
    runs = ctx.runs_for_table("tapered_fig3_schedules")
    ref = next((r for r in runs if r in ctx.plan.tapered_schedules), None)
    if ref is None:
        _no_runs(ax, ctx, "Tapered Figure 3 (a tapered run)")
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
                   marker="ox+^v"[i % 5], label=f"{_label(ctx, run)} (config)")
    ax.set_xlabel("layer index l")
    ax.set_ylabel(f"d_ff(l) / d_ff   (d_ff = {d_ff})")
    ax.text(0.99, 0.97, f"start/end {start:g}/{end:g}, L = {n_layers}, sigmoid k = {k:g}\n"
            f"every schedule sums to L·d_ff (matched parameters)", transform=ax.transAxes, ha="right",
            va="top", fontsize=7)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    return fig


def lws_fig3_profiles(ctx: Context) -> plt.Figure:
    """Per-layer FFN width and query-head count of the layer-wise scaling variants, as built."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    runs = ctx.runs_for_table("lws_fig3_profiles")
    if not runs:
        for ax in axes:
            _no_runs(ax, ctx, "LWS Figure 3 (the layer-wise scaling variants)")
        return fig
    depths = set()
    for i, run in enumerate(runs):
        layers, d_model = ctx.plan.layers[run], ctx.acc(run)["d_model"]
        n_layers = len(layers["ffn_width"])
        depths.add(n_layers)
        col = SCALE_COLORS[i % len(SCALE_COLORS)]
        xs = list(range(n_layers))
        label = f"{_label(ctx, run)} (L={n_layers})"
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
    return f"{_label(ctx, run)} ({a['n_layers']}L, {a['total_params'] / 1e6:.1f}M)"


def _lws_paper_final(run: str):
    """The paper's printed final validation PPL of a run (LWS Table 3), or None."""
    try:
        return R.printed("lws_table3", run, "val_ppl")
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
        _pending(ax, "no points in the zoomed range yet")
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
        _pending(ax, pending)
        ax.set_xlim(start / div, end / div)
        if not finals or pax is not ax:
            _no_value_axis(ax)
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
            _no_runs(ax, ctx, f"{depth} layers")
            continue
        _curve_panel(ctx, ax, mine, _val_getter(ctx), None, "validation PPL (in-distribution split)",
                     VAL_PENDING, scaled=bool(_scaled_note(ctx, table, mine)))
    fig.suptitle("LWS Figure 4: validation perplexity, LWS vs isotropic baseline" + _scaled_note(ctx, table, runs)
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
            _no_runs(ax, ctx, "LWS Figure 5")
            continue
        _curve_panel(ctx, ax, runs, _val_getter(ctx), zoom, "validation PPL (in-distribution split)",
                     VAL_PENDING, scaled=bool(_scaled_note(ctx, table, runs)))
    fig.suptitle("LWS Figure 5: validation perplexity of every variant" + _scaled_note(ctx, table, runs)
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
    ax.set_title(title + rng + _scaled_note(ctx, table, runs), fontsize=10)
    if not runs:
        _no_runs(ax, ctx, title)
        return fig
    _curve_panel(ctx, ax, runs, ctx.ce_curve, zoom, "training cross-entropy (nats/token, no z-loss)",
                 "pending: no metrics.jsonl yet\n(paper: curves plotted only, no values)", paper=False)
    return fig


def lws_fig6_train_ce(ctx: Context) -> plt.Figure:
    return _train_ce_figure(ctx, "lws_fig6_train_ce", None, "LWS Figure 6: training cross-entropy")


def lws_fig7_train_ce_zoom(ctx: Context) -> plt.Figure:
    return _train_ce_figure(ctx, "lws_fig7_train_ce_zoom", LWS_CE_ZOOM, "LWS Figure 7: training cross-entropy")


FIGURES: dict[str, tuple[Callable[[Context], plt.Figure], str]] = {
    "hourglass_fig2_frozen_head": (fig2_frozen_head, "Figure 2: training loss of the three 403M frozen-LM-head configurations."),
    "hourglass_fig3_906m_sweep": (fig3_906m_sweep, "Figure 3: 906M sweep, validation PPL vs training FLOPs per step; "
                                  "the conventional baseline and the paper's baseline PPL as horizontal lines."),
    "hourglass_fig4_compute_fit": (fig4_compute_fit, "Figure 4: average downstream accuracy vs total training compute "
                                   "with least-squares fits Acc = a + b log C per architecture; hollow markers and "
                                   "dashed fits are the paper's printed Table 2 points."),
    "hourglass_fig5_decode_latency": (fig5_decode_latency, "Figure 5: hourglass/conventional single-token decode "
                                      "latency vs context length per scale; dotted lines are the L_hg/L_conv "
                                      "asymptotes, hollow markers the paper's 64k values (Table 2)."),
    "hourglass_fig6_403m_sweep": (fig6_403m_sweep, "Figure 6: 403M validation PPL vs d_h/d_model at (K, L) = (4, 12) "
                                  "and (4, 24); dashed: the conventional 403M baseline."),
    "hourglass_longctx": (longctx, "Long context (arXiv 2602.06471 Section 4.6 / Table 3): Proof-pile PPL and RULER vs "
                          "context length for the 8B pair after YaRN."),
    "tapered_table1_heatmap": (tapered_heatmap, "Tapered Table 1 as a heatmap: schedule x start/end width ratio, "
                               "paper (only 3 of 15 cells quoted in the prose) beside ours."),
    "tapered_fig2_blocks": (tapered_blocks, "Tapered Figure 2: validation PPL of uniform vs three-block MLP widths; "
                            "hatched bars are the paper's values quoted in the text (in-distribution), "
                            "ours on the held-out split of the training stream and on the held-out sets."),
    "lws_fig4_val_ppl": (lws_fig4_val_ppl, "LWS Figure 4: validation PPL during training (held-out split of the "
                         "training stream) of the isotropic baseline and Vanilla LWS at 12 and 18 layers."),
    "lws_fig5_val_ppl_variants": (lws_fig5_val_ppl_variants, "LWS Figure 5: validation PPL during training of "
                                  "every variant, all of training and zoomed on the last 30% (where Framed "
                                  "bumps in the paper)."),
    "lws_fig6_train_ce": (lws_fig6_train_ce, "LWS Figure 6: training cross-entropy of every variant."),
    "lws_fig7_train_ce_zoom": (lws_fig7_train_ce_zoom, "LWS Figure 7: training cross-entropy, the last 10% of "
                               "training."),
    "tapered_fig3_schedules": (tapered_fig3_schedules, "Tapered Figure 3: the linear, cosine and sigmoid MLP width "
                               "schedules across depth (built widths; dotted: unrounded), with the configured "
                               "runs' per-layer widths."),
    "tapered_fig4_novelty": (tapered_fig4_novelty, "Tapered Figure 4: layer-wise novelty, the mean cosine of each "
                             "layer's MLP write (and whole-layer write) with the residual it is added to, per "
                             "layer; right: the Pearson r with layer index (first and last layers omitted) beside "
                             "the paper's printed ranges for the GPT-2 family."),
    "lws_fig3_profiles": (lws_fig3_profiles, "LWS Figure 3: per-layer FFN width and attention heads of the "
                          "layer-wise scaling variants, from the configs."),
}



def write_figure(ctx: Context, name: str, figures_dir: Path) -> list[Path]:
    fn, _ = FIGURES[name]
    return _save(fn(ctx), Path(figures_dir), name)
