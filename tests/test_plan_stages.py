"""`shapelm plan`: every stage counted, MFU per scale measured (benchmarks/results) or assumed."""

import json
from pathlib import Path

import pytest

from shapelm.plan.experiment import load_experiment
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
