# Token data: the embedded default corpus, or fixed-order OLMo-2 stage-1 slices per scale,
# re-encoded for scales whose tokenizer is not dolma2 (docs/DATA.md section 7). The other rules
# ask only three functions: train_data(run), val_data(run) and tokenizer_for(run).
import re

from shapelm.data import choices as data_choices

if DEFAULT_SOURCE:
    CORPUS = f"{WORK}/data/corpus"

    rule default_corpus:
        """Real text with no hub access, pinned by content (docs/DATA.md section 5)."""
        output:
            train=f"{CORPUS}/train/manifest.json",
            val=expand(f"{CORPUS}/val/{{vset}}/manifest.json", vset=VAL_SETS),
            tokenizer=f"{CORPUS}/tokenizer.json",
        log:
            f"{LOGS}/data/default_corpus.log",
        params:
            vocab=DATA.get("default_corpus", {}).get("vocab_size", 4096),
            max_tokens=DATA.get("default_corpus", {}).get("max_train_tokens", 2_500_000),
            expect=[
                arg
                for what, digest in DATA.get("default_corpus", {})
                .get("sha256", {})
                .items()
                for arg in (f"--expect-{what}-sha256", digest)
            ],
        shell:
            'shapelm data default-corpus "$(dirname "$(dirname {output.train:q})")" '
            "--vocab-size {params.vocab:q} --max-train-tokens {params.max_tokens:q} {params.expect:q} "
            "> {log:q} 2>&1; grep '^warning:' {log:q} >&2 || true"

    def train_data(run):
        """Manifest of the token dir the run trains on."""
        return f"{CORPUS}/train/manifest.json"

    def val_data(run=None):
        """Manifests of the run's validation sets (one corpus, one tokenizer: any run)."""
        return [f"{CORPUS}/val/{v}/manifest.json" for v in VAL_SETS]

    TOKENIZER = f"{CORPUS}/tokenizer.json"

    def tokenizer_for(run):
        """The tokenizer the run's evaluation uses (a file or an HF repo id in the cache)."""
        return TOKENIZER

else:
    SCALES = list(dict.fromkeys(EXP.run(r)["scale"] for r in RUNS))
    SCALE_DATA = {s: data_choices.scale_data(EXP.raw, s) for s in SCALES}
    RETOKENIZED = {
        s: data_choices.tokenizer_slug(data_choices.run_tokenizer(d))
        for s, d in SCALE_DATA.items()
        if data_choices.retokenizes(d)
    }
    RETOK_TOKENIZER = {
        data_choices.tokenizer_slug(
            data_choices.run_tokenizer(SCALE_DATA[s])
        ): data_choices.run_tokenizer(SCALE_DATA[s])
        for s in RETOKENIZED
    }
    # every validation set some run evaluates on, in first-seen order (one download job)
    ALL_VAL_SETS = list(
        dict.fromkeys(
            v
            for d in [DATA, *SCALE_DATA.values()]
            for v in d.get("validation_sets", [])
        )
    )
    OLMO = DATA.get("olmo", {})
    # CPU jobs: as many cores as asked, but never more than a node of the cluster has
    NODE_CPUS = int(jobs.cluster_settings(EXP)["node"]["cpus"])

    # rule-level constraints: `train-{tok}` and `val-{tok}` must not parse as other paths
    SCALE_RE = "|".join(re.escape(s) for s in SCALES) or "NONE"
    TOK_RE = "|".join(re.escape(t) for t in RETOK_TOKENIZER) or "NONE"
    VSET_RE = "|".join(re.escape(v) for v in ALL_VAL_SETS) or "NONE"

    rule slice_olmo:
        """The first N tokens of OLMo-2 stage 1 in its exact shuffled order (resumable); for a
        re-encoded scale, N = total_tokens x data.retokenize.over_slice dolma2 tokens.
        """
        input:
            fetched=fetched_tokenizer(data_choices.source_tokenizer(DATA)),
        output:
            f"{WORK}/data/{{scale}}/train/manifest.json",
        log:
            f"{LOGS}/data/slice_{{scale}}.log",
        benchmark:
            f"{BENCHMARKS}/data/slice_{{scale}}.tsv"
        wildcard_constraints:
            scale=SCALE_RE,
        resources:
            runtime=24 * 60,
            cpus_per_task=min(8, NODE_CPUS),
            mem_mb=16000,
        params:
            tokens=lambda w: data_choices.source_tokens(EXP.raw, w.scale),
            seq_len=lambda w: EXP.raw["scales"][w.scale]["train"].get("seq_len", 4096),
            root=option("--root", OLMO.get("root")),
            paths=option("--paths", OLMO.get("paths")),
            tokenizer=data_choices.source_tokenizer(DATA),
        shell:
            'shapelm data slice "$(dirname {output:q})" --tokens {params.tokens:q} '
            "--seq-len-out {params.seq_len:q} --tokenizer {params.tokenizer:q} "
            "{params.root:q} {params.paths:q} --quiet > {log:q} 2>&1"

    rule retokenize_train:
        """A scale's slice decoded document by document and re-encoded with its tokenizer, same
        order, cut into its seq_len windows (resumable; fails naming the scale if short).
        """
        input:
            tokens=f"{WORK}/data/{{scale}}/train/manifest.json",
            fetched=lambda w: fetched_tokenizer(
                data_choices.source_tokenizer(SCALE_DATA[w.scale])
            )
            + fetched_tokenizer(RETOK_TOKENIZER[w.tok]),
        output:
            f"{WORK}/data/{{scale}}/train-{{tok}}/manifest.json",
        log:
            f"{LOGS}/data/retokenize_{{scale}}_{{tok}}.log",
        benchmark:
            f"{BENCHMARKS}/data/retokenize_{{scale}}_{{tok}}.tsv"
        wildcard_constraints:
            scale=SCALE_RE,
            tok=TOK_RE,
        resources:
            runtime=24 * 60,
            cpus_per_task=min(16, NODE_CPUS),
            mem_mb=16000,
        params:
            source_tokenizer=lambda w: data_choices.source_tokenizer(
                SCALE_DATA[w.scale]
            ),
            tokenizer=lambda w: RETOK_TOKENIZER[w.tok],
            tokens=lambda w: data_choices.stream_tokens(EXP.raw, w.scale),
            seq_len=lambda w: EXP.raw["scales"][w.scale]["train"].get("seq_len", 4096),
            context=lambda w: f"scales.{w.scale}",
            hint=lambda w: (
                f"raise scales.{w.scale}.data.retokenize.over_slice "
                f"(now {data_choices.over_slice(SCALE_DATA[w.scale])})"
            ),
        shell:
            'shapelm data retokenize "$(dirname {input.tokens:q})" "$(dirname {output:q})" '
            "--source-tokenizer {params.source_tokenizer:q} --tokenizer {params.tokenizer:q} "
            "--tokens {params.tokens:q} --seq-len {params.seq_len:q} "
            "--context {params.context:q} --hint {params.hint:q} > {log:q} 2>&1"

    rule validation_sets:
        input:
            fetched=fetched_tokenizer(data_choices.source_tokenizer(DATA)),
        output:
            expand(f"{WORK}/data/val/{{vset}}/manifest.json", vset=ALL_VAL_SETS),
        log:
            f"{LOGS}/data/validation_sets.log",
        params:
            out=lambda w, output: os.path.dirname(os.path.dirname(output[0])),
            sets=",".join(ALL_VAL_SETS),
            root=option("--root", OLMO.get("validation_root")),
            tokenizer=data_choices.source_tokenizer(DATA),
        shell:
            "shapelm data validation {params.out:q} --sets {params.sets:q} "
            "--tokenizer {params.tokenizer:q} {params.root:q} > {log:q} 2>&1"

    rule retokenize_validation:
        """A dolma2 validation set in a re-encoded scale's tokenizer, for its eval_ppl."""
        input:
            tokens=f"{WORK}/data/val/{{vset}}/manifest.json",
            fetched=lambda w: fetched_tokenizer(data_choices.source_tokenizer(DATA))
            + fetched_tokenizer(RETOK_TOKENIZER[w.tok]),
        output:
            f"{WORK}/data/val-{{tok}}/{{vset}}/manifest.json",
        log:
            f"{LOGS}/data/retokenize_val_{{tok}}_{{vset}}.log",
        wildcard_constraints:
            tok=TOK_RE,
            vset=VSET_RE,
        params:
            source_tokenizer=data_choices.source_tokenizer(DATA),
            tokenizer=lambda w: RETOK_TOKENIZER[w.tok],
            context=lambda w: f"validation set {w.vset}",
        shell:
            'shapelm data retokenize "$(dirname {input.tokens:q})" "$(dirname {output:q})" '
            "--source-tokenizer {params.source_tokenizer:q} --tokenizer {params.tokenizer:q} "
            "--context {params.context:q} --quiet > {log:q} 2>&1"

    def train_data(run):
        """Manifest of the token dir the run trains on: its scale's slice, or that slice
        re-encoded with the scale's tokenizer."""
        scale = EXP.run(run)["scale"]
        if scale in RETOKENIZED:
            return f"{WORK}/data/{scale}/train-{RETOKENIZED[scale]}/manifest.json"
        return f"{WORK}/data/{scale}/train/manifest.json"

    def val_data(run=None):
        """Manifests of the run's validation sets, in the tokenizer it trains on (run None:
        the experiment-level data section)."""
        data = DATA if run is None else EXP.run(run)["data"]
        scale = None if run is None else EXP.run(run)["scale"]
        base = f"val-{RETOKENIZED[scale]}" if scale in RETOKENIZED else "val"
        return [
            f"{WORK}/data/{base}/{v}/manifest.json"
            for v in data.get("validation_sets", [])
        ]

    TOKENIZER = DATA.get("tokenizer", "")

    def tokenizer_for(run):
        """The tokenizer the run's evaluation uses: the one its tokens are in."""
        return data_choices.run_tokenizer(EXP.run(run)["data"])


def tokenizer_of_job(wildcards, input):
    """A job's tokenizer: its declared tokenizer input (the default corpus'), else the configured one."""
    return input.tokenizer[0] if input.get("tokenizer") else TOKENIZER
