"""A run whose metric is NaN or infinite reads "diverged at step N" (N from metrics.jsonl) in every
table and figure, never "pending"; a result path that is a directory is an error naming it."""

from __future__ import annotations

import json

import matplotlib
import pytest

from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment as load
from shapelm.records import RecordError, load_json, read_metrics
from shapelm.results import figures, intervals
from shapelm.results.context import Context
from shapelm.results.render import to_markdown
from shapelm.results.tables import build_table
from shapelm.results.tables.cells import DIVERGED

from results_fixtures import fabricate

matplotlib.use("Agg")


def _diverge(results, work, run: str, step: int | None) -> None:
    """ppl.json's aggregate NaN; metrics.jsonl with a NaN loss at `step` (None: finite steps only)."""
    path = results / "runs" / run / "ppl.json"
    data = json.loads(path.read_text())
    data["aggregate"]["val_loss"] = data["aggregate"]["val_ppl"] = float("nan")
    for s in data["sets"].values():
        s["loss"], s["ppl"] = float("nan"), float("inf")
    path.write_text(json.dumps(data))
    metrics = work / "runs" / run / "metrics.jsonl"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 10, "loss": 5.0, "tokens": 10}, {"step": 20, "loss": 4.0, "tokens": 20}]
    if step is not None:
        lines.append({"step": step, "loss": float("nan"), "tokens": step})
    metrics.write_text("".join(json.dumps(r) + "\n" for r in lines))


@pytest.fixture()
def ctx(tmp_path):
    exp = load("configs/default.yaml")
    results, work = tmp_path / "results", tmp_path / "work"
    fabricate(exp, results, work)
    _diverge(results, work, "hg906m_hg", 37)
    _diverge(results, work, "lws_vanilla_12l", None)  # no non-finite step logged: the last one
    _diverge(results, work, "lws_baseline_12l_s1", 25)  # one seed of three
    return Context(load_plan(exp), results, work)


def test_divergence_names_the_step(ctx):
    assert ctx.divergence("hg906m_hg") == "diverged at step 37"
    assert ctx.divergence("lws_vanilla_12l") == "diverged at step 20"
    assert ctx.divergence("lws_baseline_12l") == "diverged: lws_baseline_12l_s1 at step 25"
    assert ctx.divergence("hg906m_conv") is None and ctx.missing("hg906m_conv") == "pending"


def test_tables_say_diverged_not_pending(ctx):
    t = build_table(ctx, "hourglass_table2")
    cell = t.cell("hg906m_hg", "val_ppl")
    assert cell.ours is None and cell.ours_text == "diverged at step 37" and cell.status == DIVERGED
    assert "diverged at step 37" in to_markdown(t)
    assert t.cell("hg906m_conv", "val_ppl").ours is not None
    row = {r["arm"]: r for r in intervals.paired_table(ctx).rows}["hg906m_hg"]
    assert row["status"] == "hg906m_hg diverged at step 37" and row.get("verdict") is None
    lws = build_table(ctx, "lws_table3")
    assert "diverged at step 20" in to_markdown(lws)


def test_figures_say_diverged_not_pending(ctx):
    fig = figures.lws.lws_fig4_val_ppl(ctx)
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("diverged at step 20" in t for t in labels)
    assert not any("lws_vanilla_12l" in t and "pending" in t for t in labels)


def test_a_result_path_that_is_a_directory_is_an_error_naming_it(tmp_path):
    (tmp_path / "ppl.json").mkdir()
    with pytest.raises(RecordError, match=r"ppl\.json: not a file"):
        load_json(tmp_path / "ppl.json")
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(RecordError, match=r"metrics\.jsonl: not a file"):
        list(read_metrics(tmp_path / "metrics.jsonl"))
    assert load_json(tmp_path / "absent.json") is None
