"""`shapelm plan`: every stage counted, MFU per scale measured (benchmarks/results) or assumed."""

import json
from pathlib import Path

import pytest

from shapelm.config import load_experiment
from shapelm.workflow import PLAN_STAGES, plan_rows, run_stage_gpu_hours

PAPER = load_experiment(Path(__file__).parents[1] / "configs" / "paper.yaml")


def test_every_stage_is_counted_at_the_assumed_mfu(tmp_path):
    rows = plan_rows(PAPER, tmp_path)
    total = rows[-1]
    assert set(total["stages"]) == set(PLAN_STAGES)
    assert all(total["stages"][s] > 0 for s in PLAN_STAGES)
    assert total["gpu_hours"] == pytest.approx(sum(total["stages"].values()))
    assert all(src.startswith("assumed 0.40") for src in total["mfu_source"].values())
    long = run_stage_gpu_hours(PAPER, "hg8b_hg", {})
    short = run_stage_gpu_hours(PAPER, "hg113m_conv", {})
    assert long["yarn_finetune"] > 0 and long["ruler"] > 0 and long["proofpile"] > 0
    assert short["yarn_finetune"] == short["ruler"] == short["decode"] == 0


def test_a_measurement_file_sets_that_scales_mfu(tmp_path):
    assumed = run_stage_gpu_hours(PAPER, "hg906m_hg", {})
    rows = [{"scale": "906M", "mfu": 0.2, "paper_settings": True},
            {"scale": "906M", "mfu": 0.9, "paper_settings": False}]
    (tmp_path / "h200.json").write_text(json.dumps({"gpu": "NVIDIA H200", "training": rows}))
    (tmp_path / "smoke.json").write_text(json.dumps(
        {"gpu": "cpu", "smoke": True, "training": [{"scale": "8B", "mfu": 0.01, "paper_settings": True}]}))
    total = plan_rows(PAPER, tmp_path)[-1]
    assert total["mfu_source"]["906M"].startswith("measured 0.200 on NVIDIA H200 (h200.json)")
    assert total["mfu_source"]["8B"].startswith("assumed")
    from shapelm.workflow import measured_mfu

    measured = run_stage_gpu_hours(PAPER, "hg906m_hg", measured_mfu(tmp_path))
    assert measured["pretraining"] == pytest.approx(2 * assumed["pretraining"])
    assert measured["evaluation"] == assumed["evaluation"]  # requested time, not FLOPs


def test_lws_runs_train_the_reviews_recipe_and_skip_downstream_tasks():
    """LWS: 384 x 1024 tokens per step for 13,000 steps (Table 1 via the review, the authors'
    configs); validation PPL only, so its evaluation time is eval_ppl's alone."""
    from shapelm.config import run_recipe
    from shapelm.workflow import STAGE_RUNTIME_MIN

    lws = [n for n in PAPER.runs if n.startswith("lws_")]
    assert len(lws) == 11  # seven runs, the 18L baseline with five seeds
    for name in lws:
        run = PAPER.run(name)
        recipe = run_recipe(run)
        assert (recipe.batch_tokens, recipe.seq_len, recipe.total_steps) == (384 * 1024, 1024, 13_000)
        assert run["eval"]["tasks"] == []
        assert run_stage_gpu_hours(PAPER, name, {})["evaluation"] == pytest.approx(STAGE_RUNTIME_MIN["eval_ppl"] / 60)
    assert run_stage_gpu_hours(PAPER, "hg113m_conv", {})["evaluation"] > STAGE_RUNTIME_MIN["eval_ppl"] / 60
