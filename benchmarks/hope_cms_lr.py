"""Which Hope-attention in-context step `cms_lr` trains stably at the Tapered paper's learning rate.

A small Hope-attention model (d_model 64, 4 layers, CMS levels with chunks 16 and 64 as in
configs/paper.yaml) trains for a few hundred steps on CPU with the paper's optimiser (AdamW, peak
lr 4e-4, betas 0.9/0.95, weight decay 0.1, grad clip 1.0, cosine to 0.1 x peak after a warmup),
once per `cms_lr`, on the same batches (next-byte prediction on the default corpus' Python standard-library
text, so nothing is downloaded or tokenised). Prints, per cms_lr, the mean training loss over
the first and last 20 steps, the largest gradient norm and whether any loss was not finite.

The in-context step is cms_lr / d_model on RMS-normalised keys (shapelm.model.hope), so its
stability does not depend on the width; the outer learning rate is the paper's.

    python benchmarks/hope_cms_lr.py                          # cms_lr 1.0, 0.3, 0.1; ~3 min each
    python benchmarks/hope_cms_lr.py --cms-lr 1.0 0.1 --lr 3e-3           # the tiny default's outer rate
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.data.corpus import code_documents  # noqa: E402
from shapelm.model import build_model  # noqa: E402
from shapelm.model.builders import build_model_config  # noqa: E402


def byte_stream(n_bytes: int) -> torch.Tensor:
    text = "\n".join(d.text for d in code_documents())
    data = text.encode()[:n_bytes]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def run(cms_lr: float, args, data: torch.Tensor) -> dict:
    torch.manual_seed(args.seed)
    cfg = build_model_config({"kind": "conventional", "mixer": "hope_attention", "cms_chunks": [16, 64],
                              "cms_lr": cms_lr, "d_model": args.d_model, "n_layers": args.layers,
                              "d_h": 2 * args.d_model, "n_heads": max(1, args.d_model // 32), "vocab_size": 256,
                              "max_seq_len": args.seq, "qk_norm": True})
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    losses, max_grad = [], 0.0
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=gen)
        window = torch.stack([data[s:s + args.seq + 1] for s in starts])
        ids, labels = window[:, :-1], window[:, 1:]  # the model takes labels aligned with ids
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        loss = model(ids, labels=labels).ce_loss
        opt.zero_grad()
        loss.backward()
        max_grad = max(max_grad, float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
    k = min(20, len(losses))
    return {"cms_lr": cms_lr, "steps": len(losses), "loss_first": sum(losses[:k]) / k,
            "loss_last": sum(losses[-k:]) / k, "max_grad_norm": max_grad,
            "finite": all(math.isfinite(x) for x in losses)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cms-lr", type=float, nargs="+", default=[1.0, 0.3, 0.1])
    p.add_argument("--lr", type=float, default=4e-4, help="outer peak learning rate (Tapered Section 3.1)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = byte_stream(4_000_000)
    for cms_lr in args.cms_lr:
        print(json.dumps(run(cms_lr, args, data)), flush=True)


if __name__ == "__main__":
    main()
