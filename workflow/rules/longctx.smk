# Long context: YaRN extension (s = 16, 400 steps at paper scale), Proof-pile PPL and RULER.
# Settings and their defaults come from shapelm.longctx.plan (longctx_settings; check_longctx
# reports missing inputs and impossible lengths at plan time). Inputs are local paths or
# hf:OWNER/NAME[/DIR] dataset repos in the local HF cache (docs/LONG_CONTEXT.md "Inputs");
# without them the tiny default substitutes its own corpus.
import shlex

from shapelm.longctx import plan as lcplan

LC = lcplan.longctx_settings(EXP)
LC_LENGTHS = ",".join(str(x) for x in LC["lengths"])
LC_TASKS = ",".join(LC["ruler_tasks"])
LC_RUN = {run: lcplan.run_lengths(EXP, run) for run in RUNS}
# The finetune job: `longctx.resources` (default the run's pretraining shape), one process per
# GPU started by `shapelm launch` (srun), FSDP across them.
LC_JOBS = {run: jobs.stage_job(EXP, run, "yarn_finetune") for run in RUNS}
_LC_KEYS = {"gres": "", "mpi": "", "tasks_per_node": 0, "slurm_extra": ""}
LC_TOKENIZER_INPUT = [TOKENIZER] if DEFAULT_SOURCE else []
_VAL = f"{WORK}/data/corpus/val"
LC_PROOFPILE = LC.get("proofpile") or (f"{_VAL}/default_sci" if DEFAULT_SOURCE else "")


def fetched_longctx(*keys):
    """The fetch records of the configured long-context inputs `keys`, and the tokenizer's."""
    from shapelm.longctx.inputs import INPUT_SPLITS

    specs = [(k, LC.get(k)) for k in keys]
    inputs = [
        planned_inputs.longctx_input(k, str(v), INPUT_SPLITS.get(k), "")
        for k, v in specs
        if v
    ]
    return fetched(*inputs) + fetched_tokenizer(TOKENIZER)


def _lc_resource(key):
    return lambda w: LC_JOBS[w.run]["resources"].get(key, _LC_KEYS.get(key))


def _lc_stop_margin(run):
    """Seconds kept for the last checkpoint: the job's --signal=USR1@LEAD lead, as training's."""
    return LC_JOBS[run]["signal_lead_s"] or 60


def _ruler_sources():
    """--essays/--squad/--hotpotqa/--words/--word-lists as configured; the default corpus for missing ones."""
    args = [
        a
        for key in ("essays", "squad", "hotpotqa", "words")
        for a in option(f"--{key}", LC.get(key))
    ]
    # --word-lists only where not the built-in lists: the default's command line as it was
    if LC["ruler_word_lists"] != "builtin":
        args += ["--word-lists", LC["ruler_word_lists"]]
    if DEFAULT_SOURCE and not LC.get("essays"):
        args += ["--essays", f"{_VAL}/default_wiki"]
    if DEFAULT_SOURCE and not (LC.get("squad") and LC.get("hotpotqa")):
        args += ["--qa-text", f"{_VAL}/default_web"]
    return args


def _pg19_segments(run):
    return f"{WORK}/data/yarn_pg19/seq{LC_RUN[run]['seq_len']}/manifest.json"


def finetune_data(run):
    """PG19 cut into the run's segments, or (no `longctx.pg19`: the tiny default) its training data."""
    return _pg19_segments(run) if LC.get("pg19") else train_data(run)


if LC.get("pg19"):

    rule yarn_data:
        """PG19's train split tokenized with the model's tokenizer and cut into {seq_len}-token
        segments, once per experiment: the steps x batch segments the finetune visits.
        """
        input:
            tokenizer=LC_TOKENIZER_INPUT,
            fetched=fetched_longctx("pg19"),
        output:
            f"{WORK}/data/yarn_pg19/seq{{seq_len}}/manifest.json",
        log:
            f"{LOGS}/data/yarn_pg19_seq{{seq_len}}.log",
        benchmark:
            f"{BENCHMARKS}/data/yarn_pg19_seq{{seq_len}}.tsv"
        wildcard_constraints:
            seq_len=r"\d+",
        threads: 8
        resources:
            cpus_per_task=8,  # encode_batch tokenizes on every CPU of the job
            mem_mb=16000,
            runtime=240,
        params:
            source=str(LC["pg19"]),
            tokenizer=tokenizer_of_job,
            max_segments=int(LC["finetune_steps"]) * int(LC["finetune_batch"]),
        shell:
            "shapelm longctx prepare --source {params.source:q} --tokenizer {params.tokenizer:q} "
            "--seq-len {wildcards.seq_len:q} --max-segments {params.max_segments:q} "
            '--out "$(dirname {output:q})" > {log:q} 2>&1'


rule yarn_finetune:
    """YaRN finetune, sharded over its job's GPUs; resumes from RUN/yarn/checkpoints (not a
    declared output) and checkpoints before the job's time limit (exit 138: resubmitted).
    """
    input:
        model=lambda w: model_file(w.run),
        data=lambda w: finetune_data(w.run),
    output:
        f"{RUN_DIR}/yarn/final/model.safetensors",
    log:
        f"{LOGS}/runs/{{run}}/yarn_finetune.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/yarn_finetune.tsv"
    # Preempted or out of time: it checkpointed, and the resubmitted job resumes.
    retries: RESUMABLE_RETRIES
    threads: 1
    resources:
        runtime=_lc_resource("runtime"),
        mem_mb=_lc_resource("mem_mb"),
        cpus_per_task=_lc_resource("cpus_per_task"),
        nodes=_lc_resource("nodes"),
        gres=_lc_resource("gres"),
        mpi=_lc_resource("mpi"),
        tasks_per_node=_lc_resource("tasks_per_node"),
        slurm_extra=_lc_resource("slurm_extra"),
    params:
        launch=lambda w: shlex.split(LC_JOBS[w.run]["launch"]),
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        out=lambda w: f"{run_dir(w.run)}/yarn",
        factor=LC["factor"],
        original=lambda w: LC_RUN[w.run]["original"],
        seq_len=lambda w: LC_RUN[w.run]["seq_len"],
        steps=LC["finetune_steps"],
        batch=LC["finetune_batch"],
        micro_batch=LC["micro_batch"],
        checkpoint_every=LC["checkpoint_every"],
        margin=lambda w: _lc_stop_margin(w.run),
    shell:
        "{params.launch:q} longctx finetune --model {params.model_dir:q} "
        '--data "$(dirname {input.data:q})" --out {params.out:q} --factor {params.factor:q} '
        "--original {params.original:q} --seq-len {params.seq_len:q} --steps {params.steps:q} "
        "--batch {params.batch:q} --micro-batch {params.micro_batch:q} "
        "--checkpoint-every {params.checkpoint_every:q} --time-limit {resources.runtime:q} "
        "--stop-margin {params.margin:q} > {log:q} 2>&1"


rule proofpile:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
        tokenizer=LC_TOKENIZER_INPUT,
        fetched=fetched_longctx("proofpile"),
    output:
        f"{RUN_RESULTS}/proofpile.json",
    log:
        f"{LOGS}/runs/{{run}}/proofpile.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/proofpile.tsv"
    resources:
        **stage_resources("proofpile"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
        docs=str(LC_PROOFPILE),
        min_tokens=LC["proofpile_min_tokens"],
        num_docs=LC["proofpile_num_docs"],
        tokenizer=option("--tokenizer", TOKENIZER),
        lengths=LC_LENGTHS,
    shell:
        "shapelm longctx proofpile --model {params.model_dir:q} --run {wildcards.run:q} "
        "--docs {params.docs:q} --split test {params.tokenizer:q} --lengths {params.lengths:q} "
        "--min-tokens {params.min_tokens:q} --num-docs {params.num_docs:q} --out {output:q} "
        "> {log:q} 2>&1"


rule ruler_data:
    """RULER's tasks at each length, generated offline (seed 42) with the model's tokenizer."""
    input:
        tokenizer=LC_TOKENIZER_INPUT,
        fetched=fetched_longctx("essays", "squad", "hotpotqa", "words"),
    output:
        directory(f"{WORK}/data/ruler"),
    log:
        f"{LOGS}/data/ruler_data.log",
    params:
        samples=LC["ruler_samples"],
        sources=_ruler_sources(),
        tokenizer=tokenizer_of_job,
        lengths=LC_LENGTHS,
        tasks=LC_TASKS,
    shell:
        "shapelm longctx ruler-generate --tokenizer {params.tokenizer:q} "
        "--lengths {params.lengths:q} --tasks {params.tasks:q} --samples {params.samples:q} "
        "{params.sources:q} --out {output:q} > {log:q} 2>&1"


rule ruler:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
        data=f"{WORK}/data/ruler",
        fetched=fetched_tokenizer(TOKENIZER),
    output:
        f"{RUN_RESULTS}/ruler.json",
    log:
        f"{LOGS}/runs/{{run}}/ruler.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/ruler.tsv"
    resources:
        **stage_resources("ruler"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
        tokenizer=TOKENIZER,
    shell:
        "shapelm longctx ruler --model {params.model_dir:q} --tokenizer {params.tokenizer:q} "
        "--data {input.data:q} --out {output:q} > {log:q} 2>&1"
