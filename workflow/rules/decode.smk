# Decode benchmark: one-token latency, KV-cache and recurrent-state bytes of run pairs
# (docs/DECODE.md): each scale's `decode: true` runs, conventional first, under every mixer of
# `decode.mixers` (Table 12, Figure 5); and each run whose `decode:` names another run, against it
# in both runs' native shapes (the Tapered backbones' per-token cost). The pairs come from the
# plan; each job reads its runs' resolved configs from the plan document (work/EXP/plan.json).
TABLE12_PAIRS = decode_plan.decode_pairs(EXP)
DECODE_PAIRS = {
    **{s: list(p) for s, p in TABLE12_PAIRS.items()},
    **{r: [base, r] for r, base in decode_plan.decode_baselines(EXP).items()},
}


def decode_mixers(pair):
    return ",".join(DECODE["mixers"]) if pair in TABLE12_PAIRS else "native"


rule decode_pair:
    input:
        plan=f"{WORK}/plan.json",
    output:
        f"{RESULTS}/decode/pair_{{pair}}.json",
    log:
        f"{LOGS}/decode/decode_{{pair}}.log",
    benchmark:
        f"{BENCHMARKS}/decode/decode_{{pair}}.tsv"
    resources:
        **stage_resources("decode_pair", run_of=lambda w: DECODE_PAIRS[w.pair][-1]),
    params:
        runs=lambda w: DECODE_PAIRS[w.pair],
        mixers=lambda w: decode_mixers(w.pair),
        lengths=",".join(str(x) for x in DECODE["lengths"]),
        peer=option("--peer-length", DECODE["peer_length"]),
    shell:
        "shapelm bench decode --config {input.plan:q} --runs {params.runs:q} "
        "--mixer {params.mixers:q} --lengths {params.lengths:q} {params.peer:q} --out {output:q} "
        "> {log:q} 2>&1"


rule decode_bench:
    input:
        [f"{RESULTS}/decode/pair_{p}.json" for p in DECODE_PAIRS],
    output:
        f"{RESULTS}/decode/decode.json",
    log:
        f"{LOGS}/decode/decode_merge.log",
    localrule: True
    shell:
        "shapelm bench decode-merge {input:q} --out {output:q} > {log:q} 2>&1"
