"""`shapelm cost`: every stage counted, MFU per scale measured (benchmarks/results) or assumed."""

import json
from pathlib import Path

import pytest

from shapelm.plan.experiment import load_experiment
from shapelm.plan.cost import COST_STAGES, cost_rows, run_stage_gpu_hours

PAPER = load_experiment(Path(__file__).parents[2] / "configs" / "paper.yaml")


def test_every_stage_is_counted_at_the_assumed_mfu(tmp_path):
    rows = cost_rows(PAPER, tmp_path)
    total = rows[-1]
    assert set(total["stages"]) == set(COST_STAGES)
    assert all(total["stages"][s] > 0 for s in COST_STAGES)
    assert total["gpu_hours"] == pytest.approx(sum(total["stages"].values()))
    assert all(src.startswith("assumed 0.40") for src in total["mfu_source"].values())
    long = run_stage_gpu_hours(PAPER, "hg8b_hg", {})
    short = run_stage_gpu_hours(PAPER, "hg113m_conv", {})
    assert long["yarn_finetune"] > 0 and long["ruler"] > 0 and long["proofpile"] > 0
    assert short["yarn_finetune"] == short["ruler"] == short["decode"] == 0


def gpu_check_file(path, rows, **extra):
    """A benchmarks/gpu_check.py result file (its schema 2) holding `rows`."""
    path.write_text(json.dumps({"schema": 2, "gpu": "NVIDIA H200", "smoke": False, "rows": rows, **extra}))


def test_a_measurement_file_sets_that_scales_mfu(tmp_path):
    assumed = run_stage_gpu_hours(PAPER, "hg906m_hg", {})
    paper = {"status": "ok", "paper_settings": True, "fp8": True, "micro_batch": 4}
    gpu_check_file(tmp_path / "h200.json", [
        {**paper, "scale": "906M", "plan_mfu": 0.2},
        {**paper, "scale": "906M", "plan_mfu": 0.9, "paper_settings": False},
        {**paper, "scale": "906M", "plan_mfu": 0.9, "status": "error"}])
    gpu_check_file(tmp_path / "smoke.json", [{**paper, "scale": "8B", "plan_mfu": 0.01}], smoke=True)
    total = cost_rows(PAPER, tmp_path)[-1]
    assert total["mfu_source"]["906M"].startswith("measured 0.200 on NVIDIA H200 (h200.json; MFU, FP8")
    assert total["mfu_source"]["8B"].startswith("assumed")
    from shapelm.plan.cost import measured_mfu

    measured = run_stage_gpu_hours(PAPER, "hg906m_hg", measured_mfu(tmp_path))
    assert measured["pretraining"] == pytest.approx(2 * assumed["pretraining"])
    assert measured["evaluation"] == assumed["evaluation"]  # requested time, not FLOPs


def test_a_slice_gives_its_block_only_mfu_and_bf16_stands_in_for_unmeasured_fp8(tmp_path):
    from shapelm.plan.cost import measured_mfu

    row = {"status": "ok", "scale": "8B", "slice": True, "micro_batch": 1, "mfu": 0.3}
    gpu_check_file(tmp_path / "a.json", [
        {**row, "fp8": True, "paper_settings": True, "status": "skipped"},
        {**row, "fp8": False, "paper_settings_but_bf16": True, "plan_mfu": 0.45}])
    m = measured_mfu(tmp_path)["8B"]
    assert m["mfu"] == 0.45 and "block-only" in m["settings"] and "FP8 not measured" in m["settings"]
    gpu_check_file(tmp_path / "b.json", [{**row, "fp8": True, "paper_settings": True, "plan_mfu": 0.5}])
    m = measured_mfu(tmp_path)["8B"]
    assert m["mfu"] == 0.5 and "FP8" in m["settings"] and "not measured" not in m["settings"]


def test_titans_and_hope_runs_scale_their_mfu_by_their_mixer_flop_rate(tmp_path):
    from shapelm.plan.cost import MIXER_CPU_BENCHMARK, mixer_flop_rates

    cpu = {r["mixer"]: r["fwd_bwd_flop_rate_ratio"] for r in json.loads(MIXER_CPU_BENCHMARK.read_text())["rows"]}
    sources = cost_rows(PAPER, tmp_path)[-1]["mfu_source"]
    titans = sources["tapered760M titans"]
    assert f"x {cpu['titans']:.2f} for titans (assumed from the CPU mixer benchmark" in titans
    assert "hope_attention" in sources["tapered760M hope_attention"]
    attention = run_stage_gpu_hours(PAPER, "tp760m_titans_uniform", {}, {})
    slower = run_stage_gpu_hours(PAPER, "tp760m_titans_uniform", {}, mixer_flop_rates(tmp_path))
    assert slower["pretraining"] == pytest.approx(attention["pretraining"] / cpu["titans"])
    gpu_check_file(tmp_path / "h200.json", [
        {"status": "ok", "section": "mixers", "mixer": "titans", "flop_rate_ratio_to_attention": 0.8}])
    measured = cost_rows(PAPER, tmp_path)[-1]["mfu_source"]["tapered760M titans"]
    assert "x 0.80 for titans (measured on NVIDIA H200 (h200.json))" in measured


def test_lws_runs_train_the_reviews_recipe_and_skip_downstream_tasks():
    """LWS: 384 x 1024 tokens per step for 13,000 steps (Table 1 via the review, the authors'
    configs); validation PPL only, so its evaluation time is eval_ppl's alone."""
    from shapelm.config import run_recipe
    from shapelm.plan.jobs import STAGE_RUNTIME_MIN

    lws = [n for n in PAPER.runs if n.startswith("lws_")]
    assert len(lws) == 11  # seven runs, the 18L baseline with five seeds
    for name in lws:
        run = PAPER.run(name)
        recipe = run_recipe(run)
        assert (recipe.batch_tokens, recipe.seq_len, recipe.total_steps) == (384 * 1024, 1024, 13_000)
        assert run["eval"]["tasks"] == []
        assert run_stage_gpu_hours(PAPER, name, {})["evaluation"] == pytest.approx(STAGE_RUNTIME_MIN["eval_ppl"] / 60)
    assert run_stage_gpu_hours(PAPER, "hg113m_conv", {})["evaluation"] > STAGE_RUNTIME_MIN["eval_ppl"] / 60
