"""The blocks every layer of `shapelm.model.transformer` is built from: RMSNorm, attention (GQA,
optional QK-norm and output gate, sliding window, persistent tokens), the SwiGLU sub-MLP, the
KV-cache protocol attention reads, and the parameter-free resize of a variable-width residual
stream. No block knows the layer it sits in beyond its shape; `recomputed` is the one place
activation checkpointing of a sub-step is spelled.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from shapelm.model.config import LayerShape, ModelConfig
from shapelm.model.rope import apply_rope


def resize(x: torch.Tensor, width: int, earlier: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """The parameter-free resize of a variable-width residual stream (arXiv 2606.18246's
    `expand_method`): keep the first `width` channels, or widen. `earlier` empty: zero-pad (their
    "zero"). Else the stream's earlier states, newest first (their "move_up"): each added channel
    is taken from the newest earlier state that has it, zeros where none has."""
    d = x.shape[-1]
    if d >= width:
        return x if d == width else x[..., :width]
    parts, filled = [x], d
    for state in earlier:
        if state.shape[-1] > filled:
            end = min(state.shape[-1], width)
            parts.append(state[..., filled:end])
            filled = end
            if filled == width:
                break
    if len(parts) == 1:
        return F.pad(x, (0, width - d))
    if filled < width:
        parts.append(x.new_zeros(*x.shape[:-1], width - filled))
    return torch.cat(parts, dim=-1)


def recomputed(fn, *args):
    """fn(*args), its intermediates recomputed in backward rather than saved."""
    if not torch.is_grad_enabled():
        return fn(*args)
    return checkpoint(fn, *args, use_reentrant=False)


class KVCache(Protocol):
    """What attention needs from a cache; `shapelm.decode` provides a preallocated one. A cache
    may also hold `key_mask` (bool [batch, capacity]): the keys each row may see when decoding,
    and `state` (a dict): the recurrent state of Titans memories (by layer) and Hope-attention's
    CMS levels (by (layer, level)), carried from one call to the next."""

    def update(
        self, layer_idx: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.recompute = False  # the fp32 intermediates cost ~3 fp32 copies of x per norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return recomputed(self._norm, x) if self.recompute else self._norm(x)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * self.weight.float()).to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerShape, layer_idx: int) -> None:
        super().__init__()
        shape = layer.attention
        self.shape = shape
        self.layer_idx = layer_idx
        d = cfg.d_model
        self.q_proj = nn.Linear(d, shape.d_attn, bias=False)
        self.k_proj = nn.Linear(d, shape.kv_width, bias=False)
        self.v_proj = nn.Linear(d, shape.kv_width, bias=False)
        self.o_proj = nn.Linear(shape.d_attn, d, bias=False)
        self.gate_proj = None
        if layer.gated:  # per token from the attention input, so a KV cache needs nothing more
            self.gate_proj = nn.Linear(d, shape.d_attn if layer.gate == "elementwise" else shape.n_heads, bias=False)
        self.window = layer.window  # sliding-window attention (Titans) or None
        # Titans' persistent memory: learned tokens, before the sequence and seen by every query;
        # input-independent, so they take no position (no RoPE) and need no cache
        self.persistent = nn.Embedding(layer.persistent_tokens, d) if layer.persistent_tokens else None
        self.q_norm = RMSNorm(shape.d_attn, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(shape.kv_width, cfg.norm_eps) if cfg.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: KVCache | None = None,
    ) -> torch.Tensor:
        batch, seq, _ = x.shape
        s = self.shape
        q, k, v = self.project(x, cos, sin)
        past = 0
        if kv_cache is not None:
            k, v = kv_cache.update(self.layer_idx, k, v)
            past = k.shape[2] - seq
        if self.window is not None:  # query i (at past + i) sees keys j with 0 <= past + i - j < window
            rel = torch.arange(past, past + seq, device=q.device)[:, None] - torch.arange(past + seq, device=q.device)
            mask = (rel >= 0) & (rel < self.window)
            key_mask = getattr(kv_cache, "key_mask", None)
            if key_mask is not None:
                mask = mask & key_mask[:, None, None, : past + seq]
            if self.persistent is not None:
                k, v, mask = self._with_persistent(k, v, mask)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=s.group_size > 1)
        elif past == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=seq > 1, enable_gqa=s.group_size > 1)
        else:
            if seq > 1:  # new queries see the whole past and the causal part of themselves:
                # (imported here: the module imports torch._dynamo, seconds of start-up per rank)
                from torch.nn.attention.bias import causal_lower_right

                mask = causal_lower_right(seq, past + seq)  # is_causal with an offset, no dense mask
            else:  # one new token sees every cached key, but a ragged batch's left padding
                key_mask = getattr(kv_cache, "key_mask", None)
                mask = None if key_mask is None else key_mask[:, None, None, : past + seq]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=s.group_size > 1)
        out = out.transpose(1, 2)  # [batch, seq, heads, head_dim]
        if self.gate_proj is not None:  # elementwise: [.., heads, head_dim]; headwise: [.., heads, 1]
            out = out * torch.sigmoid(self.gate_proj(x)).view(batch, seq, s.n_heads, -1)
        return self.o_proj(out.reshape(batch, seq, s.d_attn))


    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q [B, H, S, hd], k, v [B, H_kv, S, hd]: projected, QK-normed, rotated."""
        batch, seq, _ = x.shape
        s = self.shape
        q = self.q_proj(x)
        if self.q_norm is not None:
            q = self.q_norm(q)
        q = q.view(batch, seq, s.n_heads, s.head_dim).transpose(1, 2)
        return (apply_rope(q, cos, sin), *self.project_kv(x, cos, sin))

    def project_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """k, v [B, H_kv, S, hd]: projected, k normed and rotated."""
        batch, seq, _ = x.shape
        s = self.shape
        k, v = self.k_proj(x), self.v_proj(x)
        if self.k_norm is not None:
            k = self.k_norm(k)
        k = k.view(batch, seq, s.n_kv_heads, s.head_dim).transpose(1, 2)
        v = v.view(batch, seq, s.n_kv_heads, s.head_dim).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def _with_persistent(self, k, v, mask):
        """Keys, values and mask with the persistent tokens' in front, visible to every query."""
        s, p = self.shape, self.persistent.weight
        pk, pv = self.k_proj(p), self.v_proj(p)
        if self.k_norm is not None:
            pk = self.k_norm(pk)
        n = p.shape[0]
        pk = pk.view(1, n, s.n_kv_heads, s.head_dim).transpose(1, 2).to(k.dtype).expand(k.shape[0], -1, -1, -1)
        pv = pv.view(1, n, s.n_kv_heads, s.head_dim).transpose(1, 2).to(v.dtype).expand(v.shape[0], -1, -1, -1)
        seen = torch.ones(*mask.shape[:-1], n, dtype=torch.bool, device=mask.device)
        return torch.cat([pk, k], 2), torch.cat([pv, v], 2), torch.cat([seen, mask], -1)


class SwiGLU(nn.Module):
    """One sub-MLP: W_up(SiLU(W_gate x) * W_in x), d_model -> width -> d_model."""

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, width, bias=False)
        self.up_proj = nn.Linear(d_model, width, bias=False)
        self.down_proj = nn.Linear(width, d_model, bias=False)
        self.recompute = False  # SiLU(gate) is then rebuilt from gate in backward

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:  # stateless: no cache use
        gate, inner = self.gate_proj(x), self.up_proj(x)
        hidden = recomputed(_swiglu, gate, inner) if self.recompute else _swiglu(gate, inner)
        return self.down_proj(hidden)


def _swiglu(gate: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * inner
