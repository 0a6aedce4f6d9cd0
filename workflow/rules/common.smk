# Config validation (JSON schema + every run's shape) happens here, before any job runs.
import json
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from shapelm.plan import decode as decode_plan
from shapelm.plan import jobs
from shapelm.plan import paths
from shapelm.plan.build import plan_of, write_plan
from shapelm.plan.document import PLAN_VERSION
from shapelm.plan.checks import workflow_experiment
from shapelm import files
from shapelm.config import config_hash
from shapelm.evaluation.standins import standin_path, standin_tasks
from shapelm.evaluation.tasks import expand_task_names
from shapelm.commands.yte_guard import workflow_check

min_version("9.0")


envvars:
    "PATH",


# Rules call the `shapelm` and `python` of the environment running Snakemake, activated or not.
os.environ["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
)

# The config files read again strictly (duplicate keys, YTE templates), validated and resolved
# (a `rehearsal:` config at CPU size); then everything a job would find out too late: data vs
# model vocabulary, inputs, cluster requests, checked where the workflow is planned (the jobs it
# submits re-read the Snakefile). A bad config ends here with one message, no traceback.
# Snakemake has read the config files before this runs: through shapelm's strict loader (no
# YTE template evaluated) where the environment has the guard, which it must have.
workflow_check()
EXP = workflow_experiment(
    config,
    workflow.configfiles,
    check=not (workflow.remote_exec or workflow.subprocess_exec),
)
# A rehearsal's up to 32 "GPUs" share this machine's cores: one training thread each.
if config.get("rehearsal"):
    os.environ.setdefault("SHAPELM_THREADS", "1")
E = EXP.name
jobs.workflow_run_id()  # before any job starts: the jobs inherit it (not_retried_when_refused)
RUNS = list(EXP.runs)
# What the tables and figures read (shapelm.plan.document), built once here; the experiment_plan
# rule writes the same document to work/EXP/plan.json for `shapelm results build`.
PLAN = plan_of(EXP)
WORK = paths.work_dir(E)
RESULTS = paths.results_dir(E)
FIGURES = paths.figures_dir(E)
LOGS = paths.logs_dir(E)
# Wall time and memory of each heavy job (Snakemake's `benchmark:` TSVs), to calibrate `shapelm cost`.
BENCHMARKS = paths.benchmarks_dir(E)
# Jobs that checkpoint and resume (training, its segments, the YaRN finetune) are resubmitted
# after a preemption or a time limit; nothing else is retried (a bad config fails once).
RESUMABLE_RETRIES = 2
DATA = EXP.section("data")
EVAL = EXP.section("eval")
LONGCTX = EXP.section("longctx")
DECODE = EXP.section("decode")
DEFAULT_SOURCE = DATA.get("source", "default") == "default"
VAL_SETS = DATA.get("validation_sets", [])
LONGCTX_RUNS = [r for r in RUNS if EXP.run(r)["longctx"]]
# A run's later seeds (`seeds:`) are not in raw["runs"]: the first seed alone is decoded.
DECODE_RUNS = [r for r in RUNS if EXP.raw["runs"].get(r, {}).get("decode", False)]


wildcard_constraints:
    run="|".join(RUNS) or "NONE",


def option(flag, value):
    """[flag, value] for a `{params.x:q}` in a shell command (each word quoted: a config value
    stays one argument), or nothing when the value is unset."""
    return [flag, str(value)] if value else []


def run_dir(run):
    return paths.run_dir(E, run)


def run_results(run):
    return paths.run_results_dir(E, run)


# The same folders with the `run` wildcard in place of a name, for rules' inputs and outputs.
RUN_DIR = run_dir("{run}")
RUN_RESULTS = run_results("{run}")


def model_file(run):
    return f"{run_dir(run)}/final/model.safetensors"


def stage_resources(stage, run_of=lambda w: w.run):
    """SLURM resources of an evaluation-side job (shapelm.plan.jobs.stage_job) of the run
    `run_of(wildcards)` names."""
    keys = ("runtime", "mem_mb", "cpus_per_task", "nodes", "gres")
    by_run = {r: jobs.stage_job(EXP, r, stage)["resources"] for r in RUNS}
    return {k: (lambda w, k=k: by_run[run_of(w)].get(k, "")) for k in keys}


rule experiment_config:
    """The merged experiment config, for commands that need the whole experiment."""
    output:
        f"{WORK}/experiment.json",
    log:
        f"{LOGS}/experiment_config.log",
    localrule: True
    params:
        digest=config_hash(EXP.raw),
        summary=f"experiment {E}: {len(RUNS)} runs, config digest {config_hash(EXP.raw)}\n",
    run:
        files.write_json(output[0], EXP.raw, **files.RUN_FILE)
        Path(log[0]).write_text(params.summary)


rule experiment_plan:
    """The plan document (shapelm.plan.document) the tables and figures read; rewritten when
    the config or the document's version changes."""
    output:
        f"{WORK}/plan.json",
    log:
        f"{LOGS}/experiment_plan.log",
    localrule: True
    params:
        digest=config_hash(EXP.raw),
        version=PLAN_VERSION,
        summary=f"plan of {E}: {len(RUNS)} runs, version {PLAN_VERSION}\n",
    run:
        write_plan(EXP, output[0])
        Path(log[0]).write_text(params.summary)
