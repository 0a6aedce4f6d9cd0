"""What pinned CPU numerics cost, and what they buy: a tiny training run with the pinned kernel
settings (shapelm.numerics) and with SHAPELM_NUMERICS=fast, alternated in one session, each a
whole `shapelm train` process on one thread.

    python benchmarks/cpu_numerics.py [--repeats 2] [--steps 40]

Prints each process's wall time, the pinned / fast ratio of the medians, and whether the runs
of a mode end with equal weights (they must) and the two modes with different ones (on a
machine whose own kernels are not the pinned ones: AVX-512, or MKL's own path).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPELM = Path(sys.executable).with_name("shapelm")


def _config(steps: int) -> dict:
    """The tiny default's hg113m_conv shape (d_model 64, 4 layers, FFN 256) on a synthetic stream."""
    return {
        "name": "numerics",
        "model": {"vocab_size": 2048, "d_model": 64, "max_seq_len": 128, "qk_norm": True,
                  "layers": [{"attention": {"n_heads": 4, "n_kv_heads": 4, "head_dim": 16},
                              "ffn_widths": [256]}] * 4},
        "train": {"lr": 3e-3, "warmup_tokens": 4 * 2048, "total_tokens": steps * 2048,
                  "batch_tokens": 2048, "seq_len": 128, "micro_batch_size": 16,
                  "checkpoint_every": 10_000, "log_every": 10},
        "data": {},
    }


def _weights_digest(path: Path) -> str:
    """sha256 over the tensors (the file's header orders its metadata as it likes)."""
    from safetensors.numpy import load_file

    h = hashlib.sha256()
    for name, array in sorted(load_file(path).items()):
        h.update(name.encode() + array.tobytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    from shapelm.data.tokens import write_token_dir

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rng = np.random.default_rng(0)
        write_token_dir(tmp / "tokens", rng.integers(1, 2048, 200_000).astype(np.uint32), 2048, 0)
        (tmp / "run.json").write_text(json.dumps(_config(args.steps)))
        times: dict[str, list[float]] = {"pinned": [], "fast": []}
        digests: dict[str, set[str]] = {"pinned": set(), "fast": set()}
        for i in range(args.repeats):
            for mode in ("pinned", "fast"):
                out = tmp / f"{mode}{i}"
                env = {k: v for k, v in os.environ.items()
                       if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
                env.update(SHAPELM_NUMERICS=mode, SHAPELM_THREADS="1", OMP_NUM_THREADS="1")
                start = time.perf_counter()
                subprocess.run([str(SHAPELM), "train", str(tmp / "run.json"), "--out", str(out),
                                "--data", str(tmp / "tokens"), "--no-progress"],
                               env=env, check=True, capture_output=True)
                times[mode].append(time.perf_counter() - start)
                digests[mode].add(_weights_digest(out / "final" / "model.safetensors"))
                print(f"{mode:6} {i}: {times[mode][-1]:.1f} s", flush=True)
    ratio = statistics.median(times["pinned"]) / statistics.median(times["fast"])
    print(f"pinned / fast wall time (median of {args.repeats}, whole process): {ratio:.2f}")
    print(f"pinned runs equal: {len(digests['pinned']) == 1}; fast runs equal: {len(digests['fast']) == 1}; "
          f"the modes differ: {digests['pinned'] != digests['fast']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
