# Pretraining. Checkpoints live in RUN/checkpoints, outside the declared outputs: Snakemake
# deletes the outputs of a job it reruns, so after a preemption the rerun resumes from them.


def train_resources(run):
    res = wf.resources_for(EXP, run)
    out = {"runtime": res["runtime"], "mem_mb": res["mem_mb"], "cpus_per_task": res["cpus_per_task"]}
    if res["gpus_per_node"] > 0:
        out["gres"] = f"gpu:{res['gpus_per_node']}"
        out["nodes"] = res["nodes"]
        out["tasks"] = res["nodes"]
    return out


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
        launch=lambda w: wf.launch_prefix(
            wf.resources_for(EXP, w.run)["gpus_per_node"], wf.resources_for(EXP, w.run)["nodes"]
        ),
    log:
        f"{LOGS}/runs/{{run}}/train.log",
    threads: 1
    resources:
        runtime=lambda w: train_resources(w.run)["runtime"],
        mem_mb=lambda w: train_resources(w.run)["mem_mb"],
        cpus_per_task=lambda w: train_resources(w.run)["cpus_per_task"],
        gres=lambda w: train_resources(w.run).get("gres", ""),
        nodes=lambda w: train_resources(w.run).get("nodes", 1),
        tasks=lambda w: train_resources(w.run).get("tasks", 1),
    shell:
        "{params.launch} train {input.config} --out {params.out} --data $(dirname {input.data}) "
        "--no-progress > {log} 2>&1"
