"""What each layer of a trained model does, measured on held-out text: two depth analyses.

* **Residual-stream norm per layer** (after arXiv 2606.16112): the mean over tokens of the L2 norm
  of the residual stream h_0 (the embeddings) and h_{l+1} (after each block, before the final
  norm), and each block's relative write ||h_{l+1} - h_l|| / ||h_l||. A stream whose norm grows
  layer after layer while the writes shrink is one whose deep layers change little.
* **Loss when a layer is skipped** (after arXiv 2606.26538, "the deepest layers add little"):
  the mean next-token cross-entropy with block l replaced by the identity (its input passed on
  unchanged), beside the intact model's; `skip_delta` is the increase. With looped blocks
  (`arch.loops`) a stored block is skipped in every round it is applied, and the norms are per
  applied block (the unrolled depth).

Captured with forward hooks on the model's blocks, never by re-running pieces of a block, so
every shape (hourglass, tapered, LWS, variable width, Titans, Hope) is measured by the code that
trains it. Windows of `seq_len` + 1 tokens, non-overlapping, from the start of the text.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from shapelm.analysis.novelty import AnalysisError

DEFINITION = ("residual_norm[l] = mean over tokens of ||h_l||_2 (h_0 the embeddings, h_{l+1} a block's output, "
              "before the final norm); write_ratio[l] = mean over tokens of ||h_{l+1} - h_l|| / ||h_l||; "
              "skip_loss[l] = mean next-token CE with stored block l replaced by the identity (every round "
              "of a looped block); skip_delta = skip_loss - loss")


def windows(ids: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Non-overlapping windows of seq_len + 1 tokens (inputs and their next tokens)."""
    n = ids.numel() // (seq_len + 1)
    if n < 1:
        raise AnalysisError(f"{ids.numel()} tokens: fewer than one window of --seq-len {seq_len} + 1")
    return ids[: n * (seq_len + 1)].view(n, seq_len + 1)


@torch.no_grad()
def _loss(model, batch: torch.Tensor) -> float:
    out = model(batch[:, :-1], labels=batch[:, 1:], return_logits=False)
    return float(out.ce_loss)


class _StreamNorms:
    """Forward hooks on every block: the norm of its output and its relative write, per
    application; the first block's input is the embeddings."""

    def __init__(self) -> None:
        self.embedding: float = math.nan
        self.outputs: list[float] = []
        self.writes: list[float] = []

    def __call__(self, module, args, output) -> None:
        x, y = args[0].float(), output.float()
        x_norm = x.norm(dim=-1)
        if not self.outputs:
            self.embedding = float(x_norm.mean())
        self.outputs.append(float(y.norm(dim=-1).mean()))
        if x.shape == y.shape:
            ratio = (y - x).norm(dim=-1) / x_norm.clamp_min(1e-12)
            self.writes.append(float(ratio.mean()))
        else:  # a block that changes the stream's width writes no comparable difference
            self.writes.append(math.nan)


def _identity(module, args, output):
    return args[0]


@torch.no_grad()
def measure_depth(model, ids: torch.Tensor, seq_len: int) -> dict[str, Any]:
    """Residual norms and skip losses of `model` (a shapelm Transformer) on `ids`."""
    model.eval()
    batch = windows(ids, seq_len)
    norms = _StreamNorms()
    handles = [block.register_forward_hook(norms) for block in model.layers]
    try:
        base = _loss(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    skip = []
    for block in model.layers:
        handle = block.register_forward_hook(_identity)
        try:
            skip.append(_loss(model, batch))
        finally:
            handle.remove()
    applied = [{"depth": i, "layer": i % len(model.layers), "residual_norm": norms.outputs[i],
                "write_ratio": norms.writes[i]} for i in range(len(norms.outputs))]
    layers = [{"layer": i, "skip_loss": s, "skip_delta": s - base} for i, s in enumerate(skip)]
    return {"loss": base, "embedding_norm": norms.embedding,
            "applied": applied, "layers": layers, "tokens": int(batch.numel()), "windows": int(batch.shape[0]),
            "seq_len": seq_len, "definition": DEFINITION}
