"""Greedy decoding with a preallocated KV cache, chunked prefill, no_grad.

Only the last position's logits are computed (never [tokens, vocab] for the prompt).
`greedy_generate_batch` decodes ragged prompts together: each prompt is prefilled alone (the
long, compute-bound part) right-aligned into a shared cache, so every row's next token goes
to the same cache slot; then all rows decode at once (the memory-bound part, where batching
pays), a key mask hiding each row's left padding. RoPE only sees position differences, so a
prompt shifted right attends exactly as it would unshifted.

A model with a recurrent state (Titans' memories, Hope-attention's fast weights) decodes each
prompt alone: its state would read a shifted prompt's padding, and a state has no key mask.
"""

from __future__ import annotations

import torch

from shapelm.model.cache import StaticKVCache


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
    if len(prompts) > 1 and model.config.has_recurrent_state:
        return [greedy_generate_batch(model, [p], [n], eos_id=eos_id, prefill_chunk=prefill_chunk,
                                      device=device)[0] for p, n in zip(prompts, max_new_tokens)]
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        longest = max(len(p) for p in prompts)
        budget = max(max_new_tokens)
        dtype = next(model.parameters()).dtype
        cache = StaticKVCache(model.config, len(prompts), longest + budget, dtype=dtype, device=device)
        cache.key_mask = torch.zeros(len(prompts), longest + budget, dtype=torch.bool, device=device)
        last = []
        for i, prompt in enumerate(prompts):
            start = longest - len(prompt)
            cache.key_mask[i, start:] = True
            ids = torch.tensor([prompt], dtype=torch.long, device=device)
            target = cache if len(prompts) == 1 else cache.row(i, start)  # one row: the state's cache
            last.append(_prefill(model, ids, target, start, prefill_chunk))
        cache.set_length(longest)
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
