"""One table across the three papers at equal budget (docs/RESULTS.md "Equal-budget table").

At each scale, five shapes on the Tapered recipe (32K vocabulary, 4K sequences, the same tokens
and data): the conventional (uniform) run, Tapered's cosine 1.5/0.5 schedule, an hourglass, LWS's
best 18-layer variant (crown) and a tapered hourglass (cosine 1.5/0.5 over K = 4 sub-MLPs), with
non-embedding parameters and training FLOPs per token within 1% of the conventional run's
(widths found with `shapelm solve`; configs/paper.yaml). Each shape's held-out loss difference to
the conventional run carries the paired bootstrap interval of `shapelm.results.intervals`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shapelm.results.plain import PlainTable

TITLE = "Equal budget across the three papers: five shapes at equal parameters and FLOPs/token"
CAPTION = ("Conventional, tapered (cosine 1.5/0.5), hourglass, LWS (crown) and tapered hourglass at equal "
           "non-embedding parameters and training FLOPs per token (within 1%), the same tokens, data, tokenizer "
           "and recipe; Δ loss vs the conventional run with a 95% paired bootstrap interval over evaluation "
           "instances.")
TOLERANCE = 0.01
SHAPES = ("conventional", "tapered", "hourglass", "lws", "tapered_hourglass")
# scale label -> shape -> run name (the conventional and tapered runs are Tapered Table 2's own)
RUNS: dict[str, dict[str, str]] = {
    scale: {"conventional": f"tp{scale}_uniform", "tapered": f"tp{scale}_cosine_1p5_0p5",
            "hourglass": f"eb{scale}_hourglass", "lws": f"eb{scale}_lws_crown",
            "tapered_hourglass": f"eb{scale}_tapered_hourglass"}
    for scale in ("440m", "760m")
}
# The tiny default has no equal-budget runs of its own (its 15-minute budget): none listed.

COLUMNS = [("scale", "scale"), ("shape", "shape"), ("run", "run"), ("params", "non-emb params"),
           ("params_rel", "params vs conv"), ("flops_per_token", "train FLOPs/token"),
           ("flops_rel", "FLOPs vs conv"), ("tokens", "tokens"), ("matched", "matched within 1%"),
           ("val_loss", "val loss"), ("d_loss", "Δ loss vs conv"), ("d_loss_lo", "Δ loss 95% lo (evaluation windows)"),
           ("d_loss_hi", "Δ loss 95% hi (evaluation windows)"), ("d_acc", "Δ acc vs conv"), ("d_acc_lo", "Δ acc 95% lo (lm-eval items)"),
           ("d_acc_hi", "Δ acc 95% hi (lm-eval items)"), ("status", "status")]


def equal_budget_rows(ctx) -> list[dict[str, Any]]:
    from shapelm.results.intervals import pair_row

    rows = []
    for scale, shapes in RUNS.items():
        conv = shapes["conventional"]
        if not ctx.has_run(conv):
            continue
        base = ctx.acc(conv)
        for shape in SHAPES:
            run = shapes[shape]
            row: dict[str, Any] = {"scale": scale.upper(), "shape": shape, "run": run}
            acc = ctx.acc(run)
            if acc is None:
                rows.append({**row, "status": "not in this config"})
                continue
            row.update(params=float(acc["non_embedding"]), flops_per_token=float(acc["flops_per_token"]),
                       tokens=float(acc["total_tokens"]),
                       params_rel=acc["non_embedding"] / base["non_embedding"] - 1.0,
                       flops_rel=acc["flops_per_token"] / base["flops_per_token"] - 1.0)
            row["matched"] = (abs(row["params_rel"]) <= TOLERANCE and abs(row["flops_rel"]) <= TOLERANCE
                              and acc["total_tokens"] == base["total_tokens"])
            ppl = ctx.ppl(run)
            row["val_loss"] = ppl.val_loss if ppl else None
            if run == conv:
                row["status"] = "baseline" if ppl else "pending"
            else:
                pr = pair_row(ctx, run, conv)
                row.update({k: pr.get(k) for k in ("d_loss", "d_loss_lo", "d_loss_hi", "d_acc", "d_acc_lo",
                                                   "d_acc_hi")}, status=pr["status"])
            rows.append(row)
    return rows


def equal_budget_table(ctx) -> PlainTable:
    notes = [f"matched: non-embedding parameters and training FLOPs per token within {TOLERANCE:.0%} of the "
             "conventional run's and the same training tokens (the recipe, data and tokenizer are the scale's).",
             "Shapes: docs/RESULTS.md 'Equal-budget table'. The tiny default trains none of these runs (its "
             "15-minute budget); the table lists the scales whose conventional run the config has."]
    return PlainTable("equal_budget", TITLE, COLUMNS, equal_budget_rows(ctx), notes)


def equal_budget_figure(ctx):
    import matplotlib.pyplot as plt

    from shapelm.results.figures.common import pending_panel, zero_line_axis

    every = equal_budget_rows(ctx)
    rows = [r for r in every if r.get("d_loss_lo") is not None]
    # Pending: the configured shapes on the same axes the measured figure has, with no scale yet.
    shown = rows or [r for r in every if r["shape"] != "conventional"]
    fig, ax = plt.subplots(figsize=(6.5, 0.3 * max(len(shown), 4) + 2.2))
    ys = np.arange(len(shown))
    ax.set_yticks(ys, [f"{r['scale']} {r['shape']}" for r in shown], fontsize=8)
    ax.set_ylim(len(shown) - 0.5, -0.5)  # the first row at the top, as the table lists them
    ax.set_xlabel("Δ held-out loss vs conventional (nats/token; 95% paired bootstrap over evaluation windows only)",
                  fontsize=8)
    ax.set_title("Equal budget: every paper's shape against the same conventional run", fontsize=9)
    if not rows:
        zero_line_axis(ax)
        pending_panel(ax, "pending: no equal-budget pair measured in this experiment" if shown
                      else f"no equal-budget shapes configured in experiment '{ctx.plan.name}'", value_axes="")
        fig.tight_layout()
        return fig
    ax.errorbar([r["d_loss"] for r in rows], ys, fmt="o", capsize=3,
                xerr=[[r["d_loss"] - r["d_loss_lo"] for r in rows], [r["d_loss_hi"] - r["d_loss"] for r in rows]])
    ax.axvline(0, color="k", lw=0.8)
    fig.tight_layout()
    return fig
