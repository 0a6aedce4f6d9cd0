"""Tiny synthetic text and a minimal training loop, for smoke tests of the evaluation stage.

Not a training recipe (that is `shapelm.train`): just enough to get a model that has learned
something, so downstream scores can be checked to rise above chance quickly on a CPU.
"""

from __future__ import annotations

import random

import torch

NAMES = ["Alice", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun",
         "Kira", "Luca", "Mona", "Nils", "Omar", "Pia"]
THINGS = ["apples", "boats", "clocks", "drums", "eggs", "flutes", "glass", "hats", "ink", "jars",
          "kites", "lamps", "maps", "nails", "oars", "pens"]
PLACES = ["the market", "the harbor", "the school", "the mill", "the garden", "the station",
          "the bridge", "the tower", "the farm", "the library"]
VERBS = ["sells", "paints", "repairs", "counts", "carries", "collects", "buys", "hides"]


def synthetic_documents(n_docs: int = 40, sentences_per_doc: int = 6, seed: int = 0) -> list[str]:
    """Short stories in which each sentence follows a per-document pattern."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        name, thing, place = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES)
        verb = rng.choice(VERBS)
        out = []
        for k in range(sentences_per_doc):
            n = k + 1 + rng.randrange(3)
            out.append(f"{name} {verb} {n} {thing} at {place} on day {k + 1}.")
        docs.append(" ".join(out))
    return docs


def train_tiny(model, tokens: torch.Tensor, steps: int = 200, seq_len: int = 64,
               batch_size: int = 8, lr: float = 3e-3, seed: int = 0) -> float:
    """Next-token training on random windows of a 1-D token tensor; returns the last loss.

    A hand-written Adam (constant lr, no weight decay): `torch.optim` imports torch._dynamo on
    first use, which can take tens of seconds on a busy machine.
    """
    g = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    m1 = [torch.zeros_like(p) for p in params]
    m2 = [torch.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.95, 1e-8
    model.train()
    n = tokens.numel() - seq_len - 1
    loss = float("nan")
    for step in range(1, steps + 1):
        starts = torch.randint(0, n, (batch_size,), generator=g)
        block = torch.stack([tokens[s : s + seq_len + 1] for s in starts.tolist()])
        out = model(block[:, :-1], block[:, 1:])
        for p in params:
            p.grad = None
        out.loss.backward()
        with torch.no_grad():
            c1, c2 = 1 - b1**step, 1 - b2**step
            for p, a, b in zip(params, m1, m2):
                a.mul_(b1).add_(p.grad, alpha=1 - b1)
                b.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                p.addcdiv_(a / c1, (b / c2).sqrt_().add_(eps), value=-lr)
        loss = float(out.loss.detach())
    model.eval()
    return loss
