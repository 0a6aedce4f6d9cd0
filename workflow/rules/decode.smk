# Decode benchmark: one-token latency and KV-cache bytes, conventional vs hourglass, per scale
# (the two runs of a scale marked `decode: true`, conventional first).
DECODE_PAIRS = {}
for _r in DECODE_RUNS:
    DECODE_PAIRS.setdefault(EXP.run(_r)["scale"], []).append(_r)
DECODE_PAIRS = {s: sorted(rs, key=lambda r: EXP.run(r)["arch"]["kind"] != "conventional")
                for s, rs in DECODE_PAIRS.items() if len(rs) == 2}


rule decode_pair:
    input:
        experiment=f"{WORK}/experiment.json",
    output:
        f"{RESULTS}/decode/pair_{{scale}}.json",
    params:
        runs=lambda w: " ".join(DECODE_PAIRS[w.scale]),
        mixers=",".join(DECODE["mixers"]),
        lengths=",".join(str(x) for x in DECODE["lengths"]),
        peer=f"--peer-length {DECODE['peer_length']}" if DECODE["peer_length"] else "",
    log:
        f"{LOGS}/decode/decode_{{scale}}.log",
    resources:
        **stage_resources("decode_pair", run_of=lambda w: DECODE_PAIRS[w.scale][-1]),
    shell:
        "shapelm bench decode --config {input.experiment} --runs {params.runs} "
        "--mixer {params.mixers} --lengths {params.lengths} {params.peer} --out {output} > {log} 2>&1"


rule decode_bench:
    localrule: True
    input:
        [f"{RESULTS}/decode/pair_{s}.json" for s in DECODE_PAIRS],
    output:
        f"{RESULTS}/decode/decode.json",
    log:
        f"{LOGS}/decode/decode_merge.log",
    shell:
        "shapelm bench decode-merge {input} --out {output} > {log} 2>&1"
