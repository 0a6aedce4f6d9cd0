# Held-out perplexity and downstream tasks through lm-eval; each run's provenance beside them.


rule provenance:
    """What the run's numbers came from (code, data, initial weights, numerics): compared by
    `shapelm results compare`."""
    input:
        model=lambda w: model_file(w.run),
    output:
        f"{RUN_RESULTS}/provenance.json",
    log:
        f"{LOGS}/runs/{{run}}/provenance.log",
    localrule: True
    params:
        run_dir=lambda w: run_dir(w.run),
    shell:
        "shapelm results provenance {params.run_dir:q} --out {output:q} > {log:q} 2>&1"


rule eval_ppl:
    input:
        model=lambda w: model_file(w.run),
        val=lambda w: val_data(w.run),
    output:
        f"{RUN_RESULTS}/ppl.json",
    log:
        f"{LOGS}/runs/{{run}}/eval_ppl.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/eval_ppl.tsv"
    resources:
        **stage_resources("eval_ppl"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        val_dirs=lambda w, input: [os.path.dirname(p) for p in input.val],
        seq_len=lambda w: EXP.run(w.run)["eval"]["ppl_seq_len"],  # per run: plan.runs.ppl_seq_len
        max_instances=option("--max-instances", EVAL.get("ppl_max_instances")),
        batch=EVAL.get("batch_size", 8),
    shell:
        "shapelm eval ppl --model {params.model_dir:q} --data {params.val_dirs:q} "
        "--seq-len {params.seq_len:q} {params.max_instances:q} --batch-size {params.batch:q} "
        "--no-progress --out {output:q} > {log:q} 2>&1"


# The held-out tasks (same lm-eval formats as the real ones, built from validation text): the
# tiny default's tasks, and the rehearsal's, whose runs cannot reach the hub's datasets; and
# `eval.standin_tasks`: the papers' tasks on data cut from the same text (docs/EVALUATION.md).
HELDOUT = any("heldout" in EXP.run(r)["eval"].get("tasks", []) for r in RUNS)


def standins_of(run):
    """The tasks `run` evaluates on stand-in data: those of its eval.standin_tasks it runs."""
    ev = EXP.run(run)["eval"]
    runs = expand_task_names(ev.get("tasks", ["olmo"]))
    return [t for t in standin_tasks(ev.get("standin_tasks", [])) if t in runs]


STANDINS = sorted({t for r in RUNS for t in standins_of(r)})
if HELDOUT or STANDINS:
    TASK_DIR = f"{WORK}/data/tasks"

    rule make_tasks:
        """Small lm-eval tasks generated from held-out text, same formats as the real ones."""
        input:
            val=val_data(None),  # the experiment's validation text, in the source's tokens
            tokenizer=[TOKENIZER] if DEFAULT_SOURCE else [],
            fetched=fetched_tokenizer(TOKENIZER),
        output:
            f"{TASK_DIR}/task_data.json",
        log:
            f"{LOGS}/data/make_tasks.log",
        params:
            val_dirs=lambda w, input: [os.path.dirname(p) for p in input.val],
            tokenizer=tokenizer_of_job,
            n=EVAL.get("heldout_examples", 200),
            out=lambda w, output: os.path.dirname(output[0]),
            standins=["--standins", *STANDINS] if STANDINS else [],
        shell:
            "shapelm eval make-tasks --text {params.val_dirs:q} --tokenizer {params.tokenizer:q} "
            "--n-mc {params.n:q} --n-ce {params.n:q} {params.standins:q} --out {params.out:q} "
            "> {log:q} 2>&1"


# `--task-data` takes its values after one flag (nargs="*"): the held-out tasks' files, the
# stand-ins this run names, then eval.task_data's files (they win for the same task).
TASK_INPUTS = [f"{TASK_DIR}/task_data.json"] if HELDOUT or STANDINS else []


def task_data_args(run):
    data = TASK_INPUTS + [f"{t}={standin_path(TASK_DIR, t)}" for t in standins_of(run)]
    data += [f"{k}={v}" for k, v in EXP.run(run)["eval"].get("task_data", {}).items()]
    return ["--task-data", *data] if data else []


rule downstream:
    input:
        model=lambda w: model_file(w.run),
        tasks=TASK_INPUTS,
        fetched=lambda w: fetched_tokenizer(tokenizer_for(w.run))
        + fetched(
            *(
                planned_inputs.task_input(t, "")
                for t in planned_inputs.hub_tasks(EXP, w.run)
            )
        ),
    output:
        f"{RUN_RESULTS}/downstream.json",
    log:
        f"{LOGS}/runs/{{run}}/downstream.log",
    benchmark:
        f"{BENCHMARKS}/runs/{{run}}/downstream.tsv"
    resources:
        **stage_resources("downstream"),
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        tasks=lambda w: EXP.run(w.run)["eval"].get("tasks", ["olmo"]),
        task_data=lambda w: task_data_args(w.run),
        tokenizer=lambda w: option("--tokenizer", tokenizer_for(w.run)),
        tasks_dir=lambda w: f"{run_dir(w.run)}/lm_eval_tasks",
        limit=option("--limit", EVAL.get("limit")),
        batch=EVAL.get("batch_size", 8),
    shell:
        "shapelm eval downstream --model {params.model_dir:q} {params.tokenizer:q} "
        "--tasks {params.tasks:q} {params.task_data:q} --tasks-dir {params.tasks_dir:q} "
        "{params.limit:q} --batch-size {params.batch:q} --out {output:q} > {log:q} 2>&1"


# Each trained model as a Hugging Face directory (docs/EVALUATION.md "Hugging Face export"),
# written as soon as its training ends: loading and re-saving the weights needs host memory,
# not a GPU.
def hf_export_dir(run):
    return f"{WORK}/hf/{run}"


rule export_hf:
    input:
        model=lambda w: model_file(w.run),
        tokenizer=[TOKENIZER] if DEFAULT_SOURCE else [],
        fetched=lambda w: fetched_tokenizer(tokenizer_for(w.run)),
    output:
        directory(f"{WORK}/hf/{{run}}"),
    log:
        f"{LOGS}/runs/{{run}}/export_hf.log",
    resources:
        runtime=60,
        mem_mb=lambda w: jobs.eval_host_mem_mb(EXP.run(w.run)),
        cpus_per_task=2,
        nodes=1,
        gres="",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        tokenizer=lambda w: option("--tokenizer", tokenizer_for(w.run)),
    shell:
        "shapelm export-hf {params.model_dir:q} {output:q} {params.tokenizer:q} > {log:q} 2>&1"
