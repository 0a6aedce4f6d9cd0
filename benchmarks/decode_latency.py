"""CPU decode benchmark: hourglass-over-conventional speedup vs the layer ratio L_conv / L_hg.

    .venv/bin/python benchmarks/decode_latency.py                      # cpu pair, MHA, 1k..64k
    .venv/bin/python benchmarks/decode_latency.py --mixer mha,gqa,mla --out /tmp/decode_cpu.json

Not a unit test: wall-clock timings. It prints measured speedups beside L_conv/L_hg and the share
of the asymptote reached, checks the decode criterion (speedup at the longest context >= 90%
of L_conv/L_hg), and times shapelm against transformers (LlamaForCausalLM + StaticCache, same
weights) at one length. The arms are timed step by step in turn (interleaved) on one thread,
so that a shared machine's background load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.decode.bench import BenchSettings, format_table, run_benchmark  # noqa: E402
from shapelm.decode.cli import parse_lengths, peer_comparison  # noqa: E402
from shapelm.decode.specs import PAIRS, resolve_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="cpu", choices=sorted(PAIRS))
    ap.add_argument("--mixer", default="mha")
    ap.add_argument("--lengths", default="1k,4k,16k,32k,64k")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peer-length", type=int, default=16384, help="0 to skip the transformers peer")
    ap.add_argument("--out", help="results JSON")
    args = ap.parse_args()

    arms = [resolve_spec(name) for name in PAIRS[args.pair]]
    settings = BenchSettings(warmup=args.warmup, iters=args.iters, threads=args.threads, interleave=True)
    lengths = parse_lengths(args.lengths)
    mixers = [m for m in args.mixer.split(",") if m]
    result = run_benchmark(arms, mixers, lengths, settings)
    print(format_table(result))

    print("\nspeedup (median)  vs  L_conv/L_hg   [criterion: >= 90% at the longest context]")
    ok = True
    for mixer in mixers:
        rows = sorted((c for c in result["comparisons"] if c["mixer"] == mixer), key=lambda c: c["length"])
        side = "  ".join(f"{c['length'] // 1024}k {c['speedup']:.2f}" for c in rows)
        last = rows[-1]
        share = last["speedup"] / last["layer_ratio"]
        print(f"  {mixer}: {side}   | L ratio {last['layer_ratio']:.2f} | longest: {share:.1%}"
              f"  (min-based {last['speedup_best'] / last['layer_ratio']:.1%})")
        ok &= share >= 0.9
    print(f"criterion met: {ok}")
    result["criterion_90pct"] = ok

    if args.peer_length:
        import torch

        torch.set_num_threads(args.threads)
        peer = peer_comparison(arms[0][1], args.peer_length, settings)
        result["peer"] = peer
        print(f"\npeer (conventional arm, S={peer['length']}, eager): shapelm {peer['shapelm_ms']:.2f} ms/token, "
              f"transformers {peer['transformers_ms']:.2f} ms/token -> transformers/shapelm "
              f"{peer['transformers_over_shapelm']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
