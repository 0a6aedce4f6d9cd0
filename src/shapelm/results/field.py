"""The field's newer shapes against their uniform baseline (configs/field.yaml; docs/RESULTS.md
"The field's shapes"): one table and one figure of the runs listing `field_shapes` in `tables:`.

Each arm (variable residual width, arXiv 2606.18246; looped blocks, 2607.13491; Prism's head
schedule, 2606.27449) is paired with its base by `intervals.comparison_base` (the `field_uniform`
run) and measured exactly as `paired_differences` measures a paper's pair (`intervals.pair_row`:
the paired bootstrap over evaluation windows, the seed-aware interval, the three-state verdict on
the claimed sign, which for these papers is "the arm's loss is lower"). Beside it, what the pair
matches: the parameters each side holds and its training FLOPs per token, from the plan's
accounting (stored parameters for a looped model, whose FLOPs count every round).
"""

from __future__ import annotations

from typing import Any

from shapelm.results.intervals import (
    COLUMNS as PAIRED_COLUMNS, VERDICT_COLOURS, comparison_base, pair_row,
)
from shapelm.results.plain import FIELD_TABLE, PlainTable

TITLE = "The field's shapes vs a uniform baseline at equal parameters: paired Δ loss and verdicts"
CAPTION = ("Variable residual width (arXiv 2606.18246), looped blocks (2607.13491) and Prism's head schedule "
           "(2606.27449), each against the uniform run of the same width, depth and stored parameters, trained on "
           "the same tokens with the same seeds. Δ held-out loss (arm − base) with the 95% paired bootstrap over "
           "evaluation windows and, with two or more seeds per arm, the interval over evaluation windows + seeds on "
           "which the verdict (holds / inconclusive / against the paper's claim of a lower loss) is taken.")

#: What each arm changes and what it holds equal to its base, by the arm's shape.
SHAPES = {
    "variable_width": ("variable residual width", "parameters (the paper's solve, rounded to `multiple`)"),
    "looped": ("looped blocks", "stored parameters (the unrolled FLOPs grow with the rounds)"),
    "head_schedule": ("head schedule", "parameters and, at the uniform mean head count, FLOPs"),
}

_OWN_COLUMNS = [("shape", "shape"), ("matched", "held equal"), ("params_arm", "params (arm)"),
                ("params_base", "params (base)"), ("params_rel", "params arm/base − 1"),
                ("flops_rel", "train FLOPs/token arm/base − 1"), ("loops", "loops (arm)")]
_FROM_PAIRED = ("arm", "base", "units", "d_loss", "d_loss_lo", "d_loss_hi", "d_loss_seeds_lo", "d_loss_seeds_hi",
                "verdict", "verdict_noise", "seed_std_arm", "seed_std_base", "seeds", "status")
COLUMNS = [c for c in PAIRED_COLUMNS if c[0] in ("arm", "base")] + _OWN_COLUMNS + [
    c for c in PAIRED_COLUMNS if c[0] in _FROM_PAIRED and c[0] not in ("arm", "base")]


def shape_of(ctx, run: str) -> str:
    """The arm's shape: `looped` for any run with loops > 1, else its arch kind."""
    arch = ctx.plan.runs[run].get("arch") or {}
    return "looped" if int(arch.get("loops", 1)) > 1 else str(arch.get("kind"))


def field_pairs(ctx) -> list[tuple[str, str]]:
    """(arm, base) of every primary run listing the table that has a comparison base."""
    return [(run, base) for run in ctx.runs_for_table(FIELD_TABLE)
            if ctx.plan.is_primary(run) and (base := comparison_base(ctx, run))]


def field_row(ctx, arm: str, base: str) -> dict[str, Any]:
    paired = pair_row(ctx, arm, base)
    shape = shape_of(ctx, arm)
    label, matched = SHAPES.get(shape, (shape, ""))
    acc_arm, acc_base = ctx.acc(arm), ctx.acc(base)
    row = {key: paired.get(key) for key in _FROM_PAIRED}
    row.update(shape=label, matched=matched, params_arm=acc_arm["total_params"], params_base=acc_base["total_params"],
               params_rel=acc_arm["total_params"] / acc_base["total_params"] - 1.0,
               flops_rel=acc_arm["flops_per_token"] / acc_base["flops_per_token"] - 1.0,
               loops=int((ctx.plan.runs[arm].get("arch") or {}).get("loops", 1)))
    return row


def field_table(ctx) -> PlainTable:
    notes = ["Params: every parameter the model holds (norms included; a looped model's stored layers once), "
             "from the plan's accounting. The variable-width arm is matched by the paper's own count, which "
             "leaves out norms and the columns the resize makes useless, then rounded: the held count differs.",
             "Intervals and verdicts as in paired_differences (same code): the verdict's interval covers "
             "evaluation windows + seeds where both arms have two or more finished seeds."]
    return PlainTable(FIELD_TABLE, TITLE, COLUMNS, [field_row(ctx, a, b) for a, b in field_pairs(ctx)], notes)


def field_figure(ctx):
    import matplotlib.pyplot as plt

    from shapelm.results.figures.common import pending_text

    rows = field_table(ctx).rows
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(rows), 3) + 2))
    drawn = [r for r in rows if r.get("d_loss_lo") is not None]
    if not drawn:
        pending_text(ax, "pending: no pair has held-out losses yet")
        ax.set_axis_off()
        return fig
    for y, r in enumerate(drawn):
        colour = VERDICT_COLOURS.get(r["verdict"], "tab:gray")
        if r.get("d_loss_seeds_lo") is not None:
            ax.plot([r["d_loss_seeds_lo"], r["d_loss_seeds_hi"]], [y, y], color=colour, lw=6, alpha=0.3,
                    solid_capstyle="butt")
        ax.errorbar(r["d_loss"], y, xerr=[[r["d_loss"] - r["d_loss_lo"]], [r["d_loss_hi"] - r["d_loss"]]],
                    fmt="o", color=colour, capsize=3)
        ax.annotate(f"{r['verdict']} (seeds {r['seeds']})", (r["d_loss"], y), xytext=(0, 7),
                    textcoords="offset points", ha="center", fontsize=7, color=colour)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(drawn)), [f"{r['shape']}\n{r['arm']} − {r['base']}\n(params {r['params_rel']:+.1%}, "
                                      f"FLOPs {r['flops_rel']:+.0%})" for r in drawn], fontsize=7)
    ax.set_ylim(len(drawn) - 0.5, -0.7)
    ax.set_xlabel("Δ held-out loss (arm − base); bars: 95% over evaluation windows, shaded: over windows + seeds "
                  "(the verdict's)", fontsize=8)
    ax.set_title("The field's shapes vs the uniform baseline (claim: the arm's loss is lower)", fontsize=9)
    fig.tight_layout()
    return fig
