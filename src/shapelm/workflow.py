"""What the Snakefile needs from the library: paths, job resources, launch commands, the plan.

Keeping this here (and unit-tested) keeps the Snakefile a thin list of rules.

Layout (EXP = the experiment's name, so the tiny default never overwrites paper results):
    work/EXP/data/...                      token dirs, tokenizer (inputs, never in git)
    work/EXP/runs/RUN/run_config.json      the resolved run config
    work/EXP/runs/RUN/checkpoints/         training state, NOT a declared output: a rerun resumes
    work/EXP/runs/RUN/final/               the trained model (declared output)
    results/EXP/runs/RUN/*.json            per-run metrics
    results/EXP/tables/NAME.{csv,md,tex}   tables beside the paper's values
    paper_figures/EXP/NAME.{png,pdf}       figures
"""

from __future__ import annotations

import math
from typing import Any

from shapelm.accounting import flops_per_token
from shapelm.config import Experiment, run_model_config, run_recipe

def work_dir(exp: str) -> str:
    return f"work/{exp}"


def run_dir(exp: str, run: str) -> str:
    return f"work/{exp}/runs/{run}"


def results_dir(exp: str) -> str:
    return f"results/{exp}"


def figures_dir(exp: str) -> str:
    return f"paper_figures/{exp}"


def total_train_flops(run: dict[str, Any]) -> float:
    recipe = run_recipe(run)
    per_token = flops_per_token(run_model_config(run), recipe.seq_len).train
    return per_token * recipe.total_steps * recipe.batch_tokens


def _resources(exp: Experiment, run: dict[str, Any]) -> dict[str, Any]:
    """The experiment's `resources` overridden by the run's scale."""
    return {**exp.raw.get("resources", {}), **exp.raw["scales"][run["scale"]].get("resources", {})}


def _sustained_flops(res: dict[str, Any]) -> float:
    """FLOP/s one GPU sustains: its dense bf16 peak (default H100/H200) x the assumed MFU."""
    return float(res.get("gpu_peak_tflops", 989)) * 1e12 * float(res.get("assumed_mfu", 0.4))


def resources_for(exp: Experiment, run_name: str) -> dict[str, Any]:
    """SLURM resources of a run's training job, sized from the accounting.

    runtime = total FLOPs / (GPUs x peak x assumed MFU) x 1.25 margin, at least 10 minutes. On the
    tiny default (gpus 0) the job runs on CPU with a short runtime.
    """
    run = exp.run(run_name)
    res = _resources(exp, run)
    gpus_per_node = int(res.get("gpus", 0))
    nodes = int(res.get("nodes", 1))
    if gpus_per_node > 0:
        seconds = total_train_flops(run) / (gpus_per_node * nodes * _sustained_flops(res))
        runtime = max(10, math.ceil(seconds * 1.25 / 60))
    else:
        runtime = int(res.get("runtime_min", 60))
    return {
        "gpus_per_node": gpus_per_node,
        "nodes": nodes,
        "runtime": int(res.get("runtime_min", runtime)),
        "mem_mb": int(res.get("mem_mb", 64_000 * max(1, gpus_per_node) if gpus_per_node else 4_000)),
        "cpus_per_task": (
            int(res.get("cpus_per_gpu", 8)) * gpus_per_node if gpus_per_node else int(res.get("cpus", 1))
        ),
    }


def launch_prefix(gpus_per_node: int, nodes: int) -> str:
    """The command that starts one training process per GPU, on one node or across nodes.

    Single process on CPU; `torchrun --standalone` on one node; across nodes, `srun` starts one
    torchrun per node (rendezvous on the first node of the allocation). Read SLURM variables
    with defaults: Snakemake runs job shells with `set -u`.
    """
    if gpus_per_node <= 1 and nodes <= 1:
        return "python -m shapelm.cli"
    if nodes <= 1:
        return f"torchrun --standalone --nproc-per-node {gpus_per_node} -m shapelm.cli"
    head = "$(scontrol show hostnames \"${SLURM_JOB_NODELIST:-localhost}\" | head -n 1)"
    return (
        f"srun --nodes {nodes} --ntasks-per-node 1 torchrun --nnodes {nodes} "
        f"--nproc-per-node {gpus_per_node} --rdzv-backend c10d --rdzv-endpoint {head}:29500 "
        f"--rdzv-id ${{SLURM_JOB_ID:-0}} -m shapelm.cli"
    )


def plan_rows(exp: Experiment) -> list[dict[str, Any]]:
    """GPU-hours per table from the accounting FLOPs and each scale's assumed MFU."""
    per_table: dict[str, dict[str, Any]] = {}
    total = {"table": "TOTAL (each run once)", "runs": 0, "flops": 0.0, "gpu_hours": 0.0}
    for run in exp.runs.values():
        flops = total_train_flops(run)
        gpu_hours = flops / _sustained_flops(_resources(exp, run)) / 3600
        for table in [*(run["tables"] or ["(untabled)"]), None]:
            row = total if table is None else per_table.setdefault(
                table, {"table": table, "runs": 0, "flops": 0.0, "gpu_hours": 0.0})
            row["runs"] += 1
            row["flops"] += flops
            row["gpu_hours"] += gpu_hours
    rows = sorted(per_table.values(), key=lambda r: r["table"])
    rows.append(total)
    return rows
