"""What the Snakefile takes from the library: job shapes, segments, launch, plan-time checks."""

import copy
from pathlib import Path

import pytest
import yaml

from shapelm.plan.checks import check_resources, raise_on
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.commands.launch import launch_command
from shapelm.commands.cluster import PlannedJob, parse_dry_run, sbatch_command
from shapelm.plan.cost import cost_rows
from shapelm.plan.jobs import (
    JobShape,
    cluster_settings,
    resources_for,
    stage_job,
    total_train_flops,
    train_plan,
)

ROOT = Path(__file__).parents[2]
PAPER_RAW = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
PAPER = load_experiment(ROOT / "configs" / "paper.yaml")


def _paper(**edits):
    raw = copy.deepcopy(PAPER_RAW)
    for path, value in edits.items():
        node = raw
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return load_experiment(raw)


def test_runtime_is_sized_from_the_flop_accounting_and_split_at_the_partition_limit():
    plan = train_plan(PAPER, "hg8b_hg")
    hours = total_train_flops(PAPER.run("hg8b_hg")) / (32 * 989e12 * 0.4) / 3600
    assert abs(plan.estimated_min / 60 - hours) < 0.01
    limit = cluster_settings(PAPER)["max_runtime_min"]
    assert plan.segments > 1 and plan.job.runtime_min <= limit
    # The segments hold the whole run at 1.25x the estimate, each after its start-up.
    per_segment = plan.job.runtime_min - 15 - 10
    assert plan.segments * per_segment >= 1.25 * plan.estimated_min
    assert plan.until_steps[-1] == 160e9 // 4194304 and list(plan.until_steps) == sorted(plan.until_steps)
    small = train_plan(PAPER, "hg113m_conv")
    assert small.segments == 1 and small.job.runtime_min < plan.job.runtime_min


def test_a_shorter_partition_limit_means_more_segments():
    short = _paper(cluster={"max_runtime_min": 1440})
    assert train_plan(short, "hg8b_hg").segments > train_plan(PAPER, "hg8b_hg").segments
    assert train_plan(short, "hg8b_hg").job.runtime_min <= 1440
    forced = _paper(scales__906M__resources={"gpus": 8, "nodes": 1, "segments": 3})
    assert train_plan(forced, "hg906m_hg").until_steps == (1431, 2861, 4291)


def test_one_task_per_gpu_and_one_launch_step():
    job = train_plan(PAPER, "hg906m_hg").job.resources()
    assert job["gres"] == "gpu:8" and job["tasks_per_node"] == 8 and job["mpi"] == "srun"
    assert "tasks" not in job and job["cpus_per_task"] == 8
    assert job["slurm_extra"] == "--signal=USR1@600"
    single = train_plan(PAPER, "hg113m_conv").job.resources()
    assert "mpi" not in single and single["gres"] == "gpu:1"
    multi = train_plan(PAPER, "hg8b_hg").job
    assert multi.launch() == "shapelm launch --nodes 4 --procs-per-node 8 --cpus-per-task 8 --"


def test_the_installed_executor_plugin_makes_an_acceptable_request():
    # What made 51 of 74 training jobs unschedulable: --ntasks-per-gpu with 64 CPUs a task.
    res = {**train_plan(PAPER, "hg8b_hg").job.resources(), "slurm_partition": "gpu"}
    argv = sbatch_command(PlannedJob("train", False, "run=hg8b_hg", res))
    assert "--nodes=4" in argv and "--ntasks-per-node=8" in argv and "--cpus-per-task=8" in argv
    assert "--gres=gpu:8" in argv and "--signal=USR1@600" in argv
    assert not any(a.startswith("--ntasks-per-gpu") for a in argv)


def test_evaluation_jobs_ask_for_the_host_memory_the_model_needs():
    big = stage_job(PAPER, "hg8b_hg", "eval_ppl")["resources"]
    small = stage_job(PAPER, "hg113m_conv", "eval_ppl")["resources"]
    assert big["gres"] == "gpu:1" and big["mem_mb"] > 2 * 4 * 8.0e9 / 1e6
    assert small["mem_mb"] == 32_000
    finetune = stage_job(PAPER, "hg8b_hg", "yarn_finetune")
    assert finetune["resources"]["nodes"] == 4 and finetune["launch"].startswith("shapelm launch")


def test_cpu_jobs_ask_for_what_a_small_node_has():
    ci = load_experiment(ROOT / "configs" / "ci.yaml")
    res = resources_for(ci, "ci_tiny")
    assert res["gpus_per_node"] == 0 and res["cpus_per_task"] == 1 and res["runtime"] == 20
    assert train_plan(ci, "ci_tiny").job.launch() == "shapelm"


def test_launch_is_srun_in_an_allocation_and_torchrun_outside():
    inside = launch_command(2, 8, ["train", "x"], cpus_per_task=8, environ={"SLURM_JOB_ID": "7"})
    assert inside[:5] == ["srun", "--nodes=2", "--ntasks-per-node=8", "--ntasks=16", "--kill-on-bad-exit=1"]
    assert "--cpus-per-task=8" in inside and inside[-2:] == ["train", "x"]
    outside = launch_command(1, 4, ["train", "x"], environ={})
    assert "torch.distributed.run" in outside and "--nproc-per-node=4" in outside
    assert launch_command(1, 1, ["train"], environ={"SLURM_JOB_ID": "7"})[1:3] == ["-m", "shapelm.cli"]
    with pytest.raises(ConfigError, match="SLURM allocation"):
        launch_command(2, 8, ["train"], environ={})


def test_cluster_values_from_the_profile_arrive_as_strings_and_become_numbers():
    exp = _paper(cluster={"max_runtime_min": "1440", "node": {"gpus": "8", "gpu_mem_gb": "141"}})
    assert cluster_settings(exp)["max_runtime_min"] == 1440
    assert cluster_settings(exp)["node"]["gpu_mem_gb"] == 141


@pytest.mark.parametrize("edits, message", [
    ({"scales__906M__resources": {"gpus": 16, "nodes": 1}}, r"scales\.906M\.resources\.gpus: 16 GPUs per node"),
    ({"scales__906M__resources": {"gpus": 8, "nodes": 1, "cpus_per_gpu": 32}}, r"scales\.906M\.resources: 8 task\(s\) x 32 CPUs"),
    ({"scales__906M__resources": {"gpus": 8, "nodes": 1, "mem_mb": 4_000_000}}, r"scales\.906M\.resources\.mem_mb"),
    ({"scales__113M__resources": {"gpus": 1, "nodes": 2}}, r"scales\.113M\.resources: 1 GPU on each of 2 nodes"),
    ({"scales__113M__resources": {"gpus": 1, "nodes": 1, "runtime_min": 5000}}, r"scales\.113M\.resources\.runtime_min: 5000 exceeds"),
    ({"scales__906M__resources": {"gpus": 6, "nodes": 1}}, r"runs\.hg906m_conv\.train: 1024 sequences per step do not split over 6"),
    ({"scales__8B__train": {"lr": 1.2e-4, "batch_tokens": 4194304, "seq_len": 4096, "total_tokens": 160.0e9,
                            "warmup_tokens": 400.0e6, "distributed": "ddp", "micro_batch_size": 1}},
     r"runs\.hg8b_conv: weights, gradients, Adam and logits alone need \d+ GiB"),
])
def test_each_bad_request_is_refused_at_plan_time_naming_its_key(edits, message):
    errors = check_resources(_paper(**edits))
    assert any(__import__("re").search(message, e) for e in errors), errors
    with pytest.raises(ConfigError, match="before any job runs"):
        raise_on(errors, "paper")


def test_the_paper_config_asks_for_nothing_a_node_cannot_give():
    assert check_resources(PAPER) == []


def test_dry_run_output_is_parsed_into_jobs_and_their_resources():
    text = """
rule train:
    input: a
    wildcards: run=hg8b_hg
    resources: tmpdir=<TBD>, mem_mb=512000, slurm_partition=gpu, runtime=2852, nodes=4, gres=gpu:8, mpi=srun, tasks_per_node=8, slurm_extra=--signal=USR1@600
rule results:
    resources: tmpdir=<TBD>
shapelm-localrules: results run_config
"""
    jobs = parse_dry_run(text)
    assert [j.rule for j in jobs] == ["train", "results"]
    assert jobs[0].resources["nodes"] == 4 and jobs[0].resources["slurm_extra"] == "--signal=USR1@600"
    assert "tmpdir" not in jobs[0].resources and jobs[1].local and not jobs[0].local


def test_job_shape_of_a_cpu_experiment_is_one_process():
    job = JobShape(runtime_min=30)
    assert job.world_size == 1 and job.launch() == "shapelm" and "gres" not in job.resources()


def test_cost_counts_each_run_once_in_the_total():
    rows = cost_rows(PAPER)
    total = rows[-1]
    assert total["runs"] == len(PAPER.runs)
    assert total["gpu_hours"] < sum(r["gpu_hours"] for r in rows[:-1])  # runs feed several tables


def test_planning_a_workflow_does_not_import_torch():
    """Every SLURM job parses the Snakefile twice (the batch step and its srun step): planning
    must stay light, or each job pays torch's import before its command starts."""
    import subprocess
    import sys

    code = (
        "import sys, yaml\n"
        "from shapelm.plan.checks import workflow_experiment\n"
        "for path in ('configs/default.yaml', 'configs/paper.yaml'):\n"
        "    workflow_experiment(yaml.safe_load(open(path)), [path], check=False)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'lm_eval') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_a_work_directory_linked_to_another_file_system_is_accepted(tmp_path, monkeypatch):
    """`work/EXP` as a symlink to a scratch disk (the usual cluster setup) is no escape; a link
    below it that leads out of where it points still is."""
    from shapelm.plan.experiment import check_output_paths, load_experiment

    exp = load_experiment(ROOT / "configs" / "default.yaml")
    scratch = tmp_path / "scratch" / "default"
    (scratch / "runs").mkdir(parents=True)
    (tmp_path / "repo" / "work").mkdir(parents=True)
    (tmp_path / "repo" / "work" / "default").symlink_to(scratch)
    monkeypatch.chdir(tmp_path / "repo")
    assert check_output_paths(exp) == []
    run = next(iter(exp.runs))
    (scratch / "runs" / run).symlink_to(tmp_path / "elsewhere")
    (err,) = check_output_paths(exp)
    assert err == (f"runs.{run}: {run!r} would put outputs at {tmp_path / 'elsewhere'}, "
                   f"outside work/default/")
