# Long context: YaRN extension (400 steps, s=16 at paper scale), Proof-pile PPL and RULER.


rule yarn_finetune:
    input:
        model=lambda w: model_file(w.run),
        data=lambda w: train_data(w.run),
    output:
        f"{WORK}/runs/{{run}}/yarn/final/model.safetensors",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        out=lambda w: f"{run_dir(w.run)}/yarn",
        factor=LONGCTX.get("factor", 16),
        original=LONGCTX.get("original_length", 4096),
        steps=LONGCTX.get("finetune_steps", 400),
        batch=LONGCTX.get("finetune_batch", 64),
        source=f"--source {LONGCTX['pg19']}" if LONGCTX.get("pg19") else "",
    log:
        f"{LOGS}/runs/{{run}}/yarn_finetune.log",
    resources:
        gres="gpu:8" if not DEFAULT_SOURCE else "",
        runtime=24 * 60,
    shell:
        "shapelm longctx finetune --model {params.model_dir} --data $(dirname {input.data}) "
        "{params.source} --out {params.out} --factor {params.factor} "
        "--original-length {params.original} --steps {params.steps} --batch {params.batch} "
        "> {log} 2>&1"


rule proofpile:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
    output:
        f"{RESULTS}/runs/{{run}}/proofpile.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
        lengths=",".join(str(x) for x in LONGCTX.get("lengths", [4096, 8192, 16384, 32768, 65536])),
        docs=LONGCTX.get("proofpile", f"{WORK}/data/corpus/val/default_sci" if DEFAULT_SOURCE else ""),
    log:
        f"{LOGS}/runs/{{run}}/proofpile.log",
    resources:
        gres="gpu:1" if not DEFAULT_SOURCE else "",
        runtime=240,
    shell:
        "shapelm longctx proofpile --model {params.model_dir} --docs {params.docs} "
        "--lengths {params.lengths} --out {output} > {log} 2>&1"


rule ruler:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
        tokenizer=TOKENIZER if DEFAULT_SOURCE else [],
    output:
        f"{RESULTS}/runs/{{run}}/ruler.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
        lengths=",".join(str(x) for x in LONGCTX.get("lengths", [4096, 8192, 16384, 32768, 65536])),
        samples=LONGCTX.get("ruler_samples", 500),
        tokenizer=TOKENIZER,
    log:
        f"{LOGS}/runs/{{run}}/ruler.log",
    resources:
        gres="gpu:1" if not DEFAULT_SOURCE else "",
        runtime=24 * 60,
    shell:
        "shapelm longctx ruler --model {params.model_dir} --tokenizer {params.tokenizer} "
        "--lengths {params.lengths} --samples {params.samples} --out {output} > {log} 2>&1"
