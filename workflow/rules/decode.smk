# Decode benchmark: one-token latency and KV-cache bytes, conventional vs hourglass, per scale
# (the two runs of a scale marked `decode: true`, conventional first).
DECODE_PAIRS = {}
for _r in DECODE_RUNS:
    DECODE_PAIRS.setdefault(EXP.run(_r)["scale"], []).append(_r)
DECODE_PAIRS = {
    s: sorted(rs, key=lambda r: EXP.run(r)["arch"]["kind"] != "conventional")
    for s, rs in DECODE_PAIRS.items()
    if len(rs) == 2
}


rule decode_pair:
    input:
        experiment=f"{WORK}/experiment.json",
    output:
        f"{RESULTS}/decode/pair_{{scale}}.json",
    log:
        f"{LOGS}/decode/decode_{{scale}}.log",
    benchmark:
        f"{BENCHMARKS}/decode/decode_{{scale}}.tsv"
    resources:
        **stage_resources("decode_pair", run_of=lambda w: DECODE_PAIRS[w.scale][-1]),
    params:
        runs=lambda w: DECODE_PAIRS[w.scale],
        mixers=",".join(DECODE["mixers"]),
        lengths=",".join(str(x) for x in DECODE["lengths"]),
        peer=option("--peer-length", DECODE["peer_length"]),
    shell:
        "shapelm bench decode --config {input.experiment:q} --runs {params.runs:q} "
        "--mixer {params.mixers:q} --lengths {params.lengths:q} {params.peer:q} --out {output:q} "
        "> {log:q} 2>&1"


rule decode_bench:
    input:
        [f"{RESULTS}/decode/pair_{s}.json" for s in DECODE_PAIRS],
    output:
        f"{RESULTS}/decode/decode.json",
    log:
        f"{LOGS}/decode/decode_merge.log",
    localrule: True
    shell:
        "shapelm bench decode-merge {input:q} --out {output:q} > {log:q} 2>&1"
