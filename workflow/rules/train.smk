# Pretraining. Checkpoints live in RUN/checkpoints, outside the declared outputs: Snakemake
# deletes the outputs of a job it reruns, so after a preemption the rerun resumes from them.


def _train_job(run):
    res = wf.resources_for(EXP, run)
    gpus = res["gpus_per_node"]
    return {
        "runtime": res["runtime"],
        "mem_mb": res["mem_mb"],
        "cpus_per_task": res["cpus_per_task"],
        "gres": f"gpu:{gpus}" if gpus else "",
        "nodes": res["nodes"] if gpus else 1,
        "tasks": res["nodes"] if gpus else 1,
        "launch": wf.launch_prefix(gpus, res["nodes"]),
    }


# Sized once per run from the FLOP accounting (the rule's lambdas read it several times per job).
TRAIN_JOBS = {run: _train_job(run) for run in RUNS}


rule run_config:
    """One run's resolved config (recipe inherited from its scale); a changed run reruns."""
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


rule train:
    input:
        config=f"{WORK}/runs/{{run}}/run_config.json",
        data=lambda w: train_data(w.run),
    output:
        model=f"{WORK}/runs/{{run}}/final/model.safetensors",
    params:
        out=lambda w: run_dir(w.run),
        launch=lambda w: TRAIN_JOBS[w.run]["launch"],
    log:
        f"{LOGS}/runs/{{run}}/train.log",
    threads: 1
    resources:
        runtime=lambda w: TRAIN_JOBS[w.run]["runtime"],
        mem_mb=lambda w: TRAIN_JOBS[w.run]["mem_mb"],
        cpus_per_task=lambda w: TRAIN_JOBS[w.run]["cpus_per_task"],
        gres=lambda w: TRAIN_JOBS[w.run]["gres"],
        nodes=lambda w: TRAIN_JOBS[w.run]["nodes"],
        tasks=lambda w: TRAIN_JOBS[w.run]["tasks"],
    shell:
        "{params.launch} train {input.config} --out {params.out} --data $(dirname {input.data}) "
        "--no-progress > {log} 2>&1"
