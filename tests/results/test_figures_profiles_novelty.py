"""Tapered Figures 3 and 4 and LWS Figure 3: rendered from the configs, pending without
results, and with novelty results drawn beside the paper's printed r ranges."""

import json
from pathlib import Path

import pytest

from shapelm import reference as R
from shapelm.model.config import run_model_config
from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment
from shapelm.results import artifacts
from shapelm.results import figures as FG
from shapelm.results.figures import hourglass, lws, tapered  # noqa: F401  (loaded when drawn: FG.hourglass, ...)
from shapelm.results.context import Context

ROOT = Path(__file__).resolve().parents[2]


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title, ax.yaxis.label]) \
        + "\n" + (fig._suptitle.get_text() if fig._suptitle else "")


@pytest.fixture(scope="module", params=["default", "paper"])
def exp(request):
    return load_experiment(ROOT / "configs" / f"{request.param}.yaml")


def test_figures_are_registered_listed_and_render(exp, tmp_path):
    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    names = {a["name"] for a in artifacts(load_plan(exp), tmp_path / "r", tmp_path / "f") if a["kind"] == "figure"}
    for name in ("tapered_fig3_schedules", "tapered_fig4_novelty", "lws_fig3_profiles"):
        assert name in FG.FIGURES and name in names
        assert ctx.runs_for_table(name), f"no run of {exp.name} lists {name} in tables:"
        for p in FG.write_figure(ctx, name, tmp_path / "f"):
            assert p.stat().st_size > 1000
    assert "pending: no novelty.json yet" in _texts(FG.tapered.tapered_fig4_novelty(ctx))


def test_schedule_figure_draws_the_built_widths(exp, tmp_path):
    from shapelm.model.schedules import tapered_widths

    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    fig = FG.tapered.tapered_fig3_schedules(ctx)
    ax = fig.axes[0]
    ref = next(r for r in ctx.runs_for_table("tapered_fig3_schedules") if FG.common.arch_of(ctx, r)["kind"] == "tapered")
    a = FG.common.arch_of(ctx, ref)
    steps = {line.get_label().split(" ")[0]: list(line.get_ydata()) for line in ax.get_lines()
             if "built" in line.get_label()}
    assert set(steps) == {"linear", "cosine", "sigmoid"}
    for s, ys in steps.items():
        built = tapered_widths(a["d_ff"], a["n_layers"], s, a["start"], a["end"])
        assert ys == pytest.approx([w / a["d_ff"] for w in built])
        assert sum(ys) == pytest.approx(a["n_layers"])  # matched parameters: mean width d_ff


def test_lws_profile_figure_follows_the_built_layers(exp, tmp_path):
    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    runs = ctx.runs_for_table("lws_fig3_profiles")
    fig = FG.lws.lws_fig3_profiles(ctx)
    ffn_lines = [line for line in fig.axes[0].get_lines()]
    assert len(ffn_lines) == len(runs)
    for run, line in zip(runs, ffn_lines):
        cfg = run_model_config(exp.runs[run])
        assert list(line.get_ydata()) == pytest.approx([sum(L.ffn_widths) / cfg.d_model for L in cfg.layers])
    if exp.name == "paper":  # the paper's five 18-layer variants
        assert len(runs) == 5 and "L = 18" in fig._suptitle.get_text()


def test_novelty_figure_with_results(tmp_path):
    exp = load_experiment(ROOT / "configs" / "default.yaml")
    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    runs = ctx.runs_for_table("tapered_fig4_novelty")
    for i, run in enumerate(runs):
        rho = [0.1, -0.05, 0.02, 0.1 + i / 10, 0.2, 0.5]
        d = ctx.run_file(run, "novelty.json")
        d.parent.mkdir(parents=True, exist_ok=True)
        d.write_text(json.dumps({"n_layers": 6, "n_tokens": 2048, "rho_mlp": rho, "rho_block": rho,
                                 "pearson_layers": [1, 2, 3, 4], "pearson_r_mlp": 0.6 + i / 10,
                                 "pearson_r_block": 0.3}))
    hf = tmp_path / "r" / "analysis" / "novelty" / "gpt2.json"
    hf.parent.mkdir(parents=True)
    hf.write_text(json.dumps({"n_layers": 4, "n_tokens": 2048, "rho_mlp": [0.0, 0.1, 0.3, 0.2],
                              "rho_block": [0.0, 0.1, 0.2, 0.2], "pearson_layers": [1, 2],
                              "pearson_r_mlp": 1.0, "pearson_r_block": 1.0}))
    fig = FG.tapered.tapered_fig4_novelty(ctx)
    text = _texts(fig)
    assert "pending" not in text and "2048 tokens" in text
    lo = R.printed("tapered_sec4_novelty", "novelty_rho_mlp", "r_min").text
    hi = R.printed("tapered_sec4_novelty", "novelty_rho_mlp", "r_max").text
    assert f"paper {lo}-{hi}" in text
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == len(runs) + 1 and "gpt2 (HF)" in labels
    rs = sorted(y for coll in fig.axes[2].collections for _, y in coll.get_offsets())
    assert rs == pytest.approx(sorted([0.6 + i / 10 for i in range(len(runs))] + [1.0] + [0.3] * len(runs) + [1.0]))
