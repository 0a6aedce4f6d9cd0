"""The jobs of an experiment's workflow: what each SLURM job asks for and what it reads.

    training_config / weights_config  a run's `run_config.json` and `weights_config.json`
    train_plan                        a run's training as a chain of segment jobs (JobShape, TrainPlan)
    stage_job                         an evaluation-side job's resources and launch prefix
    cluster_settings, run_resources   the partition's limits and a run's requested resources
    not_retried_when_refused          the shell wrapper that keeps Snakemake from retrying a refusal
    logged_per_attempt                a job's output in a log of its own attempt (never overwritten)

The rules look resources and launch prefixes up here (unit-tested) instead of computing them,
and the directory layout in `shapelm.plan.paths`. Where the files live:
    work/EXP/runs/RUN/run_config.json      what the trainer reads of the resolved run config
    work/EXP/runs/RUN/weights_config.json  its part that decides the weights (train's input)
    work/EXP/runs/RUN/checkpoints/         training state, NOT a declared output: a rerun resumes
    work/EXP/runs/RUN/final/               the trained model (declared output)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from shapelm.shapes.accounting import flops_per_token
from shapelm.config import Experiment, config_hash, run_recipe, weights_content
from shapelm.model.config import run_model_config


#: What pretraining reads of a resolved run, and nothing else: changing an evaluation,
#: long-context, decode or results setting never reruns (and so never deletes) a trained model.
TRAIN_CONFIG_KEYS = ("name", "experiment", "scale", "arch", "model", "train")


def training_config(exp: Experiment, run: str, validation_dirs: list[str] | None = None) -> dict:
    """`run_config.json`: what the trainer reads (with the held-out directories it scores during
    training), and its config hash, which covers only what changes the weights
    (shapelm.config.weights_content)."""
    cfg = {key: exp.run(run)[key] for key in TRAIN_CONFIG_KEYS}
    if validation_dirs:
        cfg["validation_dirs"] = list(validation_dirs)
    return {**cfg, "hash": config_hash(cfg)}


def weights_config(exp: Experiment, run: str) -> dict:
    """`weights_config.json`: the part of the training config that decides the weights; the
    train rule depends on it (and only by name on run_config.json), so a change elsewhere in
    the run config does not retrain."""
    cfg = training_config(exp, run)
    return {**weights_content(cfg), "hash": cfg["hash"]}


#: Names one invocation of the workflow (set when the Snakefile is parsed, inherited by its
#: jobs: local ones as children, cluster ones through sbatch's exported environment).
WORKFLOW_RUN_ENV = "SHAPELM_WORKFLOW_RUN"
#: Exit status of a refused input (shapelm.cli: a ShapelmError, one error line): a bad config or
#: data, a recipe that differs from the checkpoints', a run locked by another trainer, a full
#: disk, a non-finite loss. Running the same command again fails the same way.
REFUSED_EXIT = 2


def workflow_run_id() -> str:
    """This workflow invocation's id (made once, kept by the jobs that inherit it)."""
    import uuid

    return os.environ.setdefault(WORKFLOW_RUN_ENV, uuid.uuid4().hex)


def logged_per_attempt(command: str, log: str) -> str:
    """A job's shell command (Snakemake placeholders kept) writing its output to a log of its
    own attempt, `LOG.attempts/UTCTIME-PID.log` (appended, opened by a header line), with `log`
    a relative symlink to it. Snakemake deletes a job's declared log before it runs it; a job
    started while another holds the run (two Snakemake runs on one directory: the run lock
    refuses its trainer) then removes only the symlink, never the running trainer's output."""
    return (
        f'attempt="$(basename {log}).attempts/$(date -u +%Y%m%dT%H%M%SZ)-$$.log"; '
        f'mkdir -p "$(dirname {log})/$(dirname "$attempt")"; '
        f'echo "== attempt started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) (pid $$) ==" '
        f'>> "$(dirname {log})/$attempt"; '
        f'ln -sfn "$attempt" {log}; '
        f'( {command} ) >> "$(dirname {log})/$attempt" 2>&1'
    )


def not_retried_when_refused(command: str, marker: str, log: str) -> str:
    """A job's shell command (Snakemake placeholders kept) that Snakemake's `retries` do not
    repeat after a refusal: the command writing `log`, exiting REFUSED_EXIT, leaves `marker`
    (this invocation's id and the log's last error line); a retry in the same invocation finds
    it and exits at once, naming the refusal. Preemptions and time limits (exit 138, 143)
    are retried as before; a new invocation (the cause fixed) runs the command again."""
    run = "${{" + WORKFLOW_RUN_ENV + ":-}}"  # (braces doubled for Snakemake; empty if unset)
    return (
        f'refused={marker}; if [ -n "{run}" ] && [ -f "$refused" ] && '
        f'[ "$(head -n 1 "$refused")" = "{run}" ]; then '
        f'echo "not retried: the previous attempt was refused: $(tail -n 1 "$refused")" '
        f"> {log}; exit {REFUSED_EXIT}; fi; "
        f"code=0; ( {command} ) || code=$?; "
        f'if [ "$code" -eq {REFUSED_EXIT} ]; then printf "%s\\n%s\\n" "{run}" '
        f'"$(grep "error:" {log} | tail -n 1)" > "$refused"; fi; exit "$code"'
    )


def total_train_flops(run: dict[str, Any]) -> float:
    recipe = run_recipe(run)
    per_token = flops_per_token(run_model_config(run), recipe.seq_len).train
    return per_token * recipe.total_steps * recipe.batch_tokens


#: What a GPU cluster's partition allows, unless the experiment's `cluster:` section (for the
#: paper: configs/overlays/cluster.yaml, which profiles/slurm merges in) says otherwise.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "max_runtime_min": 2880,  # the partition's MaxTime (48 h); longer runs are segmented
    "signal_lead_s": 600,     # --signal=USR1@600; also the trainer's checkpoint margin
    "startup_min": 15,        # per job: start-up, model build, resume, final save
    "node": {"gpus": 8, "cpus": 112, "mem_mb": 1_000_000, "gpu_mem_gb": 80},
}

#: Each evaluation stage of a GPU experiment: 1 GPU, its runtime in minutes.
STAGE_RUNTIME_MIN = {"eval_ppl": 240, "downstream": 600, "proofpile": 240, "ruler": 1440,
                     "decode_pair": 120, "yarn_finetune": 1440}


def cluster_settings(exp: Experiment) -> dict[str, Any]:
    """CLUSTER_DEFAULTS overridden by the experiment's `cluster:` section."""
    raw = exp.raw.get("cluster", {}) or {}
    return {**CLUSTER_DEFAULTS, **raw, "node": {**CLUSTER_DEFAULTS["node"], **raw.get("node", {})}}


def run_resources(exp: Experiment, run: dict[str, Any]) -> dict[str, Any]:
    """The experiment's `resources` overridden by the run's scale."""
    return {**exp.raw.get("resources", {}), **exp.raw["scales"][run["scale"]].get("resources", {})}


def _sustained_flops(res: dict[str, Any]) -> float:
    """FLOP/s one GPU sustains: its dense bf16 peak (default H100/H200) x the assumed MFU."""
    return float(res.get("gpu_peak_tflops", 989)) * 1e12 * float(res.get("assumed_mfu", 0.4))


@dataclass(frozen=True)
class JobShape:
    """One SLURM job: N nodes x G GPUs, one task (process) per GPU, CPUs and memory per node.

    `resources()` is what snakemake-executor-plugin-slurm turns into the sbatch request:
    `--nodes=N --gres=gpu:G --ntasks-per-node=G --cpus-per-task=C --mem=M -t T`, plus
    `--signal=USR1@LEAD` for jobs whose ranks run in their own step. Several processes use the
    `mpi` resource, so the executor runs the job without a step of its own and `shapelm
    launch` starts the only one (`srun`): a step inside a step would wait for the resources the
    outer one holds.
    """

    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_mb: int = 4000  # per node
    runtime_min: int = 60
    signal_lead_s: int = 0

    @property
    def tasks_per_node(self) -> int:
        return max(1, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    def resources(self) -> dict[str, Any]:
        res: dict[str, Any] = {"nodes": self.nodes, "runtime": self.runtime_min,
                               "mem_mb": self.mem_mb, "cpus_per_task": self.cpus_per_task}
        if self.gpus_per_node:
            res["gres"] = f"gpu:{self.gpus_per_node}"
        if self.world_size > 1:
            res["mpi"] = "srun"
            res["tasks_per_node"] = self.tasks_per_node
            if self.signal_lead_s:
                res["slurm_extra"] = f"--signal=USR1@{self.signal_lead_s}"
        return res

    def launch(self) -> str:
        """The prefix of the job's `shapelm` command."""
        if self.world_size == 1:
            return "shapelm"
        return (f"shapelm launch --nodes {self.nodes} --procs-per-node {self.tasks_per_node} "
                f"--cpus-per-task {self.cpus_per_task} --")


@dataclass(frozen=True)
class TrainPlan:
    """A run's training as a chain of jobs: segment k trains up to `until_steps[k]`."""

    job: JobShape
    until_steps: tuple[int, ...]
    estimated_min: float  # the whole run, at the assumed MFU (0: a CPU run's runtime_min)

    @property
    def segments(self) -> int:
        return len(self.until_steps)


def _job_shape(exp: Experiment, res: dict[str, Any], runtime_min: int, *, lead: bool) -> JobShape:
    cluster = cluster_settings(exp)
    node = cluster["node"]
    gpus = int(res.get("gpus", 0))
    if gpus:
        cpus = int(res.get("cpus_per_gpu", min(8, max(1, int(node["cpus"]) // max(1, int(node["gpus"]))))))
        mem = int(res.get("mem_mb", min(64_000 * gpus, int(node["mem_mb"]))))
    else:
        cpus, mem = int(res.get("cpus", 1)), int(res.get("mem_mb", 4_000))
    runtime_min = max(1, int(runtime_min))
    # The warning must come after start-up: at most a quarter of the job before its end.
    lead_s = min(int(cluster["signal_lead_s"]), runtime_min * 15) if lead else 0
    return JobShape(nodes=int(res.get("nodes", 1)), gpus_per_node=gpus, cpus_per_task=cpus,
                    mem_mb=mem, runtime_min=runtime_min, signal_lead_s=lead_s)


def train_plan(exp: Experiment, run_name: str) -> TrainPlan:
    """Size a run's training jobs from the FLOP accounting and split it at the partition limit.

    Estimated time = total FLOPs / (GPUs x peak x assumed MFU). Each job also pays
    `startup_min` and keeps `signal_lead_s` for the final checkpoint, so one job holds
    max_runtime_min - startup - lead of training; a longer run becomes that many segments of
    equal steps (or `resources.segments` of them), each requesting its share x 1.25 (margin for
    a slower MFU) plus start-up, never more than the limit (`resources.runtime_min` sets the
    request per job instead). A segment that still runs short of time checkpoints before the
    limit and is resubmitted. CPU runs (gpus 0) take runtime_min (default 60).
    """
    run = exp.run(run_name)
    res = run_resources(exp, run)
    cluster = cluster_settings(exp)
    limit = int(cluster["max_runtime_min"])
    overhead = float(cluster["startup_min"]) + float(cluster["signal_lead_s"]) / 60
    recipe = run_recipe(run)
    gpus, nodes = int(res.get("gpus", 0)), int(res.get("nodes", 1))
    if gpus:
        estimated = total_train_flops(run) / (gpus * nodes * _sustained_flops(res)) / 60
        per_job = max(1.0, limit - overhead)
        n = max(1, math.ceil(estimated * 1.25 / per_job))
    else:
        estimated = 0.0
        n = 1
    n = int(res.get("segments", n))
    n = max(1, min(n, recipe.total_steps))
    if "runtime_min" in res or not gpus:  # an explicit request per job
        runtime = min(limit, int(res.get("runtime_min", 60)))
    else:
        runtime = min(limit, max(10, math.ceil(estimated * 1.25 / n + overhead)))
    steps = recipe.total_steps
    until = tuple(math.ceil(steps * (k + 1) / n) for k in range(n))
    return TrainPlan(_job_shape(exp, res, runtime, lead=True), until, estimated)


def resources_for(exp: Experiment, run_name: str) -> dict[str, Any]:
    """A run's training job (each segment's): see `train_plan`."""
    plan = train_plan(exp, run_name)
    job = plan.job
    return {"gpus_per_node": job.gpus_per_node, "nodes": job.nodes, "runtime": job.runtime_min,
            "mem_mb": job.mem_mb, "cpus_per_task": job.cpus_per_task, "segments": plan.segments}


def eval_host_mem_mb(run: dict[str, Any]) -> int:
    """Host memory to load a checkpoint and evaluate: fp32 weights twice (the safetensors
    file mapped while the module is filled) plus 8 GB of interpreter, tokenizer and data."""
    from shapelm.shapes.accounting import param_counts

    params = param_counts(run_model_config(run)).total
    return math.ceil(2 * 4 * params / 1e6) + 8_000


def stage_job(exp: Experiment, run_name: str | None, stage: str) -> dict[str, Any]:
    """Resources and launch prefix of an evaluation-side job of a run (or of the experiment).

    GPU experiments: one GPU (yarn_finetune: the sharded job of `longctx.resources`, default
    the run's pretraining shape), host memory from the model size. CPU experiments: the
    experiment's CPU job size.
    """
    runtime = STAGE_RUNTIME_MIN.get(stage, 120)
    base = dict(exp.raw.get("resources", {}))
    run = exp.run(run_name) if run_name else None
    if run is not None:
        base = run_resources(exp, run)
    limit = int(cluster_settings(exp)["max_runtime_min"])
    if not int(base.get("gpus", 0)):
        job = _job_shape(exp, base, min(limit, int(base.get("runtime_min", 60))), lead=False)
        return {"resources": job.resources(), "launch": job.launch(), "signal_lead_s": 0}
    if stage == "yarn_finetune":
        lc = {**base, **(exp.raw.get("longctx", {}) or {}).get("resources", {})}
        runtime = int(lc.get("runtime_min", runtime))
        job = _job_shape(exp, {k: v for k, v in lc.items() if k != "runtime_min"},
                         min(limit, runtime), lead=True)
    else:
        one = {"gpus": 1, "nodes": 1, "cpus_per_gpu": base.get("cpus_per_gpu", 8)}
        if run is not None:
            one["mem_mb"] = max(32_000, eval_host_mem_mb(run))
        job = _job_shape(exp, one, min(limit, runtime), lead=False)
    return {"resources": job.resources(), "launch": job.launch(), "signal_lead_s": job.signal_lead_s}
