"""Tables and figures from the evaluations during training (metrics.jsonl "val" records):
Tapered Table 1 / Figure 2 on the in-distribution split beside the held-out sets, LWS Figures 4-7.
The per-run files are fabricated (tests/results_fixtures.py)."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment
from shapelm.results import figures as FG
from shapelm.results.figures import hourglass, lws, tapered  # noqa: F401  (loaded when drawn: FG.hourglass, ...)
from shapelm.results.context import Context
from shapelm.results.readers import HELDOUT_SPLIT, read_metrics_jsonl, val_records
from shapelm.results.render import write_table
from shapelm.results.tables import build_table
from results_fixtures import fabricate, fabricated_context

ROOT = Path(__file__).resolve().parents[2]
LWS_FIGS = ("lws_fig4_val_ppl", "lws_fig5_val_ppl_variants", "lws_fig6_train_ce", "lws_fig7_train_ce_zoom")


@pytest.fixture(scope="module")
def default_ctx(tmp_path_factory):
    return fabricated_context("default", tmp_path_factory.mktemp("valcurves"))


@pytest.fixture(scope="module")
def paper_ctx(tmp_path_factory):
    return fabricated_context("paper", tmp_path_factory.mktemp("valcurves_paper"),
                              runs=lambda exp: [r for r in exp.runs if r.startswith(("lws", "tp440m"))])


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
    got = rows(Context(load_plan(exp), tmp_path / "results", tmp_path / "work"), "tapered_table1", tmp_path / "t")
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
    every = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata())]
    lines = [ln for ln in every if ln.get_marker() != "D"]
    markers = [ln for ln in every if ln.get_marker() == "D"]  # the paper's printed finals
    panels = 2 if name == "lws_fig5_val_ppl_variants" else 1
    assert len(lines) == panels * len(runs)
    if name in ("lws_fig4_val_ppl", "lws_fig5_val_ppl_variants"):
        assert all(len(ln.get_xdata()) == 10 for ln in lines)  # the 10 fabricated evaluations
    total = paper_ctx.acc(runs[0])["total_tokens"] / 1e9
    if "val_ppl" in name:  # Table 3's PPL drawn as markers at the end of training, not only named
        printed = sorted(FG.lws._lws_paper_final(r).value for r in runs if FG.lws._lws_paper_final(r))
        assert printed and sorted(m.get_ydata()[0] for m in markers) == sorted(printed * panels)
        assert all(m.get_xdata()[0] == pytest.approx(total) for m in markers)
    else:
        assert not markers
    if name.endswith("_zoom") or name == "lws_fig5_val_ppl_variants":
        ax = fig.axes[1] if name == "lws_fig5_val_ppl_variants" else fig.axes[0]
        lo, hi = ax.get_xlim()
        assert total <= hi <= 1.05 * total and lo == pytest.approx(0.7 * total if "fig5" in name else 0.9 * total)
        assert "zoomed" in ax.get_title()
        ys = ax.get_ylim()  # the zoomed axis holds the markers it draws
        assert all(ys[0] <= m.get_ydata()[0] <= ys[1] for m in markers if m.axes is ax)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("paper's final value" in t for t in labels) == ("val_ppl" in name)
    assert all(ax.get_legend().get_texts()[0].get_fontsize() >= 7 for ax in fig.axes if ax.get_legend())
    for p in FG.write_figure(paper_ctx, name, tmp_path):
        assert p.stat().st_size > 1000


def test_figures_say_pending_without_metrics(tmp_path):
    ctx = Context(load_plan(ROOT / "configs" / "default.yaml"), tmp_path / "r", tmp_path / "w")
    for name in (*LWS_FIGS, "tapered_fig2_blocks"):
        fig = FG.FIGURES[name][0](ctx)
        text = "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)
        assert "pending" in text or "not configured" in text, name
    fig = FG.lws.lws_fig4_val_ppl(ctx)
    assert "no runs configured" in "\n".join(t.get_text() for t in fig.axes[1].texts)  # no 18L run


def test_default_tiny_figures_render(default_ctx):
    import matplotlib.pyplot as plt

    for name in (*LWS_FIGS, "tapered_table1_heatmap", "tapered_fig2_blocks"):
        fig = FG.FIGURES[name][0](default_ctx)
        assert any(len(ln.get_xdata()) for ax in fig.axes for ln in ax.get_lines()) or \
            any(ax.patches or ax.images for ax in fig.axes), name
        plt.close(fig)


def test_lws_table3_reads_the_in_distribution_split_as_its_figures(default_ctx, tmp_path):
    """LWS Table 3's final PPL (and its std over seeds) is the in-distribution split of Figures
    4-7, not the mean of the held-out sets; the sets' value stands beside it."""
    t3, fig4 = rows(default_ctx, "lws_table3", tmp_path), rows(default_ctx, "lws_fig4_val_ppl", tmp_path / "f")
    for run in ("lws_baseline_12l", "lws_vanilla_12l"):
        assert float(t3[run]["val_ppl_ours_value"]) == pytest.approx(float(fig4[run]["val_ppl_ours_value"]))
        sets = float(t3[run]["val_ppl_heldout_sets_ours_value"])
        if run == "lws_vanilla_12l":  # one run: ppl.json's mean of the four sets
            ppl = json.loads((default_ctx.results_dir / "runs" / run / "ppl.json").read_text())
            assert sets == pytest.approx(ppl["aggregate"]["val_ppl"])
        assert float(t3[run]["val_ppl_ours_value"]) != pytest.approx(sets)
    seeds = default_ctx.instances("lws_baseline_12l")
    assert len(seeds) == 3
    finals = [final_val(default_ctx, s)[HELDOUT_SPLIT]["ppl"] for s in seeds]
    assert float(t3["lws_baseline_12l"]["val_ppl_ours_value"]) == pytest.approx(statistics.fmean(finals))
    assert float(t3["lws_baseline_12l"]["val_ppl_std_ours_value"]) == pytest.approx(statistics.stdev(finals))
    assert float(t3["lws_baseline_12l"]["n_runs_ours_value"]) == 3


def test_claims_compare_the_in_distribution_split(paper_ctx):
    from shapelm.results.claims import derived_claims

    by_id = {c.id: c for c in derived_claims(paper_ctx)}
    crown = final_val(paper_ctx, "lws_crown_18l")[HELDOUT_SPLIT]["ppl"]
    base = [final_val(paper_ctx, s)[HELDOUT_SPLIT]["ppl"] for s in paper_ctx.instances("lws_baseline_18l")]
    assert by_id["lws_crown_vs_baseline18"].ours == pytest.approx(crown / (sum(base) / len(base)) - 1)
    cos, uni = (final_val(paper_ctx, r)[HELDOUT_SPLIT]["ppl"] for r in ("tp440m_cosine_1p5_0p5", "tp440m_uniform"))
    assert by_id["tapered_best_vs_uniform"].ours == pytest.approx(cos - uni)


def test_fig3_markers_encode_the_ratio_as_the_paper(tmp_path):
    """Figure 3: circles ~0.6, squares ~0.9 (the paper's legend), one colour per layer count."""
    import matplotlib.pyplot as plt

    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    ctx = Context(load_plan(exp), tmp_path / "results", tmp_path / "work")
    runs = ctx.runs_for_table("hourglass_fig3_906m_sweep")
    fabricate(exp, tmp_path / "results", tmp_path / "work", runs=runs)
    fig = FG.hourglass.fig3_906m_sweep(Context(load_plan(exp), tmp_path / "results", tmp_path / "work"))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "hourglass K=4, d_h/d_model ~0.6, L=12" in labels and "hourglass K=4, d_h/d_model ~0.9, L=16" in labels
    paths = {}
    for coll in fig.axes[0].collections:
        if len(coll.get_offsets()):
            paths.setdefault(len(coll.get_paths()[0].vertices), []).append(coll)
    assert len(paths) >= 3  # star (conventional), circle, triangle, square differ in vertex count
    plt.close(fig)


def test_tapered_table2_has_params_and_flops_columns(default_ctx, tmp_path):
    got = rows(default_ctx, "tapered_table2", tmp_path)
    for run in ("tp760m_uniform", "tp760m_titans_uniform"):
        acc = default_ctx.acc(run)
        assert float(got[run]["params_total_ours_value"]) == pytest.approx(acc["total_params"])
        assert float(got[run]["train_flops_ours_value"]) == pytest.approx(acc["flops_step"])


def test_tapered_heatmap_draws_the_tiny_pair(default_ctx):
    """The tiny default's Table 1 pair (tp760m_*) fills the heat map's uniform and cosine 1.5/0.5."""
    import matplotlib.pyplot as plt

    fig = FG.FIGURES["tapered_table1_heatmap"][0](default_ctx)
    ours = fig.axes[1]
    cosine = FG.tapered.SCHEDULES.index("cosine"), FG.tapered.RATIOS.index("1p5_0p5")
    cell = next(t.get_text() for t in ours.texts if t.get_position() == (cosine[1], cosine[0]))
    indist = final_val(default_ctx, "tp760m_cosine_1p5_0p5")[HELDOUT_SPLIT]["ppl"]
    assert cell == f"{indist:.2f}"
    assert "pending" not in ours.get_title() and "not configured" not in ours.get_title()
    plt.close(fig)


def test_lws_tiny_params_cell_is_scaled(default_ctx, tmp_path):
    assert rows(default_ctx, "lws_table3", tmp_path)["lws_baseline_12l"]["params_status"] == "scaled"


def test_table12_rows_are_the_mixers_of_the_tiny_pair(default_ctx, tmp_path):
    got = rows(default_ctx, "hourglass_table12", tmp_path)
    assert set(got) == {"decode906m_mha", "decode906m_gqa", "decode906m_mla"}  # no empty run rows
    conv, hg = default_ctx.decode_pairs["tiny"]
    kv = 1 - default_ctx.acc(hg)["kv_bytes_per_token"] / default_ctx.acc(conv)["kv_bytes_per_token"]
    for r in got.values():
        assert float(r["kv_reduction_ours_value"]) == pytest.approx(kv)
        assert "MISMATCH" not in {r["g_status"], r["kv_reduction_status"]}


def test_table6_maps_the_tiny_set_names_and_table7_averages_its_own_tasks(tmp_path):
    from results_fixtures import fake_downstream, fake_ppl, write

    exp = load_experiment(ROOT / "configs" / "default.yaml")
    ppl = fake_ppl("hg906m_conv")
    ppl["sets"] = {tiny: ppl["sets"][full] for tiny, full in zip(
        ("default_web", "default_code", "default_sci", "default_wiki"),
        ("dolma_common-crawl", "dolma_stack", "m2d2_s2orc", "wikitext_103"))}
    write(tmp_path / "r" / "runs" / "hg906m_conv" / "ppl.json", ppl)
    write(tmp_path / "r" / "runs" / "hg906m_conv" / "downstream.json", fake_downstream("hg906m_conv"))
    heldout = {"metrics": {"heldout_mc": 0.3, "heldout_ce": 2.0}, "Avg Acc": 0.3, "Avg PPL": 2.0}
    write(tmp_path / "r" / "runs" / "hg906m_hg" / "downstream.json", heldout)
    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    t6 = rows(ctx, "hourglass_table6", tmp_path / "t6")["hg906m_conv"]
    assert float(t6["loss_dolma_stack_ours_value"]) == pytest.approx(ppl["sets"]["default_code"]["loss"])
    assert float(t6["ppl_wikitext_ours_value"]) == pytest.approx(ppl["sets"]["default_wiki"]["ppl"])
    t7 = rows(ctx, "hourglass_table7", tmp_path / "t7")
    tasks = fake_downstream("hg906m_conv")["metrics"]
    five = ("arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa")
    assert float(t7["hg906m_conv"]["avg_acc_ours_value"]) == pytest.approx(sum(tasks[t] for t in five) / 5)
    assert t7["hg906m_hg"]["avg_acc_ours_value"] == "" and t7["hg906m_hg"]["avg_ppl_ours_value"] == ""


def test_the_tapered_heatmap_places_the_configured_runs_by_their_shape(tmp_path):
    # the tiny default's pair is not named tp440m_*: its cells come from the runs' arch
    from shapelm.results.context import Context
    from shapelm.results.figures.tapered import heatmap_runs

    root = Path(__file__).resolve().parents[2]
    ctx = Context(load_plan(root / "configs" / "default.yaml"), tmp_path / "results", tmp_path / "work")
    cells, uniform = heatmap_runs(ctx)
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
