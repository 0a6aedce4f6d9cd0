"""Token mixer throughput: tokens/s of every mixer in `shapelm.model.config.MIXERS` against
softmax attention at equal width (same d_model, heads, head_dim, SwiGLU width, layers).

Each mixer is timed as one block stack (`Transformer` of a conventional shape whose layers use
that mixer), forward and forward + backward, on the same batch; timings alternate between the
mixers so that background load hits all alike, and the median is reported. Printed side by side
with each mixer's tokens/s as a ratio to softmax attention's, and the ratio of the FLOP rates
(tokens/s times the A.8 training FLOPs per token: what `shapelm cost` multiplies attention's MFU
by for a run of that mixer until benchmarks/gpu_check.py measures it on a GPU). Mixer-specific
knobs (Titans' chunk and window) are at their defaults unless given.

    python benchmarks/mixer_throughput.py                                  # CPU defaults
    python benchmarks/mixer_throughput.py --d-model 256 --seq 1024 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.shapes.accounting import flops_per_token  # noqa: E402
from shapelm.model import build_model  # noqa: E402
from shapelm.model.builders import build_model_config  # noqa: E402
from shapelm.model.config import MIXERS  # noqa: E402

#: Per-mixer arch keys for the benchmark (the mixer's LayerShape fields; defaults otherwise).
MIXER_ARCH: dict[str, dict] = {"titans": {"memory_chunk": 64, "window": 512}}


#: The mixers compared (every one that mixes tokens), attention first: the others' ratios are to it.
BENCH_MIXERS = tuple(m for m in MIXERS if m != "none")


def build(mixer: str, d_model: int, heads: int, layers: int, device, max_seq_len: int = 4096):
    """A conventional stack of `mixer` layers at equal width, built on `device`."""
    arch = {"kind": "conventional", "d_model": d_model, "n_layers": layers, "d_h": 4 * d_model,
            "n_heads": heads, "vocab_size": 256, "mixer": mixer, "max_seq_len": max_seq_len,
            **MIXER_ARCH.get(mixer, {})}
    torch.manual_seed(0)
    return build_model(build_model_config(arch), device)


def train_flops(model, seq_len: int) -> float:
    return flops_per_token(model.config, seq_len).train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    mixers = list(BENCH_MIXERS)
    models = {m: build(m, args.d_model, args.heads, args.layers, device, args.seq) for m in mixers}
    ids = torch.randint(0, 256, (args.batch, args.seq), device=device)
    times: dict[str, dict[str, list[float]]] = {m: {"fwd": [], "fwd_bwd": []} for m in mixers}

    def timed(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    for rep in range(args.repeats + 1):  # the first round warms up
        for m, model in models.items():
            with torch.no_grad():
                fwd = timed(lambda: model(ids))
            fb = timed(lambda: model(ids, labels=ids).loss.backward())
            model.zero_grad(set_to_none=True)
            if rep:
                times[m]["fwd"].append(fwd)
                times[m]["fwd_bwd"].append(fb)
    tokens = args.batch * args.seq
    rows = []
    base = {k: tokens / statistics.median(times["attention"][k]) for k in ("fwd", "fwd_bwd")}
    print(f"d_model {args.d_model}, {args.heads} heads, {args.layers} layers, batch {args.batch} x seq {args.seq}, "
          f"{args.device}, {args.threads} thread(s); median of {args.repeats}")
    print(f"{'mixer':<18}{'fwd tok/s':>12}{'ratio':>8}{'fwd+bwd tok/s':>16}{'ratio':>8}{'FLOP rate':>10}")
    for m in mixers:
        rate = {k: tokens / statistics.median(times[m][k]) for k in ("fwd", "fwd_bwd")}
        row = {"mixer": m, **{f"{k}_tokens_per_s": rate[k] for k in rate},
               **{f"{k}_ratio": rate[k] / base[k] for k in rate},
               "fwd_bwd_flop_rate_ratio": rate["fwd_bwd"] / base["fwd_bwd"]
               * train_flops(models[m], args.seq) / train_flops(models["attention"], args.seq)}
        rows.append(row)
        print(f"{m:<18}{rate['fwd']:>12.0f}{row['fwd_ratio']:>8.2f}{rate['fwd_bwd']:>16.0f}{row['fwd_bwd_ratio']:>8.2f}"
              f"{row['fwd_bwd_flop_rate_ratio']:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
