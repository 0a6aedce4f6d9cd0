"""Repeated seeds (`runs.NAME.seeds`) and training throughput: config expansion and validation,
the per-seed jobs of the workflow, mean ± std (n) in the tables, the throughput table and claim."""

from __future__ import annotations

import copy
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from shapelm.config import config_hash
from shapelm.plan.build import load_plan
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.results.claims import derived_claims
from shapelm.results.context import Context
from shapelm.results.render import to_csv, to_markdown
from shapelm.results.seeds import spread
from shapelm.results.tables import build_table
from shapelm.plan.cost import cost_rows

from results_fixtures import fake_ppl, write

ROOT = Path(__file__).resolve().parents[2]


def _minimal(**run):
    return {
        "name": "t",
        "scales": {"s": {"n_heads": 2, "train": {"lr": 1e-3, "batch_tokens": 64, "seq_len": 16,
                                                   "total_tokens": 640, "warmup_tokens": 64}}},
        "runs": {"a": {"scale": "s", "tables": ["lws_table3"],
                       "arch": {"kind": "conventional", "d_model": 16, "n_layers": 1, "d_h": 32,
                                "vocab_size": 50}, **run}},
    }


# ----------------------------------------------------------------------------- config


def test_seeds_expand_into_one_run_per_seed_and_the_first_keeps_the_run():
    plain = load_experiment(_minimal(train={"seed": 7}))
    seeded = load_experiment(_minimal(seeds=[7, 1, 2]))
    assert list(seeded.runs) == ["a", "a_s1", "a_s2"]
    assert [seeded.run(n)["train"]["seed"] for n in seeded.runs] == [7, 1, 2]
    assert seeded.instances("a") == ["a", "a_s1", "a_s2"] and seeded.instances("a_s1") == ["a_s1"]
    assert seeded.is_primary("a") and not seeded.is_primary("a_s2")
    assert seeded.spec("a_s2") is seeded.raw["runs"]["a"]
    # The first seed's instance is the run trained with that seed: same fingerprint, same outputs.
    assert seeded.run("a")["hash"] == plain.run("a")["hash"]
    assert seeded.run("a_s1")["hash"] != seeded.run("a")["hash"]
    # A run without seeds resolves as before: nothing added, the hash over the same keys.
    run = plain.run("a")
    assert "seed_group" not in run and run["hash"] == config_hash(run)


@pytest.mark.parametrize("run, needle", [
    ({"seeds": [1, 1]}, "runs.a.seeds"),
    ({"seeds": []}, "runs.a.seeds"),
    ({"seeds": [1, "two"]}, "runs.a.seeds.1"),
    ({"seeds": [1, -3]}, "runs.a.seeds.1"),
    ({"seeds": [1, True]}, "runs.a.seeds.1"),
    ({"seeds": [1, 2], "train": {"seed": 5}}, "runs.a.seeds: runs.a.train.seed is also given"),
    ({"seeds": [1, 2], "sedes": 3}, "runs.a.sedes"),
])
def test_bad_seeds_name_the_run_and_key(run, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_experiment(_minimal(**run))


def test_a_seed_instance_may_not_take_another_runs_name():
    data = _minimal(seeds=[3, 1])
    data["runs"]["a_s1"] = copy.deepcopy(data["runs"]["a"])
    del data["runs"]["a_s1"]["seeds"]
    with pytest.raises(ConfigError, match=r"runs\.a\.seeds: seed 1's run name 'a_s1' is already a run"):
        load_experiment(data)
    long = _minimal(seeds=[3, 123456])
    long["runs"] = {"x" * 95: long["runs"]["a"]}
    with pytest.raises(ConfigError, match="is not a run name"):
        load_experiment(long)


def test_shipped_configs_repeat_the_lws_baselines():
    paper = load_experiment(ROOT / "configs" / "paper.yaml")
    assert paper.instances("lws_baseline_18l") == [
        "lws_baseline_18l", "lws_baseline_18l_s1", "lws_baseline_18l_s2", "lws_baseline_18l_s3", "lws_baseline_18l_s4"]
    assert paper.run("lws_baseline_18l")["train"]["seed"] == 6198  # the unseeded run's seed: reused
    default = load_experiment(ROOT / "configs" / "default.yaml")
    assert default.instances("lws_baseline_12l") == ["lws_baseline_12l", "lws_baseline_12l_s1", "lws_baseline_12l_s2"]
    for exp in (paper, default):
        assert all("lws_throughput" in r["tables"] for n, r in exp.runs.items() if n.startswith("lws_"))
    # Each seed is a training of its own in the GPU-hour plan.
    lws = {r["table"]: r for r in cost_rows(paper)}["lws_table3"]
    assert lws["runs"] == 7 + 4


# ----------------------------------------------------------------------------- workflow


def test_the_workflow_plans_one_training_per_seed_and_reuses_the_first(tmp_path):
    """One dry run of the tiny default, whose 12L LWS baseline has seeds [6198, 1, 2]: with the
    first seed's training done (its model newer than its run config, as a finished training
    leaves it), only the two later seeds are trained, each by its own job."""
    import time

    from pipeline_helpers import snakemake_here as _snakemake

    exp = load_experiment(ROOT / "configs" / "default.yaml")
    corpus = tmp_path / "work" / "default" / "data" / "corpus"
    for rel in ["train/manifest.json", "tokenizer.json",
                *[f"val/{v}/manifest.json" for v in ("default_web", "default_code", "default_sci", "default_wiki")]]:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text("{}")
    run_dir = tmp_path / "work" / "default" / "runs" / "lws_baseline_12l"
    from shapelm.plan.jobs import training_config, weights_config

    (run_dir / "final").mkdir(parents=True)
    val = [f"work/default/data/corpus/val/{v}" for v in exp.run("lws_baseline_12l")["data"]["validation_sets"]]
    (run_dir / "run_config.json").write_text(json.dumps(training_config(exp, "lws_baseline_12l", val)))
    (run_dir / "weights_config.json").write_text(json.dumps(weights_config(exp, "lws_baseline_12l")))
    time.sleep(1)
    (run_dir / "final" / "model.safetensors").write_text("stand-in")
    models = [f"work/default/runs/{r}/final/model.safetensors" for r in exp.instances("lws_baseline_12l")]
    out = _snakemake(["--configfile", str(ROOT / "configs" / "default.yaml"), "-n", *models], tmp_path).stdout
    jobs = [line.split("run=")[1].strip() for line in out.splitlines() if "wildcards: run=" in line]
    assert sorted(jobs) == 3 * ["lws_baseline_12l_s1"] + 3 * ["lws_baseline_12l_s2"], (
        out[-3000:])  # run_config, weights_config and train of each
    stats = out.split("Job stats:")[1].split("Reasons:")[0]
    assert any(line.split()[:2] == ["train", "2"] for line in stats.splitlines()), stats


# ----------------------------------------------------------------------------- tables


def _fake_results(exp, results: Path, work: Path, ppls: dict[str, float]) -> None:
    """ppl.json and the final in-distribution evaluation (metrics.jsonl, LWS Table 3's PPL)."""
    from shapelm.config import run_recipe

    for run, value in ppls.items():
        data = fake_ppl(run)
        data["aggregate"]["val_ppl"] = value
        write(results / "runs" / run / "ppl.json", data)
        steps = run_recipe(exp.run(run)).total_steps
        final = {"kind": "val", "step": steps, "train_heldout": {"loss": math.log(value), "ppl": value}}
        (work / "runs" / run).mkdir(parents=True, exist_ok=True)
        (work / "runs" / run / "metrics.jsonl").write_text(json.dumps(final) + "\n")


def test_a_seeded_row_shows_mean_std_and_n(tmp_path):
    """LWS Table 3's 18L baseline over its five seeds: the mean is compared with the paper, the
    std (numpy's ddof=1) fills the paper's std cell, n counts the seeds with results."""
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    seeds = exp.instances("lws_baseline_18l")
    values = [5.31, 5.42, 5.38, 5.47, 5.36]  # fabricated
    _fake_results(exp, tmp_path / "r", tmp_path / "w", {**dict(zip(seeds, values)), "lws_crown_18l": 5.0})
    ctx = Context(load_plan(exp), tmp_path / "r", tmp_path / "w")
    table = build_table(ctx, "lws_table3")
    cell = table.cell("lws_baseline_18l", "val_ppl")
    assert cell.ours == pytest.approx(np.mean(values))
    assert cell.std == pytest.approx(np.std(values, ddof=1)) and cell.n == 5
    assert cell.status == "measured" and "(n=5)" in cell.ours_text and " ± " in cell.ours_text
    assert cell.diff_abs == pytest.approx(np.mean(values) - 5.400)
    std = table.cell("lws_baseline_18l", "val_ppl_std")
    assert std.paper == "0.0595" and std.ours == pytest.approx(np.std(values, ddof=1)) and std.status == "measured"
    assert table.cell("lws_baseline_18l", "n_runs").ours == 5
    crown = table.cell("lws_crown_18l", "val_ppl")
    assert crown.ours == 5.0 and crown.n is None and "n=" not in crown.ours_text
    assert table.cell("lws_crown_18l", "val_ppl_std").ours is None
    assert [r.id for r in table.rows].count("lws_baseline_18l_s1") == 0  # seeds are not rows
    # CSV: separate mean, std and n; Markdown the same numbers in one cell.
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(to_csv(table)))}
    b = rows["lws_baseline_18l"]
    assert float(b["val_ppl_ours_value"]) == pytest.approx(np.mean(values))
    assert float(b["val_ppl_ours_std"]) == pytest.approx(np.std(values, ddof=1)) and b["val_ppl_ours_n"] == "5"
    assert rows["lws_crown_18l"]["val_ppl_ours_std"] == "" and rows["lws_crown_18l"]["val_ppl_ours_n"] == ""
    assert cell.ours_text in to_markdown(table)
    # The derived claims use the mean.
    claim = {c.id: c for c in derived_claims(ctx)}["lws_crown_vs_baseline18"]
    assert claim.ours == pytest.approx(5.0 / np.mean(values) - 1)


def test_a_partly_finished_seed_row_says_how_many_of_how_many(tmp_path):
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    seeds = exp.instances("lws_baseline_18l")
    _fake_results(exp, tmp_path / "r", tmp_path / "w", {seeds[0]: 5.3, seeds[3]: 5.5})
    cell = build_table(Context(load_plan(exp), tmp_path / "r", tmp_path / "w"), "lws_table3").cell("lws_baseline_18l", "val_ppl")
    assert cell.n == 2 and cell.ours == pytest.approx(5.4) and "(n=2 of 5)" in cell.ours_text


def test_spread_is_the_sample_std():
    vals = [1.0, 2.0, 4.0, None]
    s = spread(vals)
    assert (s.mean, s.n) == (pytest.approx(7 / 3), 3) and s.std == pytest.approx(np.std([1, 2, 4], ddof=1))
    assert spread([3.0]).std is None and spread([None]).mean is None


# ----------------------------------------------------------------------------- throughput


def _metrics(work: Path, run: str, tps: list[float], device: str, world: int = 1, mfu=None) -> None:
    recs = [{"step": 10 * i + 1, "loss": 3.0, "tokens_per_s": t, "mfu": mfu} for i, t in enumerate(tps)]
    d = work / "runs" / run
    d.mkdir(parents=True, exist_ok=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    names = ["NVIDIA H100 80GB HBM3"] * world if device == "cuda" else ["x86_64"]
    (d / "manifest.json").write_text(json.dumps({"hardware": {"device_type": device, "devices": names,
                                                              "world_size": world}}))


def test_throughput_table_and_the_lws_claim_from_training_logs(tmp_path):
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    work = tmp_path / "w"
    # The first record (compilation, warm-up) is left out; the median of the rest is the figure.
    base = {"lws_baseline_18l": [10.0, 1000, 1010, 990], "lws_baseline_18l_s1": [5.0, 1100, 1100, 1100]}
    for run, tps in base.items():
        _metrics(work, run, tps, "cuda", world=2)
    _metrics(work, "lws_crown_18l", [1.0, 900, 920, 910], "cuda", world=2)
    _metrics(work, "lws_vanilla_18l", [1.0, 1030, 1040], "cpu")
    ctx = Context(load_plan(exp), tmp_path / "r", work)
    table = build_table(ctx, "lws_throughput")
    b = table.cell("lws_baseline_18l", "tokens_per_s")
    assert b.ours == pytest.approx(np.mean([1000, 1100])) and b.n == 2
    assert b.std == pytest.approx(np.std([1000, 1100], ddof=1))
    assert table.cell("lws_baseline_18l", "tokens_per_s_device").ours == pytest.approx(1050 / 2)
    crown = table.cell("lws_crown_18l", "mfu")
    flops = ctx.acc("lws_crown_18l")["flops_per_token"]
    assert crown.ours == pytest.approx(flops * 910 / 2 / 989e12)  # H100: the trainer's peak table
    assert table.cell("lws_crown_18l", "tokens_per_s_rel").ours == pytest.approx(910 / 1050)
    cpu = table.cell("lws_vanilla_18l", "mfu")
    assert cpu.ours is None and cpu.status == "n/a" and "cpu" in cpu.ours_text
    assert table.cell("lws_framed_18l", "tokens_per_s").ours_text == "pending"
    claims = {c.id: c for c in derived_claims(ctx)}
    c = claims["lws_throughput_lws_crown_18l"]
    assert c.ours == pytest.approx(910 / 1050) and c.note.startswith("against")
    assert claims["lws_throughput_lws_vanilla_18l"].note.startswith("holds")
    assert claims["lws_throughput_min"].ours is None  # framed, reverse, 12L vanilla not logged
    assert "lws_throughput_lws_baseline_18l" not in claims and "lws_throughput_lws_baseline_12l" not in claims


def test_a_logged_mfu_is_used_as_logged(tmp_path):
    exp = load_experiment(ROOT / "configs" / "default.yaml")
    _metrics(tmp_path, "lws_vanilla_12l", [1.0, 100, 100], "cuda", mfu=0.25)
    t = build_table(Context(load_plan(exp), tmp_path / "r", tmp_path), "lws_throughput")
    assert t.cell("lws_vanilla_12l", "mfu").ours == pytest.approx(0.25)
    assert math.isclose(t.cell("lws_vanilla_12l", "tokens_per_s").ours, 100)
