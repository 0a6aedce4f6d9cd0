"""The paper, rehearsed: configs/paper.yaml at CPU size through real SLURM on an emulated GPU
cluster (4 nodes x 8 GPUs; each GPU a gloo process on this CPU), every job shape and path once.
Slow: run by .ci/run."""

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from pipeline_helpers import ROOT, VENV_BIN, copy_repo, ensure_gpu_cluster, user_env

REHEARSAL_TIMEOUT_S = int(os.environ.get("SHAPELM_REHEARSAL_TIMEOUT", 3600))
PREEMPTED = ("hg906m_conv", 3)  # an 8-GPU run, preempted before its step 3
# CI rehearses every path once, not every run (all of them through SLURM is `make rehearse`, ~1 h
# on 2 cores): each job shape, the segment chains, a preemption, each paper's data and tokenizer,
# the long-context chain and decode. Evaluated end to end: a 1-GPU run, an 8-GPU run (the one
# preempted) and a 4-node run in 2 segments with its long-context chain (32-rank YaRN finetune,
# Proof-pile, RULER); the decode benchmark of the Table 12 pairs.
EVALUATED_RUNS = ["hg113m_conv", "hg906m_conv", "hg8b_hg"]
EVALUATED_TARGETS = [f"run_{run}" for run in EVALUATED_RUNS] + ["results/rehearsal/decode/decode.json",
                                                                "work/rehearsal/experiment.json"]
# Trained as well: Tapered's Llama-2 re-encoded slice on 4 GPUs and on 2 nodes in 2 segments, LWS's
# GPT-NeoX slice. Every one of the paper's runs takes a step at this
# size in `make test` (below), and every job of the paper is asked of the cluster by the
# check-submit test.
TRAINED_RUNS = ["tp440m_linear_1p5_0p5", "tp1300m_cosine_1p5_0p5", "lws_crown_18l"]


@pytest.fixture(scope="module")
def rehearsal_inputs(tmp_path_factory):
    """The rehearsal's stand-in inputs (tokenizers, text), written once for this module's tests."""
    from shapelm.commands.rehearse import write_inputs

    inputs = tmp_path_factory.mktemp("rehearsal") / "inputs"
    write_inputs(inputs)
    return inputs


def test_rehearsal_config_keeps_every_run_and_the_cluster_shape(rehearsal_inputs, tmp_path):
    from shapelm.plan.experiment import load_experiment
    from shapelm.plan.cpu_size import rehearsal_config
    from shapelm.plan.jobs import train_plan

    paper_raw = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    paper = load_experiment(paper_raw)
    small = load_experiment(rehearsal_config({**paper_raw, "rehearsal": {"inputs": str(rehearsal_inputs)}}))
    assert small.name == "rehearsal" and sorted(small.runs) == sorted(paper.runs)
    for name in paper.runs:
        big_job, small_job = train_plan(paper, name).job, train_plan(small, name).job
        assert (small_job.nodes, small_job.gpus_per_node) == (big_job.nodes, big_job.gpus_per_node), name
        assert small.run(name)["arch"]["kind"] == paper.run(name)["arch"]["kind"]
        assert small.run(name)["model"]["vocab_size"] <= 2112  # the stand-ins, padded to 64
        assert small.run(name)["eval"]["ppl_seq_len"] == 64  # one length, also for 113M (4096 in the paper)
    assert train_plan(small, "hg8b_hg").segments == 2 and train_plan(small, "hg3b_hg").segments == 2
    assert train_plan(paper, "hg8b_hg").segments > 2


def test_the_official_recipe_overlay_is_rehearsed_at_cpu_size(rehearsal_inputs, tmp_path):
    """The released-code recipe ranks above a scale's settings; the rehearsal's sizes still win."""
    from shapelm.config import merge
    from shapelm.plan.experiment import load_experiment
    from shapelm.plan.runs import resolve_run
    from shapelm.plan.cpu_size import rehearsal_config

    raw = merge(yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text()),
                yaml.safe_load((ROOT / "configs" / "overlays" / "paper-official.yaml").read_text()))
    small = load_experiment(rehearsal_config({**raw, "rehearsal": {"inputs": str(rehearsal_inputs)}}))
    run = resolve_run(small.raw, "hg8b_hg")
    assert run["recipe"]["name"] == "official"
    assert run["train"]["total_tokens"] < 10**6 and run["train"]["seq_len"] <= 64 and not run["train"]["fp8"]


def shape_family(arch: dict) -> tuple:
    """What decides which code a run's model runs: its kind and every named choice (mixer,
    schedule, variant, ...), not its sizes."""
    return tuple(sorted((key, value) for key, value in arch.items() if isinstance(value, str)))


@pytest.mark.parametrize("config", ["paper.yaml", "one-gpu.yaml"])
def test_every_paper_run_takes_a_training_step_at_rehearsal_size(rehearsal_inputs, tmp_path, config):
    """What a dry run cannot show: each run's model builds and its first gradient is finite (the
    paper's runs, and the one-GPU experiment's, shrunk as `shapelm rehearse` shrinks them); one
    run of each shape family also takes a whole training step through the trainer (its data,
    optimizer, checkpoint and metrics), the others differ from it in sizes only."""
    import numpy as np
    import torch

    from shapelm.data.tokens import write_token_dir
    from shapelm.model import ModelConfig, build_model
    from shapelm.plan.experiment import load_experiment
    from shapelm.plan.runs import resolve_run
    from shapelm.plan.cpu_size import rehearsal_config
    from shapelm.train import train

    paper_raw = yaml.safe_load((ROOT / "configs" / config).read_text())
    small = load_experiment(rehearsal_config({**paper_raw, "rehearsal": {"inputs": str(rehearsal_inputs)}}))
    ids = np.random.default_rng(0).integers(1, 256, size=100_000).astype(np.uint32)
    tokens = tmp_path / "tokens"
    write_token_dir(tokens, ids, vocab_size=256, eos_id=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trained = {}
    try:
        for name in small.raw["runs"]:  # a run's later seeds (`seeds:`) differ in the seed only
            run = resolve_run(small.raw, name)
            model = build_model(ModelConfig.from_dict(run["model"]))
            batch = torch.from_numpy(ids[: 2 * 33].astype(np.int64) % 256).view(2, 33)
            loss = model(batch[:, :-1], labels=batch[:, 1:]).loss
            loss.backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            assert torch.isfinite(loss) and grads and all(torch.isfinite(g).all() for g in grads), name
            family = shape_family(run["arch"])
            if family in trained:
                continue
            trained[family] = name
            result = train(run, tmp_path / "runs" / name, tokens, max_steps=1, progress=False)
            assert result.status == "stopped" and result.step == 1, (name, result)
            record = json.loads((tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()[-1])
            assert np.isfinite(record["loss"]), (name, record)
    finally:
        torch.set_num_threads(threads)
    assert len(trained) >= (17 if config == "paper.yaml" else 5), trained
    assert set(small.raw["runs"]) == set(paper_raw["runs"])  # the rehearsal keeps every paper run
    later_seeds = sum(len(spec.get("seeds", [0])) - 1 for spec in paper_raw["runs"].values())
    assert len(small.runs) == len(paper_raw["runs"]) + later_seeds


def _preempt_when_holding(repo: Path, stop: threading.Event, seen: dict) -> None:
    """Wait for the held run (SHAPELM_HOLD_AT), then preempt its job through SLURM."""
    run, _ = PREEMPTED
    marker = repo / "work" / "rehearsal" / "runs" / run / "HOLDING"
    while not stop.is_set() and not marker.exists():
        time.sleep(0.5)
    if stop.is_set():
        return
    jobs = subprocess.run(["squeue", "-h", "-o", "%i|%k"], capture_output=True, text=True).stdout
    ids = [line.split("|")[0] for line in jobs.splitlines() if f"wildcards_{run}" in line and "rule_train" in line]
    seen["jobs"] = ids
    for job in ids:
        subprocess.run(["scancel", "--signal=USR1", job], check=False)


@pytest.mark.slow
def test_every_paper_job_is_accepted_by_the_gpu_cluster(tmp_path):
    ensure_gpu_cluster()
    repo = copy_repo(tmp_path / "repo")
    env = {**user_env(), "SHAPELM_ALLOW_MISSING_INPUTS": "1"}
    proc = subprocess.run([str(VENV_BIN / "shapelm"), "cluster", "check-submit", "--", "--profile", "slurm"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    counted = re.search(r"(\d+) cluster jobs in (\d+) distinct requests, (\d+) local jobs: 0 request\(s\) refused", out)
    assert counted, out[-3000:]
    assert int(counted.group(1)) >= 78 * 3 and "--ntasks-per-gpu" not in out


@pytest.mark.slow
def test_the_paper_rehearsed_through_slurm(tmp_path):
    ensure_gpu_cluster()
    repo = copy_repo(tmp_path / "repo")
    # the rehearsal checks the plumbing, not the bits: torch's own (faster) CPU kernels
    env = {**user_env(), "SHAPELM_HOLD_AT": f"{PREEMPTED[0]}:{PREEMPTED[1]}", "SHAPELM_NUMERICS": "fast"}
    from shapelm.plan.experiment import load_experiment

    names = list(load_experiment(ROOT / "configs" / "paper.yaml").runs)
    assert set(TRAINED_RUNS + EVALUATED_RUNS) <= set(names)
    models = [f"work/rehearsal/runs/{n}/final/model.safetensors" for n in TRAINED_RUNS]
    cmd = ["timeout", "-s", "INT", "-k", "30", str(REHEARSAL_TIMEOUT_S), str(VENV_BIN / "shapelm"),
           "rehearse", "--", "--profile", "slurm", "--slurm-init-seconds-before-status-checks", "2",
           "--seconds-between-status-checks", "5", "--latency-wait", "5", "--jobs", "24",
           "--slurm-keep-successful-logs", *EVALUATED_TARGETS, *models]
    stop, seen = threading.Event(), {}
    watcher = threading.Thread(target=_preempt_when_holding, args=(repo, stop, seen), daemon=True)
    watcher.start()
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    stop.set()
    took = time.monotonic() - started
    logs = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in sorted((repo / "logs").rglob("*.log"))[-30:])
    assert proc.returncode == 0, f"{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}\n{logs}"
    print(f"rehearsal: {took:.0f} s through SLURM")

    work, results = repo / "work" / "rehearsal" / "runs", repo / "results" / "rehearsal"
    untrained = [n for n in TRAINED_RUNS + EVALUATED_RUNS if not (work / n / "final" / "model.safetensors").exists()]
    assert not untrained, untrained
    for n in EVALUATED_RUNS:
        assert (results / "runs" / n / "ppl.json").exists() and (results / "runs" / n / "downstream.json").exists()
    # Multi-GPU and multi-node runs ran with one process per GPU.
    for run, world in (("hg113m_conv", 1), ("tp440m_linear_1p5_0p5", 4), ("hg906m_conv", 8), ("tp1300m_cosine_1p5_0p5", 16),
                       ("hg8b_hg", 32)):
        manifest = (work / run / "manifest.json").read_text()
        assert re.search(rf'"world_size": {world}\b', manifest), (run, manifest[:600])
    # Runs longer than a job: segment markers chained in the DAG.
    for run in ("hg8b_hg", "tp1300m_cosine_1p5_0p5"):
        assert len(list((work / run / "segments").glob("step-*.json"))) == 1, run
    # The preempted run: SLURM's USR1 reached it, it checkpointed, the retry resumed it.
    assert seen.get("jobs"), "the held run was never seen in squeue"
    assert (work / PREEMPTED[0] / "HOLDING").exists()
    slurm_logs = list((repo / ".snakemake" / "slurm_logs" / "rule_train" / PREEMPTED[0]).glob("*.log"))
    # The retry is a second SLURM job, or (per-rule `retries:`, applied by the job's own Snakemake)
    # a restart inside the same allocation: either way the trainer resumed from the checkpoint.
    restarted = "Trying to restart job" in "".join(p.read_text() for p in slurm_logs)
    assert len(slurm_logs) >= 2 or restarted, slurm_logs
    assert "resumed from" in (repo / "logs" / "rehearsal" / "runs" / PREEMPTED[0] / "train.log").read_text()
    # The long-context chain of a 4-node run, and decode.
    assert (results / "runs" / "hg8b_hg" / "proofpile.json").exists()
    assert (results / "runs" / "hg8b_hg" / "ruler.json").exists()
    assert (results / "decode" / "decode.json").exists()
    # The paper's tables from these outputs: what was evaluated is measured, the rest pending.
    build = subprocess.run([str(VENV_BIN / "shapelm"), "results", "build", "work/rehearsal/experiment.json",
                            "--only", "hourglass_table2", "--only", "hourglass_longctx", "--only", "hourglass_table12",
                            "--only", "hourglass_table7",
                            "--results-dir", "results/rehearsal", "--figures-dir", "paper_figures/rehearsal",
                            "--work-dir", "work/rehearsal"], cwd=repo, env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    import csv

    for table in ("hourglass_table2", "hourglass_longctx", "hourglass_table12"):
        assert (results / "tables" / f"{table}.csv").exists(), table
    with open(results / "tables" / "hourglass_table2.csv") as fh:
        rows = {r["run"]: r for r in csv.DictReader(fh)}
    for run in ("hg906m_conv", "hg8b_hg"):
        assert rows[run]["val_ppl_status"] == "measured" and rows[run]["avg_acc_status"] == "measured", rows[run]
    assert rows["hg3b_conv"]["val_ppl_status"] != "measured", rows["hg3b_conv"]
    # OLMo's task set ran through lm-eval on stand-in data: Table 7's per-task columns are ours
    with open(results / "tables" / "hourglass_table7.csv") as fh:
        rows = {r["run"]: r for r in csv.DictReader(fh)}
    for col in ("arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa", "trivia_qa", "natural_qs"):
        assert rows["hg906m_conv"][f"{col}_status"] == "measured", (col, rows["hg906m_conv"])
    assert "stand-in data" in (results / "tables" / "hourglass_table7.md").read_text()
