"""Tables and figures from the evaluations during training (metrics.jsonl "val" records):
Tapered Table 1 / Figure 2 on the in-distribution split beside the held-out sets, LWS Figures 4-7.
The per-run files are fabricated (tests/test_results_fixtures.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from shapelm.config import load_experiment
from shapelm.results import figures as FG
from shapelm.results.context import Context
from shapelm.results.readers import HELDOUT_SPLIT, read_metrics_jsonl, val_records
from shapelm.results.render import write_table
from shapelm.results.tables import build_table
from test_results_fixtures import fabricate

ROOT = Path(__file__).resolve().parents[1]
LWS_FIGS = ("lws_fig4_val_ppl", "lws_fig5_val_ppl_variants", "lws_fig6_train_ce", "lws_fig7_train_ce_zoom")


@pytest.fixture(scope="module")
def default_ctx(tmp_path_factory):
    exp = load_experiment(ROOT / "configs" / "default.yaml")
    base = tmp_path_factory.mktemp("valcurves")
    fabricate(exp, base / "results", base / "work")
    return Context(exp, base / "results", base / "work")


@pytest.fixture(scope="module")
def paper_ctx(tmp_path_factory):
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    base = tmp_path_factory.mktemp("valcurves_paper")
    fabricate(exp, base / "results", base / "work", runs=[r for r in exp.runs if r.startswith(("lws", "tp440m"))])
    return Context(exp, base / "results", base / "work")


def rows(ctx: Context, name: str, tmp_path: Path) -> dict[str, dict[str, str]]:
    write_table(build_table(ctx, name), tmp_path)
    with open(tmp_path / f"{name}.csv", newline="", encoding="utf-8") as f:
        return {r["run"]: r for r in csv.DictReader(f)}


def final_val(ctx: Context, run: str) -> dict:
    return val_records(read_metrics_jsonl(ctx.work_dir / "runs" / run / "metrics.jsonl"))[-1]


@pytest.mark.parametrize("table", ["tapered_table1", "tapered_fig2_blocks"])
def test_tapered_tables_read_the_in_distribution_split(paper_ctx, table, tmp_path):
    got = rows(paper_ctx, table, tmp_path)
    for run in ("tp440m_uniform", "tp440m_cosine_1p5_0p5" if table == "tapered_table1" else "tp440m_blocks_wider_early"):
        r = got[run]
        indist = final_val(paper_ctx, run)[HELDOUT_SPLIT]["ppl"]
        sets = json.loads((paper_ctx.results_dir / "runs" / run / "ppl.json").read_text())["aggregate"]["val_ppl"]
        assert float(r["val_ppl_ours_value"]) == pytest.approx(indist)
        assert float(r["val_ppl_heldout_sets_ours_value"]) == pytest.approx(sets)
        assert indist != pytest.approx(sets)
    base = final_val(paper_ctx, "tp440m_uniform")[HELDOUT_SPLIT]["ppl"]
    other = "tp440m_cosine_1p5_0p5" if table == "tapered_table1" else "tp440m_blocks_wider_early"
    assert float(got[other]["val_ppl_delta_ours_value"]) == pytest.approx(
        final_val(paper_ctx, other)[HELDOUT_SPLIT]["ppl"] - base)


def test_tapered_in_distribution_is_pending_before_the_last_evaluation(tmp_path):
    """A run still training (val records, none at its last step) is pending, not its last value."""
    exp = load_experiment(ROOT / "configs" / "default.yaml")
    fabricate(exp, tmp_path / "results", tmp_path / "work", runs=["tp760m_uniform"])
    metrics = tmp_path / "work" / "runs" / "tp760m_uniform" / "metrics.jsonl"
    lines = [line for line in metrics.read_text().splitlines() if '"kind": "val"' in line]
    metrics.write_text("\n".join(lines[:-1]) + "\n")
    got = rows(Context(exp, tmp_path / "results", tmp_path / "work"), "tapered_table1", tmp_path / "t")
    assert got["tp760m_uniform"]["val_ppl_ours_value"] == ""
    assert got["tp760m_uniform"]["val_ppl_heldout_sets_ours_value"] != ""


def test_lws_curve_tables_carry_the_paper_finals(paper_ctx, tmp_path):
    got = rows(paper_ctx, "lws_fig5_val_ppl_variants", tmp_path)
    assert set(got) == {"lws_baseline_18l", "lws_vanilla_18l", "lws_framed_18l", "lws_reverse_18l",
                        "lws_crown_18l"}
    r = got["lws_framed_18l"]
    assert r["val_ppl_paper"] == "5.205"
    assert float(r["val_ppl_ours_value"]) == pytest.approx(final_val(paper_ctx, "lws_framed_18l")[HELDOUT_SPLIT]["ppl"])
    assert float(r["min_val_ppl_ours_value"]) <= float(r["val_ppl_ours_value"])
    assert set(rows(paper_ctx, "lws_fig4_val_ppl", tmp_path)) == {
        "lws_baseline_12l", "lws_vanilla_12l", "lws_baseline_18l", "lws_vanilla_18l"}


@pytest.mark.parametrize("name", LWS_FIGS)
def test_lws_figures_draw_every_run(paper_ctx, name, tmp_path):
    runs = paper_ctx.runs_for_table(name)
    fig = FG.FIGURES[name][0](paper_ctx)
    lines = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata())]
    panels = 2 if name == "lws_fig5_val_ppl_variants" else 1
    assert len(lines) == panels * len(runs)
    if name in ("lws_fig4_val_ppl", "lws_fig5_val_ppl_variants"):
        assert all(len(ln.get_xdata()) == 10 for ln in lines)  # the 10 fabricated evaluations
    if name.endswith("_zoom") or name == "lws_fig5_val_ppl_variants":
        total = paper_ctx.acc(runs[0])["total_tokens"] / 1e9
        lo, hi = fig.axes[-1].get_xlim()
        assert hi == pytest.approx(total) and lo > 0.5 * total
        assert "zoomed" in fig.axes[-1].get_title()
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("paper final" in t for t in labels) == ("val_ppl" in name)  # Table 3's PPL, not a CE
    for p in FG.write_figure(paper_ctx, name, tmp_path):
        assert p.stat().st_size > 1000


def test_figures_say_pending_without_metrics(tmp_path):
    ctx = Context(load_experiment(ROOT / "configs" / "default.yaml"), tmp_path / "r", tmp_path / "w")
    for name in (*LWS_FIGS, "tapered_fig2_blocks"):
        fig = FG.FIGURES[name][0](ctx)
        text = "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)
        assert "pending" in text or "not configured" in text, name
    fig = FG.lws_fig4_val_ppl(ctx)
    assert "no runs configured" in "\n".join(t.get_text() for t in fig.axes[1].texts)  # no 18L run


def test_default_tiny_figures_render(default_ctx):
    import matplotlib.pyplot as plt

    for name in (*LWS_FIGS, "tapered_table1_heatmap", "tapered_fig2_blocks"):
        fig = FG.FIGURES[name][0](default_ctx)
        assert any(len(ln.get_xdata()) for ax in fig.axes for ln in ax.get_lines()) or \
            any(ax.patches or ax.images for ax in fig.axes), name
        plt.close(fig)


def test_the_tapered_heatmap_places_the_configured_runs_by_their_shape(tmp_path):
    # the tiny default's pair is not named tp440m_*: its cells come from the runs' arch
    from shapelm.config import load_experiment
    from shapelm.results.context import Context
    from shapelm.results.figures import _heatmap_runs

    root = Path(__file__).resolve().parents[1]
    ctx = Context(load_experiment(root / "configs" / "default.yaml"), tmp_path / "results", tmp_path / "work")
    cells, uniform = _heatmap_runs(ctx)
    assert cells == {("cosine", "1p5_0p5"): "tp760m_cosine_1p5_0p5"} and uniform == "tp760m_uniform"


def test_lws_curves_draw_a_band_over_the_seeds_of_a_seeded_run(default_ctx):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    assert len(default_ctx.instances("lws_baseline_12l")) == 3
    fig = FG.FIGURES["lws_fig4_val_ppl"][0](default_ctx)
    ax = fig.axes[0]
    assert any(isinstance(c, PolyCollection) for c in ax.collections)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("lws_baseline_12l" in lab and "3 seeds" in lab for lab in labels), labels
    assert not any("lws_vanilla_12l" in lab and "seeds" in lab for lab in labels)
    plt.close(fig)
