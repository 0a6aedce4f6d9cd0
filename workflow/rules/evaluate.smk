# Held-out perplexity and downstream tasks through lm-eval.


rule eval_ppl:
    input:
        model=lambda w: model_file(w.run),
        val=lambda w: val_data(w.run),
    output:
        f"{RESULTS}/runs/{{run}}/ppl.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        val_dirs=lambda w: " ".join(f"$(dirname {p})" for p in val_data(w.run)),
        seq_len=EVAL.get("ppl_seq_len", 4096),
        max_instances=(
            f"--max-instances {EVAL['ppl_max_instances']}" if EVAL.get("ppl_max_instances") else ""
        ),
        batch=EVAL.get("batch_size", 8),
    log:
        f"{LOGS}/runs/{{run}}/eval_ppl.log",
    resources:
        **stage_resources("eval_ppl"),
    shell:
        "shapelm eval ppl --model {params.model_dir} --data {params.val_dirs} "
        "--seq-len {params.seq_len} {params.max_instances} --batch-size {params.batch} "
        "--no-progress --out {output} > {log} 2>&1"


# The held-out tasks (same lm-eval formats as the real ones, built from validation text): the
# tiny default's tasks, and the rehearsal's, whose runs cannot reach the hub's datasets.
HELDOUT = any("heldout" in EXP.run(r)["eval"].get("tasks", []) for r in RUNS)
if HELDOUT:
    TASK_DIR = f"{WORK}/data/tasks"

    rule make_tasks:
        """Small lm-eval tasks generated from held-out text, same formats as the real ones."""
        input:
            val=val_data(None),  # the experiment's validation text, in the source's tokens
            tokenizer=[TOKENIZER] if DEFAULT_SOURCE else [],
        output:
            f"{TASK_DIR}/task_data.json",
        params:
            val_dirs=" ".join(f"$(dirname {p})" for p in val_data(None)),
            tokenizer=TOKENIZER,
            n=EVAL.get("heldout_examples", 200),
        log:
            f"{LOGS}/data/make_tasks.log",
        shell:
            "shapelm eval make-tasks --text {params.val_dirs} --tokenizer {params.tokenizer} "
            "--n-mc {params.n} --n-ce {params.n} "
            "--out {TASK_DIR} > {log} 2>&1"

    TASK_INPUTS = [f"{TASK_DIR}/task_data.json"]
    TASK_DATA_ARG = f"--task-data {TASK_DIR}/task_data.json"
else:
    TASK_INPUTS = []
    TASK_DATA_ARG = " ".join(
        f"--task-data {k}={v}" for k, v in EVAL.get("task_data", {}).items()
    )


rule downstream:
    input:
        model=lambda w: model_file(w.run),
        tasks=TASK_INPUTS,
    output:
        f"{RESULTS}/runs/{{run}}/downstream.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        tasks=lambda w: " ".join(EXP.run(w.run)["eval"].get("tasks", ["olmo"])),
        task_data=TASK_DATA_ARG,
        tokenizer=lambda w: f"--tokenizer {tokenizer_for(w.run)}" if tokenizer_for(w.run) else "",
        tasks_dir=lambda w: f"{run_dir(w.run)}/lm_eval_tasks",
        limit=f"--limit {EVAL['limit']}" if EVAL.get("limit") else "",
        batch=EVAL.get("batch_size", 8),
    log:
        f"{LOGS}/runs/{{run}}/downstream.log",
    resources:
        **stage_resources("downstream"),
    shell:
        "shapelm eval downstream --model {params.model_dir} {params.tokenizer} "
        "--tasks {params.tasks} {params.task_data} --tasks-dir {params.tasks_dir} {params.limit} "
        "--batch-size {params.batch} "
        "--out {output} > {log} 2>&1"
