# Pretraining. Checkpoints live in RUN/checkpoints, outside the declared outputs: Snakemake
# deletes the outputs of a job it reruns, so after a preemption the rerun resumes from them.
# A run longer than the partition's time limit is a chain of segments (shapelm.workflow.
# train_plan): `train_segment` jobs train up to a step and leave a marker, `train` finishes.

TRAIN_PLANS = {run: wf.train_plan(EXP, run) for run in RUNS}
TRAIN_RESOURCES = {run: plan.job.resources() for run, plan in TRAIN_PLANS.items()}
# The same keys on every job (a key's presence matters: `mpi` tells the executor not to wrap
# the job in a step of its own); empty values are not passed to sbatch.
_TRAIN_KEYS = {"gres": "", "mpi": "", "tasks_per_node": 0, "slurm_extra": ""}


def _train_resource(key):
    return lambda w: TRAIN_RESOURCES[w.run].get(key, _TRAIN_KEYS.get(key))


def segment_marker(run, step):
    return f"{run_dir(run)}/segments/step-{step}.json"


def previous_segment(run, step=None):
    """The marker of the segment before the one ending at `step` (None: the final one)."""
    until = TRAIN_PLANS[run].until_steps
    k = len(until) - 1 if step is None else until.index(int(step))
    return [segment_marker(run, until[k - 1])] if k > 0 else []


rule run_config:
    """One run's resolved config (recipe inherited from its scale); a changed run reruns."""
    localrule: True
    output:
        f"{WORK}/runs/{{run}}/run_config.json",
    params:
        digest=lambda w: EXP.run(w.run)["hash"],
    log:
        f"{LOGS}/runs/{{run}}/run_config.log",
    run:
        from shapelm.config import write_json_atomic

        write_json_atomic(output[0], EXP.run(wildcards.run))
        with open(log[0], "w") as fh:
            fh.write(f"{wildcards.run}: config hash {params.digest}\n")


TRAIN_SHELL = (
    "{params.launch} train {input.config} --out {params.out} --data $(dirname {input.data}) "
    "{params.until} --time-limit {resources.runtime} --stop-margin {params.margin} "
    "--state-out {params.state} --no-progress > {log} 2>&1"
)
TRAIN_RESOURCES_OF_RULE = dict(
    runtime=_train_resource("runtime"),
    mem_mb=_train_resource("mem_mb"),
    cpus_per_task=_train_resource("cpus_per_task"),
    nodes=_train_resource("nodes"),
    gres=_train_resource("gres"),
    mpi=_train_resource("mpi"),
    tasks_per_node=_train_resource("tasks_per_node"),
    slurm_extra=_train_resource("slurm_extra"),
)


rule train_segment:
    """Train up to step {step} of a run that does not fit one job (checkpoint, marker)."""
    input:
        config=f"{WORK}/runs/{{run}}/run_config.json",
        data=lambda w: train_data(w.run),
        previous=lambda w: previous_segment(w.run, w.step),
    output:
        f"{WORK}/runs/{{run}}/segments/step-{{step}}.json",
    wildcard_constraints:
        step=r"\d+",
    params:
        out=lambda w: run_dir(w.run),
        launch=lambda w: TRAIN_PLANS[w.run].job.launch(),
        until=lambda w: f"--max-steps {w.step}",
        margin=lambda w: TRAIN_PLANS[w.run].job.signal_lead_s or 60,
        state=lambda w: segment_marker(w.run, w.step),
    log:
        f"{LOGS}/runs/{{run}}/train-step-{{step}}.log",
    threads: 1
    resources:
        **TRAIN_RESOURCES_OF_RULE,
    shell:
        TRAIN_SHELL


rule train:
    input:
        config=f"{WORK}/runs/{{run}}/run_config.json",
        data=lambda w: train_data(w.run),
        previous=lambda w: previous_segment(w.run),
    output:
        model=f"{WORK}/runs/{{run}}/final/model.safetensors",
    params:
        out=lambda w: run_dir(w.run),
        launch=lambda w: TRAIN_PLANS[w.run].job.launch(),
        until="",
        margin=lambda w: TRAIN_PLANS[w.run].job.signal_lead_s or 60,
        state=lambda w: f"{run_dir(w.run)}/final/train_result.json",
    log:
        f"{LOGS}/runs/{{run}}/train.log",
    threads: 1
    resources:
        **TRAIN_RESOURCES_OF_RULE,
    shell:
        TRAIN_SHELL
