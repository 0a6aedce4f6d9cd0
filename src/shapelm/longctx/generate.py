"""Greedy decoding with a preallocated KV cache, chunked prefill, no_grad.

Only the last position's logits are computed (never [tokens, vocab] for the prompt).
`greedy_generate_batch` decodes ragged prompts together: each prompt is prefilled alone (the
long, compute-bound part) right-aligned into a shared cache, so every row's next token goes
to the same cache slot; then all rows decode at once (the memory-bound part, where batching
pays), a key mask hiding each row's left padding. RoPE only sees position differences, so a
prompt shifted right attends exactly as it would unshifted.
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """Per-layer K/V buffers of ``capacity`` positions for ``batch`` rows (default: the batch of
    the first update), allocated on first use (satisfies ``shapelm.model.transformer.KVCache``)."""

    def __init__(self, capacity: int, batch: int | None = None) -> None:
        self.capacity = capacity
        self.batch = batch
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.length: dict[int, int] = {}
        self.key_mask: torch.Tensor | None = None

    def buffers(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        if layer_idx not in self.k:
            b, h, _, d = k.shape
            rows = self.batch or b
            self.k[layer_idx] = k.new_empty(rows, h, self.capacity, d)
            self.v[layer_idx] = v.new_empty(rows, h, self.capacity, d)
            self.length[layer_idx] = 0
        return self.k[layer_idx], self.v[layer_idx]

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        keys, values = self.buffers(layer_idx, k, v)
        start = self.length[layer_idx]
        end = start + k.shape[2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: {end} > capacity {self.capacity}")
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        self.length[layer_idx] = end
        return keys[:, :, :end], values[:, :, :end]

    def row(self, index: int, start: int) -> _RowPrefill:
        """A cache view that prefills row ``index`` from slot ``start`` on."""
        return _RowPrefill(self, index, start)


class _RowPrefill:
    def __init__(self, cache: StaticKVCache, index: int, start: int) -> None:
        self.cache, self.index, self.start = cache, index, start
        self.end: dict[int, int] = {}

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        keys, values = self.cache.buffers(layer_idx, k, v)
        pos = self.end.get(layer_idx, self.start)
        end = pos + k.shape[2]
        rows = slice(self.index, self.index + 1)
        keys[rows, :, pos:end] = k
        values[rows, :, pos:end] = v
        self.end[layer_idx] = end
        return keys[rows, :, self.start:end], values[rows, :, self.start:end]


def _prefill(model, ids: torch.Tensor, cache, start_pos: int, chunk: int | None) -> torch.Tensor:
    """Run the prompt through the cache in chunks; the last position's hidden state."""
    chunk = chunk or ids.shape[1]
    h = None
    for offset in range(0, ids.shape[1], chunk):
        piece = ids[:, offset: offset + chunk]
        h = model.hidden_states(piece, kv_cache=cache, start_pos=start_pos + offset)
    return h[:, -1]


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
    return greedy_generate_batch(model, [prompt_ids], [max_new_tokens], eos_id=eos_id,
                                 prefill_chunk=prefill_chunk, device=device)[0]


@torch.no_grad()
def greedy_generate_batch(
    model,
    prompts: list[list[int]],
    max_new_tokens: list[int],
    *,
    eos_id: int | None = None,
    prefill_chunk: int | None = 8192,
    device: torch.device | str | None = None,
) -> list[list[int]]:
    """Greedy continuations of several prompts decoded together (module docstring)."""
    if not prompts or any(not p for p in prompts):
        raise ValueError("greedy_generate: empty prompt")
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        longest = max(len(p) for p in prompts)
        budget = max(max_new_tokens)
        cache = StaticKVCache(longest + budget, batch=len(prompts))
        cache.key_mask = torch.zeros(len(prompts), longest + budget, dtype=torch.bool, device=device)
        last = []
        for i, prompt in enumerate(prompts):
            start = longest - len(prompt)
            cache.key_mask[i, start:] = True
            ids = torch.tensor([prompt], dtype=torch.long, device=device)
            last.append(_prefill(model, ids, cache.row(i, start), start, prefill_chunk))
        for layer in cache.k:
            cache.length[layer] = longest
        h = torch.cat(last)
        outs: list[list[int]] = [[] for _ in prompts]
        done = [n <= 0 for n in max_new_tokens]
        for step in range(budget):
            nxt = torch.argmax(model.lm_head(h).float(), dim=-1).tolist()
            for i, token in enumerate(nxt):
                if done[i]:
                    continue
                if eos_id is not None and token == eos_id:
                    done[i] = True
                    continue
                outs[i].append(token)
                done[i] = len(outs[i]) >= max_new_tokens[i]
            if all(done):
                break
            tokens = torch.tensor(nxt, dtype=torch.long, device=device)[:, None]
            h = model.hidden_states(tokens, kv_cache=cache, start_pos=longest + step)[:, -1]
        return outs
    finally:
        model.train(was_training)
