"""Multi-head latent attention (DeepSeek-V2/V3 style) for the decode benchmark's MLA arm.

Per token the layer caches only a compressed latent c_KV (r_KV numbers, after an RMSNorm) and one
rotary key k_rope (d_rope numbers) shared by all heads: r_KV + d_rope numbers per token per layer,
i.e. a grouping factor g = 2 d_attn / (r_KV + d_rope) (arXiv 2602.06471 Table 12: 3072 / 288 = 10.67).

    q_h      = [q_nope_h ; RoPE(q_rope_h)]            from W_q x       (head_dim + d_rope per head)
    c, k_r   = RMSNorm(W_dkv x)[:r_KV], RoPE(W_dkv x)[r_KV:]
    k_h      = [W_uk_h c ; k_r],  v_h = W_uv_h c                           (W_kv_b = [W_uk; W_uv])
    score_h  = q_h . k_h / sqrt(head_dim + d_rope)

Two equivalent evaluation orders:
- full (no cache): up-project c to per-head keys and values, then ordinary causal attention;
- absorbed (with a cache): fold W_uk into the query, q_lat_h = W_uk_h^T q_nope_h, so that
  score_h = [q_lat_h ; q_rope_h] . [c ; k_r]; attention is then one-KV-head attention over the
  cached latent rows with value c, and W_uv is applied to the r_KV-wide output afterwards. The
  cache is read once per step whatever the number of heads. At a single decode token the h heads
  are laid out as h queries of one head, so no mask is needed.

The module is for inference benchmarks (it trains, but nothing in the pipeline trains it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from shapelm.model.cache import MLASpec
from shapelm.model.config import AttentionShape, ModelConfig
from shapelm.model.rope import apply_rope
from shapelm.model.layers import RMSNorm


@dataclass(frozen=True)
class MLAShape:
    """Shape of an MLA layer. `head_dim` is the *rotary* width d_rope: it is what the decoder reads
    (`block.attn.shape.head_dim`) to build the RoPE tables it passes to attention."""

    n_heads: int
    d_nope: int  # per-head non-rotary query/key width (the conventional head_dim)
    d_v: int  # per-head value width
    r_kv: int
    d_rope: int

    @property
    def head_dim(self) -> int:
        return self.d_rope

    @property
    def d_attn(self) -> int:
        return self.n_heads * self.d_v

    @property
    def cache_width(self) -> int:
        return self.r_kv + self.d_rope

    @property
    def group_factor(self) -> float:
        return 2 * self.d_attn / self.cache_width


class MLAAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, shape: AttentionShape, layer_idx: int, mla: MLASpec) -> None:
        super().__init__()
        self.shape = MLAShape(shape.n_heads, shape.head_dim, shape.head_dim, mla.r_kv, mla.d_rope)
        self.layer_idx = layer_idx
        s, d = self.shape, cfg.d_model
        self.q_proj = nn.Linear(d, s.n_heads * (s.d_nope + s.d_rope), bias=False)
        self.kv_a_proj = nn.Linear(d, s.r_kv + s.d_rope, bias=False)
        self.kv_norm = RMSNorm(s.r_kv, cfg.norm_eps)
        self.kv_b_proj = nn.Linear(s.r_kv, s.n_heads * (s.d_nope + s.d_v), bias=False)
        self.o_proj = nn.Linear(s.d_attn, d, bias=False)
        self.scale = (s.d_nope + s.d_rope) ** -0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache=None) -> torch.Tensor:
        b, seq, _ = x.shape
        s = self.shape
        q = self.q_proj(x).view(b, seq, s.n_heads, s.d_nope + s.d_rope).transpose(1, 2)
        q_nope, q_rope = q.split([s.d_nope, s.d_rope], dim=-1)
        q_rope = apply_rope(q_rope, cos, sin)
        kv = self.kv_a_proj(x)
        c = self.kv_norm(kv[..., : s.r_kv]).unsqueeze(1)  # [b, 1, seq, r_kv]
        k_rope = apply_rope(kv[..., s.r_kv :].unsqueeze(1), cos, sin)  # [b, 1, seq, d_rope]
        if kv_cache is None:
            out = self._full(q_nope, q_rope, c, k_rope)
        else:
            k_all, _ = kv_cache.update(self.layer_idx, c, k_rope)
            out = self._absorbed(q_nope, q_rope, k_all)
        return self.o_proj(out.transpose(1, 2).reshape(b, seq, s.d_attn))

    def _w_uk_uv(self) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.shape
        w = self.kv_b_proj.weight.view(s.n_heads, s.d_nope + s.d_v, s.r_kv)
        return w[:, : s.d_nope], w[:, s.d_nope :]  # [h, d_nope, r], [h, d_v, r]

    def _full(self, q_nope, q_rope, c, k_rope) -> torch.Tensor:
        """Up-projected per-head keys/values; ordinary causal attention."""
        s = self.shape
        b, _, seq, _ = c.shape
        kv = self.kv_b_proj(c.squeeze(1)).view(b, seq, s.n_heads, s.d_nope + s.d_v).transpose(1, 2)
        k_nope, v = kv.split([s.d_nope, s.d_v], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(b, s.n_heads, seq, s.d_rope)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=seq > 1, scale=self.scale)

    def _absorbed(self, q_nope, q_rope, k_all) -> torch.Tensor:
        """Attention over cached latent rows [c ; k_rope] (key) and c (value)."""
        s = self.shape
        b, h, seq, _ = q_nope.shape
        w_uk, w_uv = self._w_uk_uv()
        q_lat = torch.einsum("bhsd,hdr->bhsr", q_nope, w_uk)
        q = torch.cat([q_lat, q_rope], dim=-1)  # [b, h, seq, r + d_rope]
        total = k_all.shape[2]
        past = total - seq
        # The value rows are the first r_KV columns of the key rows: attend with the whole latent
        # row as the value (one fused kernel with equal q/k/v widths) and drop the rope columns.
        if seq == 1:  # heads as the queries of one KV head: no mask, the cache is read once
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k_all, k_all, scale=self.scale)
            o = o.transpose(1, 2)  # [b, h, 1, r + d_rope]
        else:
            idx = torch.arange(seq, device=q.device)
            mask = torch.ones(seq, total, dtype=torch.bool, device=q.device)
            mask[:, past:] = idx[:, None] >= idx[None, :]
            kv = k_all.expand(b, h, total, -1)
            o = F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, scale=self.scale)
        o = o[..., : s.r_kv]
        return torch.einsum("bhsr,hvr->bhsv", o, w_uv)
