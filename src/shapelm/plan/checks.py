"""Checks that must fail at `snakemake -n`, not after a GPU allocation.

`check_experiment(exp)` returns every problem it finds, each naming the run (or scale) and the
config key; `plan_experiment` loads a config and raises them together (`raise_on`), and
`workflow_experiment` is what the Snakefile calls: the same, ended with one `shapelm: error:`
message and no traceback. The data checks live with the data code (shapelm.data.choices), the
long-context ones with the long-context code (shapelm.longctx.plan); this module adds what a
job asks of the cluster.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from shapelm.config import Experiment, load_yaml, raise_problems, run_recipe, validate_schema
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ShapelmError
from shapelm.model.config import run_model_config


def _stage_checks(exp: Experiment) -> list[str]:
    from shapelm.data.choices import check_data
    from shapelm.longctx.plan import check_longctx

    from shapelm.plan.inputs import fetched_by_job

    return [*check_data(exp), *check_longctx(exp, fetched_by_job)]


def training_gpu_mem_gb(run: dict[str, Any], world_size: int, gpus_per_node: int | None = None) -> float:
    """A lower bound on one GPU's training memory: fp32 weights, gradients and Adam moments
    (16 bytes a parameter, split over ranks under FSDP, over a node's GPUs under HSDP) and the fp32 logits of one micro batch
    with their gradient. Activations come on top; a run this already overflows cannot start."""
    from shapelm.shapes.accounting import param_counts

    cfg = run_model_config(run)
    recipe = run_recipe(run)
    params = param_counts(cfg).total
    shards = {"fsdp": world_size, "hsdp": gpus_per_node or world_size}.get(recipe.distributed, 1)
    states = 16 * params / shards
    tokens = recipe.micro_batch_size * recipe.seq_len
    logits = 0 if recipe.loss_chunk_tokens else 8 * tokens * cfg.vocab_size
    return (states + logits) / 2**30


def check_resources(exp: Experiment) -> list[str]:
    from shapelm.plan.jobs import cluster_settings, run_resources, train_plan

    cluster = cluster_settings(exp)
    node = cluster["node"]
    errors: list[str] = []
    seen: set[str] = set()
    for name, run in exp.runs.items():
        scale = run["scale"]
        key = f"scales.{scale}.resources"
        res = run_resources(exp, run)
        gpus, nodes = int(res.get("gpus", 0)), int(res.get("nodes", 1))
        plan = train_plan(exp, name)
        job = plan.job
        if scale not in seen:
            seen.add(scale)
            if gpus > int(node["gpus"]):
                errors.append(f"{key}.gpus: {gpus} GPUs per node, but a node has {node['gpus']} "
                              "(cluster.node.gpus)")
            if gpus == 1 and nodes > 1:
                errors.append(f"{key}: 1 GPU on each of {nodes} nodes is not a launch shapelm makes "
                              "(one process per GPU, several per node); use gpus >= 2 or nodes 1")
            cpus = job.cpus_per_task * job.tasks_per_node
            if cpus > int(node["cpus"]):
                errors.append(f"{key}: {job.tasks_per_node} task(s) x {job.cpus_per_task} CPUs = "
                              f"{cpus} CPUs per node, but a node has {node['cpus']} (cluster.node.cpus); "
                              "lower resources.cpus_per_gpu")
            if job.mem_mb > int(node["mem_mb"]):
                errors.append(f"{key}.mem_mb: {job.mem_mb} MB per node, but a node has "
                              f"{node['mem_mb']} (cluster.node.mem_mb)")
            if "runtime_min" in res and int(res["runtime_min"]) > int(cluster["max_runtime_min"]):
                errors.append(f"{key}.runtime_min: {res['runtime_min']} exceeds the partition limit "
                              f"{cluster['max_runtime_min']} (cluster.max_runtime_min); leave it out "
                              "and long runs are segmented")
        recipe = run_recipe(run)
        per_step = recipe.micro_batch_size * job.world_size
        if recipe.batch_sequences % per_step:
            errors.append(
                f"runs.{name}.train: {recipe.batch_sequences} sequences per step do not split over "
                f"{job.world_size} processes x micro_batch_size {recipe.micro_batch_size} "
                f"({key}: {nodes} node(s) x {max(1, gpus)})")
        if gpus:
            need = training_gpu_mem_gb(run, job.world_size, gpus)
            if need > float(node["gpu_mem_gb"]):
                errors.append(
                    f"runs.{name}: weights, gradients, Adam and logits alone need {need:.0f} GiB per "
                    f"GPU, more than cluster.node.gpu_mem_gb={node['gpu_mem_gb']}; use "
                    "train.distributed: fsdp, more GPUs or a smaller micro_batch_size")
    return errors


#: How the data and long-context checks say that an input is not on this machine.
MISSING_INPUT = re.compile(r"not in the local HF cache|no such file or directory|not found", re.IGNORECASE)


def check_experiment(exp: Experiment) -> list[str]:
    """Every problem; with SHAPELM_ALLOW_MISSING_INPUTS=1 inputs absent from this machine are
    warnings instead (planning or `check-submit` on a host that does not hold the data)."""
    stage = _stage_checks(exp)
    _print_fetch_notes(exp)
    if os.environ.get("SHAPELM_ALLOW_MISSING_INPUTS") == "1":
        for message in [m for m in stage if MISSING_INPUT.search(m)]:
            print(f"shapelm: warning (SHAPELM_ALLOW_MISSING_INPUTS=1): {message}", file=sys.stderr)
        stage = [m for m in stage if not MISSING_INPUT.search(m)]
    return [*check_resources(exp), *stage]


def _print_fetch_notes(exp: Experiment) -> None:
    """Inputs not fetched yet, each with the job that will fetch it (stderr, at `snakemake -n`)."""
    from shapelm.plan.inputs import plan_notes
    from shapelm.plan.paths import work_dir

    notes = plan_notes(exp, work_dir(exp.name))
    if notes:
        print(f"shapelm: {len(notes)} input(s) not fetched yet:", file=sys.stderr)
        for note in notes:
            print(f"  {note}", file=sys.stderr)


def raise_on(errors: list[str], where: str = "config") -> None:
    raise_problems(errors, where, " before any job runs")


def plan_experiment(config: str | os.PathLike | dict[str, Any], configfiles: Any = (),
                    check: bool = True) -> Experiment:
    """Load an experiment as the workflow does, or raise one ConfigError listing every problem.

    `configfiles` are the files Snakemake merged into `config`: read again strictly, because
    Snakemake's own loader keeps the last of two equal keys and evaluates `__use_yte__`
    templates. A `rehearsal:` config becomes its CPU-sized copy (shapelm.plan.cpu_size). `check`
    adds the data, long-context and cluster checks (where the workflow is planned)."""
    files = [str(path) for path in configfiles]
    for path in files:
        load_yaml(path)
    where = " + ".join(files) or "config"
    if isinstance(config, dict) and config.get("rehearsal"):
        from shapelm.plan.cpu_size import apply_environment, rehearsal_config

        validate_schema(config, where)  # the experiment rehearsed, and its `rehearsal:` section
        apply_environment(config)
        config = rehearsal_config(config)
    exp = load_experiment(config, where=where)
    if check:
        raise_on(check_experiment(exp), exp.name)
    return exp


def workflow_experiment(config: dict[str, Any], configfiles: Any = (), check: bool = True) -> Experiment:
    """`plan_experiment` for the Snakefile: a bad config ends Snakemake with the message alone
    (SystemExit), not a traceback through the rules files."""
    try:
        return plan_experiment(config, configfiles, check)
    except ShapelmError as err:
        raise SystemExit(f"shapelm: error: {err}") from None
