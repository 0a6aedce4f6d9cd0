# Decode benchmark: one-token latency and KV-cache bytes for the runs marked `decode: true`.


rule decode_bench:
    input:
        experiment=f"{WORK}/experiment.json",
    output:
        f"{RESULTS}/decode/decode.json",
    params:
        runs=" ".join(DECODE_RUNS),
        mixers=",".join(DECODE.get("mixers", ["mha", "gqa", "mla"])),
        lengths=",".join(str(x) for x in DECODE.get("lengths", [4096, 8192, 16384, 32768, 65536, 131072])),
    log:
        f"{LOGS}/decode/decode_bench.log",
    resources:
        gres="gpu:1" if not DEFAULT_SOURCE else "",
        runtime=120,
    shell:
        "shapelm bench decode --config {input.experiment} --runs {params.runs} "
        "--mixers {params.mixers} --lengths {params.lengths} --out {output} > {log} 2>&1"
