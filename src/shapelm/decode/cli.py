"""`shapelm bench decode`: single-token decode latency and KV-cache bytes, conventional vs hourglass.

    shapelm bench decode --pair 906m --mixer mha,gqa,mla --lengths 32k,64k,128k --out t12.json
    shapelm bench decode --arch-a 906m_conv --arch-b 906m_hg --mixer mha --lengths 4k,8k --out f5.json
    shapelm bench decode --config work/EXP/plan.json --runs hg906m_conv hg906m_hg --mixer gqa ...
    shapelm bench decode            # the scaled-down CPU pair, MHA, 1k..16k

Arm A is the baseline (conventional): speedup = latency_A / latency_B, KV reduction = 1 - KV_B/KV_A.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import Any, Callable

from shapelm.errors import ConfigError
from shapelm.records import DecodeRecord

log = logging.getLogger(__name__)


def parse_lengths(text: str) -> list[int]:
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        mult = 1024 if item.endswith("k") else 1
        try:
            out.append(int(item.rstrip("k")) * mult)
        except ValueError:
            raise ConfigError(f"--lengths: {item!r} is not a length (e.g. 4096 or 32k)") from None
    if not out or min(out) < 2:
        raise ConfigError("--lengths: give at least one length >= 2")
    return out


#: (CONFIG, [run names]) -> [(name, resolved run config)]: how `--config` is read. The front end
#: registering this stage passes it (shapelm.commands.bench: a lookup in the plan), so the decode stage
#: never loads an experiment itself.
RunConfigs = Callable[[str, list[str]], list[tuple[str, dict[str, Any]]]]


def add_commands(subparsers, run_configs: RunConfigs | None = None) -> None:
    bench = subparsers.choices.get("bench")
    if bench is None:
        bench = subparsers.add_parser("bench", help="micro-benchmarks (decode latency, ...)")
        bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
    else:  # another module registered `bench` first: add to its subcommands
        bench_sub = next(a for a in bench._actions if isinstance(a, argparse._SubParsersAction))
    p = bench_sub.add_parser(
        "decode",
        help="one-token decode latency and KV bytes, arm A vs arm B (arXiv 2602.06471 4.7, Table 12, Figure 5)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m = bench_sub.add_parser("decode-merge", help="concatenate decode results (one file per pair)")
    m.add_argument("inputs", nargs="+", help="result JSONs of `shapelm bench decode`")
    m.add_argument("--out", required=True, help="where to write")
    m.set_defaults(func=run_decode_merge)
    src = p.add_argument_group("arms (default: --pair cpu)")
    src.add_argument("--pair", choices=["906m", "3b", "8b", "cpu"], help="preset conventional/hourglass pair")
    src.add_argument("--arch-a", metavar="SPEC", help="baseline arm: preset, JSON/YAML spec or file")
    src.add_argument("--arch-b", metavar="SPEC", help="compared arm")
    src.add_argument("--config", help="the plan (work/EXP/plan.json) or an experiment config; with --runs A B")
    src.add_argument("--runs", nargs=2, metavar=("A", "B"),
                     help="the runs to benchmark (default: the config's decode runs)")
    src.add_argument("--vocab-size", type=int, help="override both arms' vocabulary")
    p.add_argument("--mixer", default="mha", help="mha, gqa, mla or a comma list (default mha)")
    p.add_argument("--lengths", default="1k,2k,4k,8k,16k", help="context lengths, e.g. 4096,8192 or 32k,64k")
    p.add_argument("--out", help="results JSON")
    p.add_argument("--warmup", type=int, default=5, help="untimed decode steps first")
    p.add_argument("--iters", type=int, default=20, help="timed decode steps")
    p.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="auto", help="auto (bf16 on cuda, float32 on cpu), bf16, fp16, fp32")
    p.add_argument("--n-kv-heads", type=int, help="GQA key/value heads (default n_heads // 4)")
    p.add_argument("--r-kv", type=int, default=256, help="MLA latent width (default 256)")
    p.add_argument("--d-rope", type=int, default=32, help="MLA rotary key width (default 32)")
    p.add_argument("--fill", choices=["random", "tiled"], default="random",
                   help="cache content: random, or a 64-token prefill tiled to the length")
    p.add_argument("--no-cuda-graph", action="store_true", help="time eager steps on CUDA")
    p.add_argument("--interleave", action="store_true",
                   help="time the arms step by step in turn (default on CPU: shared machines)")
    p.add_argument("--sequential", action="store_true", help="never interleave")
    p.add_argument("--threads", type=int, help="CPU threads")
    p.add_argument("--peer-length", type=int,
                   help="also time transformers' LlamaForCausalLM + StaticCache on arm A at this length")
    p.set_defaults(func=run_decode_bench, run_configs=run_configs)


def resolve_arms(args) -> list:
    from shapelm.decode.specs import PAIRS, resolve_runs, resolve_spec

    if args.config or args.runs:
        if not (args.config and args.runs):
            raise ConfigError("--config and --runs A B go together")
        if getattr(args, "run_configs", None) is None:
            raise ConfigError("--config: this parser reads no plan; run it as `shapelm bench decode`")
        return resolve_runs(args.run_configs(args.config, list(args.runs)), args.vocab_size)
    if args.arch_a or args.arch_b:
        if not (args.arch_a and args.arch_b):
            raise ConfigError("give both --arch-a and --arch-b")
        names = (args.arch_a, args.arch_b)
    else:
        names = PAIRS[args.pair or "cpu"]
    arms = [resolve_spec(name, args.vocab_size) for name in names]
    if arms[0][0] == arms[1][0]:
        arms[1] = (arms[1][0] + "_b", arms[1][1])
    return arms


def run_decode_bench(args) -> int:
    import torch

    from shapelm.decode.bench import BenchSettings, format_table, run_benchmark
    from shapelm.decode.model import MIXERS
    from shapelm.decode.specs import PAPER_SPEEDUP_906M

    mixers = [m.strip() for m in args.mixer.split(",") if m.strip()]
    bad = [m for m in mixers if m not in MIXERS]
    if bad or not mixers:
        raise ConfigError(f"--mixer: unknown {bad}; choose from {list(MIXERS)}")
    lengths = parse_lengths(args.lengths)
    arms = resolve_arms(args)
    settings = BenchSettings(
        warmup=args.warmup, iters=args.iters, device=args.device, dtype=args.dtype,
        n_kv_heads=args.n_kv_heads, r_kv=args.r_kv, d_rope=args.d_rope, fill=args.fill,
        cuda_graph=not args.no_cuda_graph, threads=args.threads,
    )
    device = settings.resolved_device()
    settings.interleave = args.interleave or (device.type == "cpu" and not args.sequential)
    result = run_benchmark(arms, mixers, lengths, settings)
    if args.pair == "906m" or {a[0] for a in arms} == {"906m_conv", "906m_hg"}:
        for c in result["comparisons"]:
            c["paper_speedup"] = PAPER_SPEEDUP_906M.get(c["mixer"], {}).get(c["length"])
    if args.peer_length:
        result["peer"] = peer_comparison(arms[0][1], args.peer_length, settings)
    print(format_table(result))
    if "peer" in result:
        pr = result["peer"]
        print(f"\npeer at S={pr['length']}: shapelm {pr['shapelm_ms']:.3f} ms, transformers "
              f"{pr['transformers_ms']:.3f} ms per token ({pr['transformers_over_shapelm']:.2f}x)")
    if args.out:
        DecodeRecord.from_dict(result, args.out).write(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    del torch
    return 0


def run_decode_merge(args) -> int:
    from shapelm.decode.bench import merge_results

    merge_results(args.inputs).write(args.out)
    return 0


def peer_comparison(cfg, length: int, settings) -> dict:
    """shapelm vs transformers on the same conventional weights (no QK-norm, MHA), both eager,
    timed step by step in turn so both see the same machine load."""
    import torch

    from shapelm.decode.bench import Arm, summarize, time_steps
    from shapelm.decode.hf import hf_decode_step, to_llama

    cfg = dataclasses.replace(cfg, qk_norm=False)
    arm = Arm(cfg, "shapelm", "mha", dataclasses.replace(settings, cuda_graph=False))
    arm.prepare(length)
    hf = to_llama(arm.model)
    hf_step = hf_decode_step(hf, length, settings.seed)
    ours, theirs = [], []
    with torch.inference_mode():
        for i in range(settings.warmup + settings.iters):
            a = time_steps(arm.step, arm.device, 0, 1)[0]
            b = time_steps(hf_step, arm.device, 0, 1)[0]
            if i >= settings.warmup:
                ours.append(a)
                theirs.append(b)
    a, b = summarize(ours), summarize(theirs)
    arm.release()
    return {
        "length": length,
        "mode": "eager",
        "shapelm_ms": a["latency_ms_median"],
        "transformers_ms": b["latency_ms_median"],
        "transformers_over_shapelm": b["latency_ms_median"] / a["latency_ms_median"],
        "shapelm": {**a, "times_ms": ours},
        "transformers": {**b, "times_ms": theirs},
    }
