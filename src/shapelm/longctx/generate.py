"""Greedy decoding with a preallocated KV cache (batch 1), chunked prefill, no_grad.

Only the last position's logits are computed (never [tokens, vocab] for the prompt).
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """Per-layer K/V buffers of ``capacity`` positions, allocated on first use (satisfies
    ``shapelm.model.transformer.KVCache``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.length: dict[int, int] = {}

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        if layer_idx not in self.k:
            b, h, _, d = k.shape
            self.k[layer_idx] = k.new_empty(b, h, self.capacity, d)
            self.v[layer_idx] = v.new_empty(b, h, self.capacity, d)
            self.length[layer_idx] = 0
        start = self.length[layer_idx]
        end = start + k.shape[2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: {end} > capacity {self.capacity}")
        self.k[layer_idx][:, :, start:end] = k
        self.v[layer_idx][:, :, start:end] = v
        self.length[layer_idx] = end
        return self.k[layer_idx][:, :, :end], self.v[layer_idx][:, :, :end]


@torch.no_grad()
def greedy_generate(
    model,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    eos_id: int | None = None,
    prefill_chunk: int | None = 8192,
    device: torch.device | str | None = None,
) -> list[int]:
    """Greedy continuation of ``prompt_ids`` (stops at ``eos_id``, which is not returned)."""
    if not prompt_ids:
        raise ValueError("greedy_generate: empty prompt")
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        cache = StaticKVCache(len(prompt_ids) + max_new_tokens)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        chunk = prefill_chunk or ids.shape[1]
        pos = 0
        h = None
        for start in range(0, ids.shape[1], chunk):
            piece = ids[:, start : start + chunk]
            h = model.hidden_states(piece, kv_cache=cache, start_pos=pos)
            pos += piece.shape[1]
        out: list[int] = []
        for _ in range(max_new_tokens):
            logits = model.lm_head(h[:, -1]).float()
            nxt = int(torch.argmax(logits, dim=-1).item())
            if eos_id is not None and nxt == eos_id:
                break
            out.append(nxt)
            if len(out) == max_new_tokens:
                break
            h = model.hidden_states(torch.tensor([[nxt]], device=device), kv_cache=cache, start_pos=pos)
            pos += 1
        return out
    finally:
        model.train(was_training)
