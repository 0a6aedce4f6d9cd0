"""Figures a reader can trust: axes reach every point, placeholders draw no scale that reads as
data, numbers on heat-map cells stay legible, the paper's printed values are drawn, and the
scaling figure says what it draws in the names a reader knows."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from shapelm.plan.build import load_plan
from shapelm.results import figures as FG
from shapelm.results.figures import hourglass, lws, tapered  # noqa: F401  (loaded when drawn: FG.hourglass, ...)
from shapelm.results import scaling
from shapelm.results.context import Context
from results_fixtures import fabricated_context

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def default_ctx(tmp_path_factory):
    return fabricated_context("default", tmp_path_factory.mktemp("legible"))


@pytest.fixture(scope="module")
def empty_paper_ctx(tmp_path_factory):
    base = tmp_path_factory.mktemp("legible_paper")
    return Context(load_plan(ROOT / "configs" / "paper.yaml"), base / "r", base / "w")


def test_decode_latency_axis_reaches_a_tiny_pair_slower_than_conventional(default_ctx, monkeypatch):
    monkeypatch.setattr(default_ctx, "speedup", lambda scale, mixer, length: 0.4)  # ratio 2.5
    fig = FG.hourglass.fig5_decode_latency(default_ctx)
    ax = fig.axes[0]
    ys = [y for ln in ax.get_lines() if ln.get_marker() == "o" for y in ln.get_ydata()]
    assert ys and max(ys) == pytest.approx(2.5) and ax.get_ylim()[1] > 2.5
    plt.close(fig)


def test_placeholders_draw_no_value_scale_and_long_context_ticks_are_spaced(empty_paper_ctx):
    fig = FG.hourglass.longctx(empty_paper_ctx)
    ppl, ruler = fig.axes[:2]
    assert list(ppl.get_yticks()) == []  # no 0-1 perplexity axis before there is a perplexity
    assert ruler.get_ylim() == (-2, 102)  # RULER's own 0-100 range is meaningful
    ticks = list(ppl.get_xticks())
    lo, hi = ppl.get_xlim()
    assert ppl.get_xscale() == "log" and lo < ticks[0] and ticks[-1] < hi
    assert [t.get_text() for t in ppl.get_xticklabels()] == ["4k", "8k", "16k", "32k", "64k"]
    plt.close(fig)
    fig = FG.hourglass.fig4_compute_fit(empty_paper_ctx)
    ours = fig.axes[1]
    assert list(ours.get_yticks()) == [] and list(ours.get_xticks()) == []
    assert "0 to 1" not in ours.get_title()
    plt.close(fig)


def test_heat_map_text_colour_follows_the_cell(empty_paper_ctx):
    assert FG.tapered._text_colour((0.99, 0.91, 0.14, 1.0)) == "black"  # viridis' bright yellow
    assert FG.tapered._text_colour((0.27, 0.0, 0.33, 1.0)) == "white"  # its dark purple
    fig = FG.tapered.tapered_heatmap(empty_paper_ctx)
    paper = fig.axes[0]
    colours = {t.get_text(): t.get_color() for t in paper.texts if t.get_text()[:1].isdigit()}
    lowest = min(colours, key=float)  # the best cell: the bright end of viridis_r
    assert colours[lowest] == "black" and "white" in colours.values()
    w, h = fig.get_size_inches()
    assert w / h < 1.5  # one panel per row: legible at column width
    plt.close(fig)


def test_lws_paper_finals_are_markers_and_the_zoom_title_matches_its_axis(empty_paper_ctx):
    fig = FG.lws.lws_fig5_val_ppl_variants(empty_paper_ctx)
    full, zoom = fig.axes[:2]
    markers = [ln for ln in zoom.get_lines() if ln.get_marker() == "D" and len(ln.get_xdata())]
    assert len(markers) == len(empty_paper_ctx.runs_for_table("lws_fig5_val_ppl_variants"))
    total = empty_paper_ctx.acc(empty_paper_ctx.runs_for_table("lws_fig5_val_ppl_variants")[0])["total_tokens"]
    assert zoom.get_xlim()[0] == pytest.approx(0.7 * total / 1e9)  # "zoomed: 3.58B to 5.11B", drawn so
    assert full.get_xlim()[0] == 0
    assert all(ax.get_legend().get_texts()[0].get_fontsize() >= 7 for ax in (full, zoom))
    plt.close(fig)


def test_scaling_figure_names_families_and_promises_only_what_it_draws(default_ctx):
    fig = scaling.scaling_figure(default_ctx)
    ax = fig.axes[0]
    title = ax.get_title()
    banded = bool(ax.collections)
    assert ("band" in title) == banded and ("fit (line)" in title) == any(
        ln.get_linestyle() == "-" for ln in ax.get_lines())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels and not any("_" in label.split(" (")[0] for label in labels)  # no internal family id
    plt.close(fig)


def test_our_accuracy_panel_draws_the_chance_level_of_its_tasks(default_ctx):
    assert FG.hourglass.chance_level(["piqa", "arc_easy"]) == pytest.approx(0.375)
    assert FG.hourglass.chance_level(["piqa", "lambada"]) is None  # a word accuracy has no chance level
    fig = FG.hourglass.fig4_compute_fit(default_ctx)
    ours = fig.axes[1]
    chance = [ln for ln in ours.get_lines() if ln.get_label().startswith("chance")]
    tasks = FG.hourglass._our_acc_tasks(default_ctx, default_ctx.runs_for_table("hourglass_fig4_compute_fit"))
    assert len(chance) == 1 and chance[0].get_ydata()[0] == pytest.approx(FG.hourglass.chance_level(tasks))
    plt.close(fig)


def test_decode_latency_draws_the_recorded_iqrs_as_error_bars(default_ctx, monkeypatch):
    monkeypatch.setattr(default_ctx, "speedup", lambda scale, mixer, length: 2.0)  # ratio 0.5
    monkeypatch.setattr(default_ctx, "latency_ratio_iqr", lambda scale, mixer, length: (0.4, 0.7))
    fig = FG.hourglass.fig5_decode_latency(default_ctx)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if c.has_yerr]
    assert bars, "no error bars drawn from the recorded IQRs"
    segments = bars[0].lines[2][0].get_segments()
    assert [tuple(seg[:, 1]) for seg in segments][0] == pytest.approx((0.4, 0.7))
    assert any("IQR" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)


def test_latency_ratio_range_combines_both_runs_quartiles(default_ctx, monkeypatch):
    scale, (conv, hg) = next(iter(default_ctx.decode_pairs.items()))
    rows = [{"run": conv, "mixer": "mha", "length": 1024, "latency_ms_q1": 2.0, "latency_ms_q3": 4.0},
            {"run": hg, "mixer": "mha", "length": 1024, "latency_ms_q1": 1.0, "latency_ms_q3": 3.0}]
    monkeypatch.setitem(default_ctx.__dict__, "decode_rows", rows)
    assert default_ctx.latency_ratio_iqr(scale, "mha", 1024) == pytest.approx((1.0 / 4.0, 3.0 / 2.0))
    assert default_ctx.latency_ratio_iqr(scale, "mha", 4096) is None


@pytest.mark.parametrize("name", ["equal_budget", "paired_differences", "scaling_fits"])
def test_placeholders_keep_labelled_axes_in_the_quantitys_units(empty_paper_ctx, name):
    from shapelm.results import analyses

    fig = analyses._figures()[name][0](empty_paper_ctx)
    ax = fig.axes[0]
    assert ax.axison, "a placeholder keeps its axes"
    assert "nats/token" in ax.get_xlabel() + ax.get_ylabel()
    assert any(t.get_text().startswith(("pending", "No family")) for t in ax.texts)  # says why it is empty
    assert all(t in (0.0,) for t in ax.get_xticks()) or list(ax.get_xticks()) == []  # no 0-1 scale as data
    plt.close(fig)
