# Pretraining. Checkpoints live in RUN/checkpoints, outside the declared outputs: Snakemake
# deletes the outputs of a job it reruns, so after a preemption the rerun resumes from them.
# A run longer than the partition's time limit is a chain of segments (shapelm.plan.jobs.
# train_plan): `train_segment` jobs train up to a step and leave a marker, `train` finishes.

import shlex

TRAIN_PLANS = {run: jobs.train_plan(EXP, run) for run in RUNS}
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


def eval_inputs(run):
    """The held-out sets a run scores during training (train.eval_every), as manifests."""
    return val_data(run) if EXP.run(run)["train"].get("eval_every") else []


# The train jobs depend on weights_config.json (what decides the weights) and only by name
# (ancient) on run_config.json (what the trainer reads: also how often it evaluates, logs and
# checkpoints, and the held-out sets it scores). So a change of an evaluation, logging or
# checkpointing setting or of the validation sets rewrites run_config.json and reruns no
# training (and so deletes no trained model); a change that alters the weights rewrites both.
def train_config(run):
    return jobs.training_config(
        EXP, run, [os.path.dirname(p) for p in eval_inputs(run)]
    )


rule run_config:
    """What one run's trainer reads (recipe inherited from its scale, held-out sets)."""
    input:
        val=lambda w: eval_inputs(w.run),
    output:
        f"{RUN_DIR}/run_config.json",
    log:
        f"{LOGS}/runs/{{run}}/run_config.log",
    localrule: True
    params:
        config=lambda w: train_config(w.run),
    run:
        files.write_json(output[0], params.config, **files.RUN_FILE)
        Path(log[0]).write_text(f"training config hash {params.config['hash']}\n")


rule weights_config:
    """The part of a run's training config that decides its weights; a change retrains."""
    output:
        f"{RUN_DIR}/weights_config.json",
    log:
        f"{LOGS}/runs/{{run}}/weights_config.log",
    localrule: True
    params:
        config=lambda w: jobs.weights_config(EXP, w.run),
    run:
        files.write_json(output[0], params.config, **files.RUN_FILE)
        Path(log[0]).write_text(f"weights config hash {params.config['hash']}\n")


# One thread count per process, from the job's shape (cpus_per_task), wherever the job runs:
# float32 CPU reductions depend on it, so a resumed or rerun training matches bitwise only at
# the same count (docs/TRAINING.md). An explicit SHAPELM_THREADS in the environment wins.
# A refused start (exit 2: a recipe that differs from the checkpoints', a run locked by another
# trainer, bad data) is not retried: the retry exits at once (jobs.not_retried_when_refused).
# Each attempt logs to a file of its own ({log}.attempts/), {log} a symlink to the latest: a job
# refused because another holds the run never overwrites the running trainer's log.
TRAIN_SHELL = jobs.not_retried_when_refused(
    jobs.logged_per_attempt(
        "export SHAPELM_THREADS=${{SHAPELM_THREADS:-{resources.cpus_per_task:q}}}; "
        "export OMP_NUM_THREADS=$SHAPELM_THREADS; "
        "{params.launch:q} train {input.config:q} --out {params.out:q} "
        '--data "$(dirname {input.data:q})" {params.until:q} '
        "--time-limit {resources.runtime:q} "
        "--stop-margin {params.margin:q} --state-out {params.state:q} --no-progress",
        "{log:q}",
    ),
    "{params.out:q}/.refused",
    "{log:q}",
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
        config=ancient(f"{RUN_DIR}/run_config.json"),
        weights=f"{RUN_DIR}/weights_config.json",
        data=lambda w: train_data(w.run),
        previous=lambda w: previous_segment(w.run, w.step),
    output:
        f"{RUN_DIR}/segments/step-{{step}}.json",
    log:
        f"{LOGS}/runs/{{run}}/train-step-{{step}}.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/train-step-{{step}}.tsv"
    wildcard_constraints:
        step=r"\d+",
    # A preempted or timed-out segment resumes from its last checkpoint when resubmitted.
    retries: RESUMABLE_RETRIES
    threads: 1
    resources:
        **TRAIN_RESOURCES_OF_RULE,
    params:
        out=lambda w: run_dir(w.run),
        launch=lambda w: shlex.split(TRAIN_PLANS[w.run].job.launch()),
        until=lambda w: ["--max-steps", w.step],
        margin=lambda w: TRAIN_PLANS[w.run].job.signal_lead_s or 60,
        # also a params record: a weights change retrains even if weights_config.json is missing
        weights=lambda w: jobs.weights_config(EXP, w.run)["hash"],
        state=lambda w: segment_marker(w.run, w.step),
    shell:
        TRAIN_SHELL


rule train:
    input:
        config=ancient(f"{RUN_DIR}/run_config.json"),
        weights=f"{RUN_DIR}/weights_config.json",
        data=lambda w: train_data(w.run),
        previous=lambda w: previous_segment(w.run),
    output:
        model=f"{RUN_DIR}/final/model.safetensors",
    log:
        f"{LOGS}/runs/{{run}}/train.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/train.tsv"
    retries: RESUMABLE_RETRIES
    threads: 1
    resources:
        **TRAIN_RESOURCES_OF_RULE,
    params:
        out=lambda w: run_dir(w.run),
        launch=lambda w: shlex.split(TRAIN_PLANS[w.run].job.launch()),
        until=[],
        margin=lambda w: TRAIN_PLANS[w.run].job.signal_lead_s or 60,
        # also a params record: a weights change retrains even if weights_config.json is missing
        weights=lambda w: jobs.weights_config(EXP, w.run)["hash"],
        state=lambda w: f"{run_dir(w.run)}/final/train_result.json",
    shell:
        TRAIN_SHELL
