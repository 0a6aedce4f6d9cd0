"""A preallocated KV cache: one K and one V buffer per attention layer, written in place.

    cache = StaticKVCache(cfg, batch=1, max_len=S, dtype=torch.bfloat16, device="cuda")
    logits = model(prompt, kv_cache=cache, start_pos=0).logits       # prefill
    logits = model(next_tok, kv_cache=cache, start_pos=cache.length)  # one decode step

Buffers are `[batch, n_kv_heads, max_len, head_dim]` (the layout attention consumes), sized per
layer from the layer's own `AttentionShape`, so layers may have different KV widths (hourglass,
tapered, layer-wise-scaled shapes) and layers without attention hold nothing. `update` copies the
new keys/values into the buffer at the layer's current length and returns *views* up to the new
length: nothing is reallocated or concatenated per step.

MLA layers (see `shapelm.decode.mla`) cache one latent row per token instead of K and V: the
compressed `c_KV` (r_KV numbers) followed by the shared rotary key (d_rope numbers), in a single
`[batch, 1, max_len, r_KV + d_rope]` buffer. Their `update(layer, c_kv, k_rope)` returns
`(buffer[..., :len, :], buffer[..., :len, :r_KV])`: the absorbed-form key and value of a
one-head attention (the value is a view of the key's first r_KV columns, so it costs nothing).

The cache keeps one length per layer (each layer advances when it is updated); `length` is the
length of the first cached layer. `set_length(n)` rewinds or advances every layer at once, which
is how the benchmark decodes repeatedly against a fixed context.

This is the one KV cache: lm-eval generation, long-context generation and the decode benchmark all
use it. For ragged batches, `row(i, start)` prefills row i alone from slot `start` (right-aligned
prompts), and `key_mask` (bool [batch, max_len]) hides each row's left padding when decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shapelm.errors import ShapelmError
from shapelm.model.config import ModelConfig


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention cache geometry (arXiv 2602.06471 Table 12: r_KV 256, d_rope 32)."""

    r_kv: int = 256
    d_rope: int = 32

    @property
    def width(self) -> int:
        return self.r_kv + self.d_rope


class StaticKVCache:
    """Preallocated per-layer KV buffers implementing `shapelm.model.layers.KVCache`."""

    def __init__(
        self,
        cfg: ModelConfig,
        batch: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        mla: MLASpec | None = None,
    ) -> None:
        if batch < 1 or max_len < 1:
            raise ShapelmError(f"StaticKVCache: batch and max_len must be >= 1, got {batch}, {max_len}")
        self.batch, self.max_len, self.dtype = batch, max_len, dtype
        self.device = torch.device(device)
        self.mla = mla
        self.key_mask: torch.Tensor | None = None
        self.k: list[torch.Tensor | None] = []
        self.v: list[torch.Tensor | None] = []
        self._lens: list[int] = []
        for layer in cfg.unrolled_layers:  # looped blocks: one buffer per round of each layer
            attn = layer.attention
            if attn is None:
                self.k.append(None)
                self.v.append(None)
            elif mla is not None:  # one latent row per token: [c_KV | k_rope]
                self.k.append(torch.zeros(batch, 1, max_len, mla.width, dtype=dtype, device=self.device))
                self.v.append(None)
            else:
                shape = (batch, attn.n_kv_heads, max_len, attn.head_dim)
                self.k.append(torch.zeros(shape, dtype=dtype, device=self.device))
                self.v.append(torch.zeros(shape, dtype=dtype, device=self.device))
            self._lens.append(0)
        self._cached = [i for i, k in enumerate(self.k) if k is not None]
        # Per-sequence recurrent state that replaces or sits beside the KV of a layer, written by
        # the layer's forward: Titans memories under their layer index (shapelm.model.titans),
        # Hope-attention CMS levels under (layer, level) (shapelm.model.hope). Not positional.
        self.state: dict = {}

    # -- the KVCache protocol -------------------------------------------------------------------
    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        buf = self.k[layer_idx]
        if buf is None:
            raise ShapelmError(f"StaticKVCache: layer {layer_idx} has no attention, nothing to cache")
        if k.shape[0] != self.batch:
            raise ShapelmError(f"StaticKVCache: a batch of {k.shape[0]} rows, the cache holds {self.batch}")
        start = self._lens[layer_idx]
        end = self._check_end(layer_idx, start + k.shape[2])
        if self.mla is not None:  # k = c_KV [b, 1, s, r_KV], v = k_rope [b, 1, s, d_rope]
            r = self.mla.r_kv
            buf[:, :, start:end, :r].copy_(k)
            buf[:, :, start:end, r:].copy_(v)
            self._lens[layer_idx] = end
            full = buf[:, :, :end]
            return full, full[..., :r]
        buf[:, :, start:end].copy_(k)
        self.v[layer_idx][:, :, start:end].copy_(v)
        self._lens[layer_idx] = end
        return buf[:, :, :end], self.v[layer_idx][:, :, :end]

    def row(self, index: int, start: int) -> _RowPrefill:
        """A cache view that prefills row `index` alone, from slot `start` on."""
        return _RowPrefill(self, index, start)

    def _check_end(self, layer_idx: int, end: int) -> int:
        if end > self.max_len:
            raise ShapelmError(
                f"StaticKVCache: layer {layer_idx} would hold {end} tokens, max_len is {self.max_len}"
            )
        return end

    # -- lengths ----------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._lens[self._cached[0]] if self._cached else 0

    def set_length(self, n: int, keep_state: bool = False) -> None:
        """Rewind or advance every layer to `n` cached positions. A recurrent state (Titans,
        Hope-attention) cannot follow, so that is an error unless `keep_state`, which leaves the
        state as it is: the decode benchmark's repeated step, whose work does not depend on what
        the state holds."""
        if not 0 <= n <= self.max_len:
            raise ShapelmError(f"StaticKVCache: length {n} outside [0, {self.max_len}]")
        if self.state and n != self.length and not keep_state:
            raise ShapelmError("StaticKVCache: a recurrent state (Titans, Hope-attention) cannot be rewound or "
                               "advanced; reset() it")
        self._lens = [n] * len(self._lens)

    def reset(self) -> None:
        self.state.clear()
        self.set_length(0)

    # -- filling without a prefill ----------------------------------------------------------------
    @torch.no_grad()
    def fill_random(self, length: int, generator: torch.Generator | None = None, std: float = 1.0) -> None:
        """Fill positions [0, length) with N(0, std^2) keys/values and set the length.

        Builds a cache of the right shape at any length with no O(S^2) prefill.
        """
        for buf in self._buffers():
            buf[:, :, :length].normal_(0.0, std, generator=generator)
        self.set_length(length)

    @torch.no_grad()
    def fill_tiled(self, length: int) -> None:
        """Repeat the first `length()` cached positions (e.g. a short real prefill) up to `length`.

        The paper's construction (B.1): a short prefill records each layer's key/value structure,
        which is then rebuilt at the target length.
        """
        n = self.length
        if n == 0:
            raise ShapelmError("StaticKVCache.fill_tiled: prefill some tokens first")
        for buf in self._buffers():
            pos = n
            while pos < length:
                step = min(pos, length - pos)
                buf[:, :, pos : pos + step].copy_(buf[:, :, :step])
                pos += step
        self.set_length(length)

    def _buffers(self) -> list[torch.Tensor]:
        return [t for pair in zip(self.k, self.v) for t in pair if t is not None]

    # -- memory -------------------------------------------------------------------------------------
    def nbytes(self) -> int:
        """Bytes actually allocated for the cache (all buffers at max_len)."""
        return sum(t.untyped_storage().nbytes() for t in self._buffers())

    def nbytes_per_token(self) -> int:
        return self.nbytes() // (self.max_len * self.batch)

    def state_nbytes(self) -> int:
        """Bytes of the recurrent state the layers wrote (Titans memories, Hope CMS fast weights):
        per sequence and fixed, whatever the context length."""
        def size(value) -> int:
            if isinstance(value, torch.Tensor):
                return value.untyped_storage().nbytes()
            if callable(getattr(value, "nbytes", None)):  # a layer's own state object (Titans)
                return value.nbytes()
            if isinstance(value, dict):
                return sum(size(v) for v in value.values())
            if isinstance(value, (list, tuple)):
                return sum(size(v) for v in value)
            return 0

        return size(self.state)


class _RowPrefill:
    """One row of a `StaticKVCache`, written from slot `start` (the KVCache protocol)."""

    def __init__(self, cache: StaticKVCache, index: int, start: int) -> None:
        if cache.mla is not None:
            raise ShapelmError("StaticKVCache.row: ragged prefill of an MLA cache is not supported")
        self.cache, self.index, self.start = cache, index, start
        self.end: dict[int, int] = {}

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.cache.k[layer_idx], self.cache.v[layer_idx]
        if keys is None:
            raise ShapelmError(f"StaticKVCache: layer {layer_idx} has no attention, nothing to cache")
        pos = self.end.get(layer_idx, self.start)
        end = self.cache._check_end(layer_idx, pos + k.shape[2])
        rows = slice(self.index, self.index + 1)
        keys[rows, :, pos:end].copy_(k)
        values[rows, :, pos:end].copy_(v)
        self.end[layer_idx] = end
        return keys[rows, :, self.start:end], values[rows, :, self.start:end]
