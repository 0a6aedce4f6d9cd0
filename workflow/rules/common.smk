# Config validation (JSON schema + every run's shape) happens here, before any job runs.
import json
import os
import sys

from snakemake.utils import min_version

from shapelm import workflow as wf
from shapelm.checks import workflow_experiment
from shapelm.config import config_hash

min_version("9.0")

# Rules call the `shapelm` and `python` of the environment running Snakemake, activated or not.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

# The config files read again strictly (duplicate keys, YTE templates), validated and resolved
# (a `rehearsal:` config at CPU size); then everything a job would find out too late: data vs
# model vocabulary, inputs, cluster requests, checked where the workflow is planned (the jobs it
# submits re-read the Snakefile). A bad config ends here with one message, no traceback.
EXP = workflow_experiment(config, workflow.configfiles,
                          check=not (workflow.remote_exec or workflow.subprocess_exec))
E = EXP.name
RUNS = list(EXP.runs)
WORK = wf.work_dir(E)
RESULTS = wf.results_dir(E)
FIGURES = wf.figures_dir(E)
LOGS = f"logs/{E}"
DATA = EXP.section("data")
EVAL = EXP.section("eval")
LONGCTX = EXP.section("longctx")
DECODE = EXP.section("decode")
DEFAULT_SOURCE = DATA.get("source", "default") == "default"
VAL_SETS = DATA.get("validation_sets", [])
LONGCTX_RUNS = [r for r in RUNS if EXP.run(r)["longctx"]]
DECODE_RUNS = [r for r in RUNS if EXP.raw["runs"][r].get("decode", False)]

wildcard_constraints:
    run="|".join(RUNS) or "NONE",


def run_dir(run):
    return f"{WORK}/runs/{run}"


def model_file(run):
    return f"{run_dir(run)}/final/model.safetensors"


def stage_resources(stage, run_of=lambda w: w.run):
    """SLURM resources of an evaluation-side job (shapelm.workflow.stage_job) of the run
    `run_of(wildcards)` names."""
    keys = ("runtime", "mem_mb", "cpus_per_task", "nodes", "gres")
    jobs = {r: wf.stage_job(EXP, r, stage)["resources"] for r in RUNS}
    return {k: (lambda w, k=k: jobs[run_of(w)].get(k, "")) for k in keys}


rule experiment_config:
    """The merged experiment config, for commands that need the whole experiment."""
    localrule: True
    output:
        f"{WORK}/experiment.json",
    params:
        digest=config_hash(EXP.raw),
    log:
        f"{LOGS}/experiment_config.log",
    run:
        from shapelm.config import write_json_atomic

        write_json_atomic(output[0], EXP.raw)
        with open(log[0], "w") as fh:
            fh.write(f"experiment {E}: {len(RUNS)} runs, config digest {params.digest}\n")
