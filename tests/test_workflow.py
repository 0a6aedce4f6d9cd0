"""What the Snakefile takes from the library: resources, launch commands, the plan."""

from pathlib import Path

from shapelm.config import load_experiment
from shapelm.workflow import launch_prefix, plan_rows, resources_for, total_train_flops

ROOT = Path(__file__).parents[1]
PAPER = load_experiment(ROOT / "configs" / "paper.yaml")


def test_gpu_runtime_is_sized_from_the_flop_accounting():
    res = resources_for(PAPER, "hg8b_hg")
    assert res["gpus_per_node"] == 8 and res["nodes"] == 4
    hours = total_train_flops(PAPER.run("hg8b_hg")) / (32 * 989e12 * 0.4) / 3600
    assert abs(res["runtime"] / 60 - 1.25 * hours) < 0.1
    small = resources_for(PAPER, "hg113m_conv")
    assert small["runtime"] < res["runtime"] and small["cpus_per_task"] == 8


def test_cpu_jobs_ask_for_what_a_small_node_has():
    ci = load_experiment(ROOT / "configs" / "ci.yaml")
    res = resources_for(ci, "ci_tiny")
    assert res["gpus_per_node"] == 0 and res["cpus_per_task"] == 1 and res["runtime"] == 20


def test_launch_prefix_per_topology():
    assert launch_prefix(0, 1) == "python -m shapelm.cli"
    assert launch_prefix(8, 1).startswith("torchrun --standalone --nproc-per-node 8")
    multi = launch_prefix(8, 4)
    assert multi.startswith("srun --nodes 4 --ntasks-per-node 1 torchrun --nnodes 4")
    assert "${SLURM_JOB_ID:-0}" in multi  # job shells run with set -u


def test_plan_counts_each_run_once_in_the_total():
    rows = plan_rows(PAPER)
    total = rows[-1]
    assert total["runs"] == len(PAPER.runs)
    assert total["gpu_hours"] < sum(r["gpu_hours"] for r in rows[:-1])  # runs feed several tables
