#!/usr/bin/env bash
# GPU decode benchmark for arXiv 2602.06471 Table 12 and Figure 5, in one call (each step capped, 300 s
# in all; expected well under that on one
# H100/H200/A100-80G class GPU; the 8B arms need ~60 GB at 64k). Run from the repository root:
#
#     bash benchmarks/decode_gpu.sh [OUT_DIR]        # default: $OUT, else results/decode_gpu
#
# 1. Table 12: 906M pair (conv d_model 1536 L24 / hourglass d_model 2496 L12, d_attn 1536),
#    MHA, GQA (16 q over 4 KV heads), MLA (r_KV 256, d_rope 32) at 32k/64k/128k; speedups are
#    printed beside the paper's (MHA 1.93/1.96/1.98, GQA 1.87/1.93/1.97, MLA 1.87/1.94/1.97).
# 2. Figure 5: MHA relative latency (hourglass / conventional) at 4k..64k for 906M, 3B and 8B
#    (paper at 64k: 0.52, 0.66, 0.70; asymptotes 1/2, 1/1.556, 1/1.4545).
# 3. Peer: shapelm vs transformers (LlamaForCausalLM + StaticCache, same weights, eager) at 32k.
# 4. The Table 12 pair again with eager steps (no CUDA graph), for the launch-overhead effect.
# Every arm: batch 1, bf16, cache built directly at the length (random K/V, no prefill),
# 5 warm-up + 20 timed one-token steps, CUDA-event timing; decode steps captured as a CUDA graph
# (same kernels for both arms; falls back to eager if capture fails, recorded as "mode").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-results/decode_gpu}}"
mkdir -p "$OUT_DIR"
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY="${PYTHON:-python3}"; fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
SHAPELM=("$PY" -m shapelm.cli bench decode)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT_DIR/gpu.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" \
    | tee -a "$OUT_DIR/gpu.txt"

run() {  # name, timeout seconds, args...
    local name=$1 limit=$2; shift 2
    echo "=== $name"
    timeout "$limit" "${SHAPELM[@]}" "$@" --out "$OUT_DIR/$name.json" 2>"$OUT_DIR/$name.log" \
        | tee "$OUT_DIR/$name.txt"
    echo "=== $name exit ${PIPESTATUS[0]}"
}

run table12 90 --pair 906m --mixer mha,gqa,mla --lengths 32k,64k,128k --sequential
run fig5_906m 35 --pair 906m --mixer mha --lengths 4k,8k,16k,32k,64k --sequential
run fig5_3b 45 --pair 3b --mixer mha --lengths 4k,8k,16k,32k,64k --sequential
run fig5_8b 60 --pair 8b --mixer mha --lengths 4k,8k,16k,32k,64k --sequential
run peer_906m 30 --pair 906m --mixer mha --lengths 32k --sequential --peer-length 32768
run table12_eager 40 --pair 906m --mixer mha,gqa,mla --lengths 32k,64k,128k --sequential --no-cuda-graph

"$PY" - "$OUT_DIR" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    p = out / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None
for name in ("table12", "table12_eager"):
    res = load(name)
    if res:
        print(f"\n{name}: speedup conv/hourglass (paper)   KV reduction")
        for c in res["comparisons"]:
            print(f"  {c['mixer']:4} {c['length'] // 1024:4d}k  {c['speedup']:.2f}x ({c.get('paper_speedup')})"
                  f"   {c['kv_reduction']:.1%}")
print("\nFigure 5: hourglass latency relative to conventional (MHA)")
for scale, paper in (("906m", 0.52), ("3b", 0.66), ("8b", 0.70)):
    res = load(f"fig5_{scale}")
    if res:
        cells = "  ".join(f"{c['length'] // 1024}k {1 / c['speedup']:.3f}" for c in res["comparisons"])
        print(f"  {scale:5} {cells}   (paper 64k: {paper})")
peer = load("peer_906m")
if peer and "peer" in peer:
    p = peer["peer"]
    print(f"\npeer 906M conv S={p['length']}: shapelm {p['shapelm_ms']:.2f} ms, transformers {p['transformers_ms']:.2f} ms")
EOF
