#!/usr/bin/env bash
# One command on one H100/H200 (under 10 minutes): training tokens/s, MFU and peak memory of the
# 906M pair and an 8B-shaped slice (paper settings, eager vs compiled, bf16 vs FP8, activation
# checkpointing modes, largest micro-batch), checkpoint save/load seconds, Table 12 decode
# latency. Writes benchmarks/results/gpu_check-<gpu>.json (read by `shapelm plan`) and prints a
# table; see benchmarks/gpu_check.py. Run from anywhere:
#
#     bash benchmarks/gpu_check.sh [--budget-s 540] [--out FILE]
#     bash benchmarks/gpu_check.sh --cpu-smoke        # tiny, on CPU: checks the script only
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY="${PYTHON:-python3}"; fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PY" -c "import torch, importlib.util as u; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchao', bool(u.find_spec('torchao')))"
exec timeout 590 "$PY" benchmarks/gpu_check.py "$@"
