#!/usr/bin/env bash
# One command on one H100/H200, under 5 minutes: the 8B slice's training MFU (bf16 vs FP8,
# micro-batch 1/2/4), the 906M conventional/hourglass pair, the sharded checkpoint save, Table
# 12 decode and the Titans/Hope mixers. Writes benchmarks/results/gpu_check-<gpu>.json after
# every row (read by `shapelm cost`); see benchmarks/gpu_check.py and benchmarks/README.md.
#
#     bash benchmarks/gpu_check.sh [--budget-s 260] [--only slice_8b,pair_906m] [--out FILE]
#     bash benchmarks/gpu_check.sh --cpu-smoke --out FILE   # every row, tiny, on CPU
#
# Wheels the GPU image lacks (torchao) travel in benchmarks/wheels/ (the prep command in
# benchmarks/README.md) and are installed into a temporary folder here, behind the caller's
# PYTHONPATH; nothing needs a network.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY="${PYTHON:-python3}"; fi
SITE=""
if compgen -G "benchmarks/wheels/*.whl" >/dev/null; then
    SITE="${TMPDIR:-/tmp}/shapelm-gpu-check-site"
    PIP=("$PY" -m pip)
    "$PY" -m pip --version >/dev/null 2>&1 || PIP=(python3 -m pip)  # a venv made without pip
    if "${PIP[@]}" install -q --no-index --no-deps --no-compile --disable-pip-version-check --root-user-action=ignore \
            --upgrade --target "$SITE" benchmarks/wheels/*.whl; then
        echo "installed $(ls benchmarks/wheels/*.whl | xargs -n1 basename | tr '\n' ' ')into $SITE"
    else
        echo "WARNING: the wheels in benchmarks/wheels did not install; the pre-flight lists what is missing"
        SITE=""
    fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}${SITE:+:$SITE}"
export PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# the script stops itself at its budget (260 s by default); this is the last resort
exec timeout -k 5 295 "$PY" benchmarks/gpu_check.py "$@"
