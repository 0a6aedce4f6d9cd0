"""Saved-activation bytes per block with and without activation checkpointing.

Counts, with torch.autograd.graph.saved_tensors_hooks, every byte autograd keeps for backward
while one block runs forward, for the 906M conventional and hourglass block shapes (paper.yaml
runs hg906m_conv / hg906m_hg) and the 8B pair, in each recompute mode side by side. One block
runs for real on CPU over a short sequence (`--probe-tokens`): SDPA takes its flash path there as
on GPU, so every saved tensor is [tokens, width] (no [seq, seq] term) and the bytes per token
scale exactly to train.seq_len x micro-batch. Parameters are bf16, as FSDP2's
MixedPrecisionPolicy(param_dtype=bf16) gives; `--dtype float32` for fp32.

    python benchmarks/activation_memory.py [--seq-len 4096] [--micro-batch 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from shapelm.model.config import run_model_config
from shapelm.plan.experiment import load_experiment
from shapelm.model import build_model
from shapelm.model.transformer import RECOMPUTE_MODES

RUNS = ("hg906m_conv", "hg906m_hg", "hg8b_conv", "hg8b_hg")


def block_for(cfg, dtype) -> torch.nn.Module:
    """The model's first block with uninitialised weights (values do not change saved bytes)."""
    return build_model(cfg, "meta").layers[0].to_empty(device="cpu").to(dtype)


def saved_bytes_per_token(block, mode: str, tokens: int, dtype) -> float:
    """Bytes autograd saves per token in one block's forward, each storage counted once and
    the weights (and views of them) not at all: they are held anyway."""
    block.set_recompute(mode)
    head_dim = block.attn.shape.head_dim
    x = torch.randn(1, tokens, block.attn_norm.weight.numel(), dtype=dtype, requires_grad=True)
    cos = torch.randn(tokens, head_dim, dtype=dtype)
    sin = torch.randn(tokens, head_dim, dtype=dtype)
    seen = {p.untyped_storage()._cdata for p in block.parameters()}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        storage = t.untyped_storage()
        if storage._cdata not in seen:
            seen.add(storage._cdata)
            total += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, cos, sin)
    return total / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--probe-tokens", type=int, default=128)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    exp = load_experiment(Path(__file__).parents[1] / "configs" / "paper.yaml")
    gib = 2**30
    print(f"saved activations per block, micro-batch {args.micro_batch} x {args.seq_len} tokens, "
          f"{args.dtype} parameters (GiB; whole model = block x layers)")
    print(f"{'run':<12} {'layers':>6} " + " ".join(f"{m:>10}" for m in RECOMPUTE_MODES)
          + f" {'model none':>11} {'model full':>11}")
    tokens = args.seq_len * args.micro_batch
    for name in RUNS:
        cfg = run_model_config(exp.run(name))
        block = block_for(cfg, dtype)
        with torch.no_grad():
            for p in block.parameters():
                p.normal_(0, 0.02)
        per_mode = {m: tokens * saved_bytes_per_token(block, m, args.probe_tokens, dtype)
                    for m in RECOMPUTE_MODES}
        print(f"{name:<12} {cfg.n_layers:>6} "
              + " ".join(f"{per_mode[m] / gib:>10.3f}" for m in RECOMPUTE_MODES)
              + f" {per_mode['none'] * cfg.n_layers / gib:>11.2f}"
              f" {per_mode['full'] * cfg.n_layers / gib:>11.2f}")


if __name__ == "__main__":
    main()
