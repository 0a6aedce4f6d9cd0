"""The papers' figures from our runs, with the paper's printed values marked (hollow markers,
dashed lines, "paper"). A figure whose runs have not finished says so on the canvas.

    FIGURES: name -> (figure(ctx) -> matplotlib Figure, caption), in the order they are written

    common      the canvas helpers every figure shares (pending panels, labels, saving)
    hourglass   arXiv 2602.06471's Figures 2-6 and the long-context panels
    tapered     arXiv 2606.23670's Table 1 heatmap and Figures 2-4
    lws         arXiv 2509.06518's Figures 3-7 (profiles and training curves)

A paper's module draws from `common` and the tables' cell engine, never from another paper's.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import matplotlib

# Before any pyplot import (this package is imported before its modules): figures are written to
# files, never shown, and the Agg backend renders the same bytes on every machine.
matplotlib.use("Agg")

from shapelm.results.context import Context  # noqa: E402

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


def _drawn_by(module: str, function: str) -> Callable[[Context], "plt.Figure"]:
    """The figure `function` of this package's `module`, imported when first drawn: listing the
    figures (what every `snakemake` start does, through `shapelm.results.artifacts`) loads no
    pyplot and no paper's drawing code (a third of a dry run's CPU before)."""
    def draw(ctx: Context):
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)(ctx)

    draw.__name__ = draw.__qualname__ = function
    return draw


FIGURES: dict[str, tuple[Callable[[Context], "plt.Figure"], str]] = {
    "hourglass_fig2_frozen_head": (_drawn_by("hourglass", "fig2_frozen_head"), "Figure 2: training loss of the three 403M frozen-LM-head configurations."),
    "hourglass_fig3_906m_sweep": (_drawn_by("hourglass", "fig3_906m_sweep"), "Figure 3: 906M sweep, validation PPL vs training FLOPs per step; "
                                  "the conventional baseline and the paper's baseline PPL as horizontal lines."),
    "hourglass_fig4_compute_fit": (_drawn_by("hourglass", "fig4_compute_fit"), "Figure 4: average downstream accuracy vs total training compute "
                                   "with least-squares fits Acc = a + b log C per architecture; hollow markers and "
                                   "dashed fits are the paper's printed Table 2 points."),
    "hourglass_fig5_decode_latency": (_drawn_by("hourglass", "fig5_decode_latency"), "Figure 5: hourglass/conventional single-token decode "
                                      "latency vs context length per scale (ratio of medians; error bars: the "
                                      "range the two runs' recorded latency IQRs allow, Q1_hg/Q3_conv to "
                                      "Q3_hg/Q1_conv); dotted lines are the L_hg/L_conv asymptotes, hollow "
                                      "markers the paper's 64k values (Table 2)."),
    "hourglass_fig6_403m_sweep": (_drawn_by("hourglass", "fig6_403m_sweep"), "Figure 6: 403M validation PPL vs d_h/d_model at (K, L) = (4, 12) "
                                  "and (4, 24); dashed: the conventional 403M baseline."),
    "hourglass_longctx": (_drawn_by("hourglass", "longctx"), "Long context (arXiv 2602.06471 Section 4.6 / Table 3): Proof-pile PPL and RULER vs "
                          "context length for the 8B pair after YaRN."),
    "tapered_table1_heatmap": (_drawn_by("tapered", "tapered_heatmap"), "Tapered Table 1 as a heatmap: schedule x start/end width ratio, "
                               "paper (only 3 of 15 cells quoted in the prose) beside ours."),
    "tapered_fig2_blocks": (_drawn_by("tapered", "tapered_blocks"), "Tapered Figure 2: validation PPL of uniform vs three-block MLP widths; "
                            "hatched bars are the paper's values quoted in the text (in-distribution), "
                            "ours on the held-out split of the training stream and on the held-out sets."),
    "lws_fig4_val_ppl": (_drawn_by("lws", "lws_fig4_val_ppl"), "LWS Figure 4: validation PPL during training (held-out split of the "
                         "training stream) of the isotropic baseline and Vanilla LWS at 12 and 18 layers."),
    "lws_fig5_val_ppl_variants": (_drawn_by("lws", "lws_fig5_val_ppl_variants"), "LWS Figure 5: validation PPL during training of "
                                  "every variant, all of training and zoomed on the last 30% (where Framed "
                                  "bumps in the paper)."),
    "lws_fig6_train_ce": (_drawn_by("lws", "lws_fig6_train_ce"), "LWS Figure 6: training cross-entropy of every variant."),
    "lws_fig7_train_ce_zoom": (_drawn_by("lws", "lws_fig7_train_ce_zoom"), "LWS Figure 7: training cross-entropy, the last 10% of "
                               "training."),
    "tapered_fig3_schedules": (_drawn_by("tapered", "tapered_fig3_schedules"), "Tapered Figure 3: the linear, cosine and sigmoid MLP width "
                               "schedules across depth (built widths; dotted: unrounded), with the configured "
                               "runs' per-layer widths."),
    "tapered_fig4_novelty": (_drawn_by("tapered", "tapered_fig4_novelty"), "Tapered Figure 4: layer-wise novelty, the mean cosine of each "
                             "layer's MLP write (and whole-layer write) with the residual it is added to, per "
                             "layer; right: the Pearson r with layer index (first and last layers omitted) beside "
                             "the paper's printed ranges for the GPT-2 family."),
    "lws_fig3_profiles": (_drawn_by("lws", "lws_fig3_profiles"), "LWS Figure 3: per-layer FFN width and attention heads of the "
                          "layer-wise scaling variants, from the configs."),
}


def write_figure(ctx: Context, name: str, figures_dir: Path) -> list[Path]:
    from shapelm.results.figures.common import save_figure

    fn, _ = FIGURES[name]
    return save_figure(fn(ctx), Path(figures_dir), name)
