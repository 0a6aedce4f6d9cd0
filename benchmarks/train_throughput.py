"""Training throughput: shapelm's conventional decoder vs transformers' LlamaForCausalLM.

Both models get the same shape (d_model, layers, heads, SwiGLU width, vocab; untied
embeddings, no biases, RMSNorm eps 1e-6, RoPE theta 5e5; shapelm with qk_norm=False, pre-norm,
so the two compute the same function class), the same batch, and the same step:
forward + cross-entropy, backward, grad-norm clip 1.0, AdamW. Steps alternate between the two
models so that background load hits both alike; the median step time is reported. On a GPU
both run under bf16 autocast and MFU is printed (paper A.8 FLOPs per token / peak).

With --loop, shapelm's own training loop (`shapelm.train.train`: data reading from a token
dir, loss scaling, logging) is also timed on the same shape, to show its overhead.

    python benchmarks/train_throughput.py                       # CPU defaults
    python benchmarks/train_throughput.py --device cuda --d-model 1024 --layers 8 --seq 2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.shapes.accounting import flops_per_token  # noqa: E402
from shapelm.model import build_model  # noqa: E402
from shapelm.model.builders import build_model_config  # noqa: E402
from shapelm.records import read_metrics  # noqa: E402
from shapelm.train.observe import peak_flops_for  # noqa: E402


def make_models(args, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = {"kind": "conventional", "d_model": args.d_model, "n_layers": args.layers,
            "d_h": args.d_h, "n_heads": args.heads, "vocab_size": args.vocab,
            "max_seq_len": args.seq, "qk_norm": False}
    cfg = build_model_config(arch)
    torch.manual_seed(0)
    ours = build_model(cfg, device)
    hf_cfg = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.d_model, intermediate_size=args.d_h,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, max_position_embeddings=args.seq, rope_theta=500000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        hidden_act="silu", initializer_range=0.02,
    )
    hf_cfg._attn_implementation = "sdpa"
    theirs = LlamaForCausalLM(hf_cfg).to(device)
    n_ours = sum(p.numel() for p in ours.parameters())
    n_theirs = sum(p.numel() for p in theirs.parameters())
    assert n_ours == n_theirs, (n_ours, n_theirs)
    return cfg, ours, theirs, n_ours


def step_fns(ours, theirs, x, amp):
    labels = torch.full_like(x, -100)
    labels[:, :-1] = x[:, 1:]
    opt_a = torch.optim.AdamW(ours.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt_b = torch.optim.AdamW(theirs.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ctx = (lambda: torch.autocast(x.device.type, dtype=torch.bfloat16)) if amp else torch.enable_grad

    def ours_step():
        with ctx():
            loss = ours(x, labels, return_logits=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
        opt_a.step()
        opt_a.zero_grad(set_to_none=True)
        return loss

    def theirs_step():
        with ctx():
            loss = theirs(input_ids=x, labels=x).loss  # shifts internally: same positions
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        opt_b.step()
        opt_b.zero_grad(set_to_none=True)
        return loss

    return ours_step, theirs_step


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    loss = fn()
    float(loss.detach())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def loop_throughput(args, device) -> float:
    """tokens/s of `shapelm.train.train` itself on the same shape (median over logged steps)."""
    import numpy as np

    from shapelm.data.tokens import write_token_dir
    from shapelm.train import train

    steps = args.warmup + args.steps
    tokens_per_step = args.batch * args.seq
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rng = np.random.default_rng(0)
        write_token_dir(tmp / "tok", rng.integers(0, args.vocab, size=steps * tokens_per_step + 1),
                        vocab_size=args.vocab, eos_id=0)
        run = {
            "name": "bench",
            "model": build_model_config({"kind": "conventional", "d_model": args.d_model,
                                         "n_layers": args.layers, "d_h": args.d_h,
                                         "n_heads": args.heads, "vocab_size": args.vocab,
                                         "max_seq_len": args.seq, "qk_norm": False}).to_dict(),
            "train": {"lr": 1e-4, "warmup_tokens": 0, "total_tokens": steps * tokens_per_step,
                      "batch_tokens": tokens_per_step, "seq_len": args.seq,
                      "micro_batch_size": args.batch, "checkpoint_every": 10**9, "log_every": 1,
                      "z_loss": 0.0},
        }
        train(run, tmp / "run", data_dir=tmp / "tok", progress=False,
              device=device.type)
        rows = list(read_metrics(tmp / "run" / "metrics.jsonl"))
    return statistics.median(r["tokens_per_s"] for r in rows[args.warmup:])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-h", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--loop", action="store_true", help="also time shapelm.train.train")
    p.add_argument("--peak-flops", type=float, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    amp = device.type == "cuda"
    cfg, ours, theirs, n_params = make_models(args, device)
    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device,
                      generator=torch.Generator(device=device).manual_seed(1))
    ours_step, theirs_step = step_fns(ours, theirs, x, amp)
    times = {"shapelm": [], "llama": []}
    for i in range(args.warmup + args.steps):
        for name, fn in (("shapelm", ours_step), ("llama", theirs_step)) if i % 2 == 0 else (
                ("llama", theirs_step), ("shapelm", ours_step)):
            t = timed(fn, device)
            if i >= args.warmup:
                times[name].append(t)
    tokens = args.batch * args.seq
    tps = {k: tokens / statistics.median(v) for k, v in times.items()}
    flops = flops_per_token(cfg, args.seq).train
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = args.peak_flops or (peak_flops_for(name) if device.type == "cuda" else None)
    print(f"device {name}  threads {torch.get_num_threads()}  params {n_params / 1e6:.2f}M  "
          f"batch {args.batch}x{args.seq}  {'bf16 autocast' if amp else 'float32'}")
    print(f"{'model':<22}{'tokens/s':>12}{'ms/step':>10}{'MFU':>8}")
    for k, label in (("shapelm", "shapelm Transformer"), ("llama", "HF LlamaForCausalLM")):
        mfu = f"{flops * tps[k] / peak:.1%}" if peak else "-"
        print(f"{label:<22}{tps[k]:>12.0f}{1000 * tokens / tps[k]:>10.1f}{mfu:>8}")
    print(f"ratio shapelm / llama: {tps['shapelm'] / tps['llama']:.3f}x")
    if args.loop:
        loop_tps = loop_throughput(args, device)
        mfu = f"{flops * loop_tps / peak:.1%}" if peak else "-"
        print(f"{'shapelm train loop':<22}{loop_tps:>12.0f}{1000 * tokens / loop_tps:>10.1f}{mfu:>8}"
              f"   ({loop_tps / tps['shapelm']:.3f}x the bare shapelm step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
