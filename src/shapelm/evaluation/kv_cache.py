"""A simple preallocated KV cache implementing `shapelm.model.transformer.KVCache`.

One buffer pair per attention layer, shaped ``[batch, n_kv_heads, max_len, head_dim]`` (each
layer keeps its own shape, so hourglass / per-layer attention widths work). ``update`` writes the
new keys and values at the layer's current length and returns views of everything so far; the
length of each layer advances on its own, so one forward pass = one call per attention layer.
"""

from __future__ import annotations

import torch

from shapelm.errors import ShapelmError
from shapelm.model.config import ModelConfig


class StaticKVCache:
    def __init__(
        self,
        config: ModelConfig,
        batch_size: int,
        max_len: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.batch_size = batch_size
        self.max_len = max_len
        self.keys: list[torch.Tensor | None] = []
        self.values: list[torch.Tensor | None] = []
        for layer in config.layers:
            attn = layer.attention
            if attn is None:
                self.keys.append(None)
                self.values.append(None)
                continue
            shape = (batch_size, attn.n_kv_heads, max_len, attn.head_dim)
            self.keys.append(torch.zeros(shape, device=device, dtype=dtype))
            self.values.append(torch.zeros(shape, device=device, dtype=dtype))
        self.lengths = [0] * len(config.layers)
        # Hope-attention's per-sequence CMS state, {(layer, level): FastWeights} (shapelm.model.hope)
        self.fast_weights: dict = {}

    @property
    def seq_len(self) -> int:
        """Tokens cached so far (the length of the attention layers, all equal between calls)."""
        return max(self.lengths) if self.lengths else 0

    def reset(self) -> None:
        self.lengths = [0] * len(self.lengths)
        self.fast_weights.clear()

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        buf_k, buf_v = self.keys[layer_idx], self.values[layer_idx]
        if buf_k is None:
            raise ShapelmError(f"KV cache: layer {layer_idx} has no attention")
        start = self.lengths[layer_idx]
        end = start + k.shape[2]
        if end > self.max_len:
            raise ShapelmError(f"KV cache full: {end} tokens > max_len {self.max_len}")
        if k.shape[0] != self.batch_size:
            raise ShapelmError(f"KV cache: batch {k.shape[0]} != allocated {self.batch_size}")
        buf_k[:, :, start:end] = k
        buf_v[:, :, start:end] = v
        self.lengths[layer_idx] = end
        return buf_k[:, :, :end], buf_v[:, :, :end]
