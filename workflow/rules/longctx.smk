# Long context: YaRN extension (400 steps, s=16 at paper scale), Proof-pile PPL and RULER.
# Paper defaults below; the tiny default scales them down in its `longctx:` section.
LC_FACTOR = LONGCTX.get("factor", 16)
LC_ORIGINAL = LONGCTX.get("original_length", 4096)
LC_LENGTHS = ",".join(str(x) for x in LONGCTX.get("lengths", [4096, 8192, 16384, 32768, 65536]))
if DEFAULT_SOURCE:
    _VAL = f"{WORK}/data/corpus/val"
    LC_PROOFPILE = LONGCTX.get("proofpile", f"{_VAL}/default_sci")
    LC_RULER_SOURCES = f"--essays {_VAL}/default_wiki --qa-text {_VAL}/default_web"
    LC_TOKENIZER_INPUT = [TOKENIZER]
else:
    LC_PROOFPILE = LONGCTX.get("proofpile", "")
    LC_RULER_SOURCES = " ".join(
        f"--{key} {LONGCTX[key]}" for key in ("essays", "squad", "hotpotqa") if LONGCTX.get(key)
    )
    LC_TOKENIZER_INPUT = []


rule yarn_finetune:
    input:
        model=lambda w: model_file(w.run),
        data=lambda w: train_data(w.run),
    output:
        f"{WORK}/runs/{{run}}/yarn/final/model.safetensors",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/final",
        out=lambda w: f"{run_dir(w.run)}/yarn",
        data=LONGCTX.get("pg19", ""),
        seq_len=LONGCTX.get("seq_len", LC_FACTOR * LC_ORIGINAL),
        steps=LONGCTX.get("finetune_steps", 400),
        batch=LONGCTX.get("finetune_batch", 64),
        tokenizer=f"--tokenizer {TOKENIZER}" if TOKENIZER else "",
    log:
        f"{LOGS}/runs/{{run}}/yarn_finetune.log",
    resources:
        gres="gpu:8" if not DEFAULT_SOURCE else "",
        runtime=24 * 60,
    shell:
        "shapelm longctx finetune --model {params.model_dir} "
        "--data $( [ -n '{params.data}' ] && echo '{params.data}' || dirname {input.data} ) "
        "{params.tokenizer} --out {params.out} --factor {LC_FACTOR} --original {LC_ORIGINAL} "
        "--seq-len {params.seq_len} --steps {params.steps} --batch {params.batch} > {log} 2>&1"


rule proofpile:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
        tokenizer=LC_TOKENIZER_INPUT,
    output:
        f"{RESULTS}/runs/{{run}}/proofpile.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
        min_tokens=LONGCTX.get("proofpile_min_tokens", 131072),
        num_docs=LONGCTX.get("proofpile_num_docs", 10),
        tokenizer=f"--tokenizer {TOKENIZER}" if TOKENIZER else "",
    log:
        f"{LOGS}/runs/{{run}}/proofpile.log",
    resources:
        gres="gpu:1" if not DEFAULT_SOURCE else "",
        runtime=240,
    shell:
        "shapelm longctx proofpile --model {params.model_dir} --run {wildcards.run} "
        "--docs {LC_PROOFPILE} {params.tokenizer} --lengths {LC_LENGTHS} "
        "--min-tokens {params.min_tokens} --num-docs {params.num_docs} --out {output} > {log} 2>&1"


rule ruler_data:
    """RULER's 13 tasks at each length, generated offline (seed 42) with the model's tokenizer."""
    input:
        tokenizer=LC_TOKENIZER_INPUT,
    output:
        directory(f"{WORK}/data/ruler"),
    params:
        samples=LONGCTX.get("ruler_samples", 500),
    log:
        f"{LOGS}/data/ruler_data.log",
    shell:
        "shapelm longctx ruler-generate --tokenizer {TOKENIZER} --lengths {LC_LENGTHS} "
        "--samples {params.samples} {LC_RULER_SOURCES} --out {output} > {log} 2>&1"


rule ruler:
    input:
        model=lambda w: f"{run_dir(w.run)}/yarn/final/model.safetensors",
        data=f"{WORK}/data/ruler",
    output:
        f"{RESULTS}/runs/{{run}}/ruler.json",
    params:
        model_dir=lambda w: f"{run_dir(w.run)}/yarn/final",
    log:
        f"{LOGS}/runs/{{run}}/ruler.log",
    resources:
        gres="gpu:1" if not DEFAULT_SOURCE else "",
        runtime=24 * 60,
    shell:
        "shapelm longctx ruler --model {params.model_dir} --tokenizer {TOKENIZER} "
        "--data {input.data} --out {output} > {log} 2>&1"
