"""A LLaMA/OLMo-2-style causal decoder in which every layer has its own shape.

    x = embed(tokens)
    for each layer:
        x = x + Attn(Norm(x))                      (skipped when the layer's mixer is "none")
        for each sub-MLP width w in the layer:     ([d_h] conventional, [d_h]*K hourglass)
            x = x + W_up(SiLU(W_gate Norm(x)) * W_in Norm(x))
    logits = lm_head(Norm(x))

With `norm_placement="reordered"` (OLMo-2) each residual branch is x + Norm(f(x)) instead.
Activation checkpointing (`set_recompute`) trades compute for memory per block: "full" keeps
only each block's input and recomputes the block in backward; "ffn" recomputes each sub-MLP
(its norm included); "selective" recomputes only the cheap elementwise work (the fp32 norms,
SiLU(gate) * in), never a matmul.
Attention projects d_model -> d_attn = n_heads * head_dim and back, so d_attn may differ from
d_model (hourglass attention). Gated attention (mixer "gated_attention", Qiu et al. 2025,
position G1) multiplies the SDPA output by sigmoid(W_gate Norm(x)) before the output projection,
one gate per channel ("elementwise") or per head ("headwise"). Titans (mixer "titans") pairs the
neural memory (shapelm.model.titans) with sliding-window attention that also attends to learned
persistent tokens: as a gate (MAG) y = Norm(SWA(x)) * sigmoid(Norm(Memory(x))) in place of the
attention branch, or as a layer (MAL) two residual sublayers, memory then attention.
Hope-attention (mixer "hope_attention", Behrouz et al. 2025c) keeps softmax attention and makes the layer's sub-MLPs a continuum memory system: each is
a `shapelm.model.hope.CMSLevel` whose weights are fast weights, updated in context every
cms_chunks[j] tokens (its state rides in the cache when decoding).
No biases; untied embeddings; optional QK-norm over the full q and k widths; init N(0, 0.02)
truncated at 3 sigma.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from shapelm.config import RECOMPUTE_MODES
from shapelm.model.config import TITANS_CONV_KERNEL, LayerShape, ModelConfig
from shapelm.model.hope import CMSLevel
from shapelm.model.rope import apply_rope, rope_cos_sin, rope_inv_freq
from shapelm.model.titans import NeuralMemory


def resize(x: torch.Tensor, width: int) -> torch.Tensor:
    """The parameter-free resize of a variable-width residual stream (arXiv 2606.18246's zero
    expansion): zero-pad the last axis up to `width`, or keep its first `width` channels."""
    d = x.shape[-1]
    if d == width:
        return x
    return F.pad(x, (0, width - d)) if d < width else x[..., :width]


def _recomputed(fn, *args):
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


class _RoundCache:
    """A KV cache as a later loop round of looped blocks sees it: layer i's keys go to the
    cache's layer offset + i (the cache holds one buffer per round of each layer)."""

    def __init__(self, cache: KVCache, offset: int) -> None:
        self.cache, self.offset = cache, offset

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor):
        return self.cache.update(self.offset + layer_idx, k, v)

    def __getattr__(self, key):  # key_mask and the rest: the cache's own
        return getattr(self.cache, key)


class ModelOutput(NamedTuple):
    logits: torch.Tensor | None
    loss: torch.Tensor | None  # cross-entropy + z-loss: what training minimises
    ce_loss: torch.Tensor | None
    z_loss: torch.Tensor | None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.recompute = False  # the fp32 intermediates cost ~3 fp32 copies of x per norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _recomputed(self._norm, x) if self.recompute else self._norm(x)

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


@dataclasses.dataclass
class SegmentState:
    """MAC's per-sequence state beside the memory's and the KV cache's (which holds the input
    tokens' keys): the open segment's keys and values of the retrieved tokens h ([B, H_kv, chunk,
    hd] each, filled up to the memory's position in the chunk) and the retrieval query's
    convolution tail."""

    k_h: torch.Tensor
    v_h: torch.Tensor
    conv_q: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k_h, self.v_h, self.conv_q))


class _LocalState:
    """A cache stand-in holding only recurrent state: MAC carries the memory across segments
    within one forward even without a decode cache."""

    def __init__(self) -> None:
        self.state: dict = {}


class Titans(nn.Module):
    """Titans' neural memory beside sliding-window attention (Behrouz et al. 2024, Section 4).

    MAG (memory as a gate, Section 4.2): o = Norm(SWA(x)) * sigmoid(Norm(Memory(x))), the two
    branches read the same (block-normalised) input and each output is normalised by its own
    learnable RMSNorm before the gate. MAL (memory as a layer, Section 4.3): the memory's output
    is what the attention reads, each with a residual connection ("in all blocks, we use
    residual connections", Section 4.4): x' = x + Memory(Norm(x)), x'' = x' + SWA(Norm(x'))
    (`residual`, which the block calls with its own pre-attention norm)."""

    def __init__(self, cfg: ModelConfig, layer: LayerShape, layer_idx: int) -> None:
        super().__init__()
        self.shape = layer.attention
        self.variant = layer.titans_variant
        s = layer.attention
        self.memory = NeuralMemory(cfg.d_model, s.n_heads, s.head_dim, layer.memory_hidden, layer.memory_chunk, layer_idx)
        self.attn = Attention(cfg, layer, layer_idx)
        if self.variant in ("mac", "mag"):
            self.attn_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
            self.memory_out_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        else:
            self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)  # the attention sublayer's pre-norm

    def forward(self, x, cos, sin, kv_cache=None):
        if self.variant == "mal":
            raise RuntimeError("Titans MAL is two residual sublayers: call `residual`")
        if self.variant == "mac":
            return self._mac(x, cos, sin, kv_cache)
        a, m = self.attn(x, cos, sin, kv_cache), self.memory(x, kv_cache)
        return self.attn_out_norm(a) * torch.sigmoid(self.memory_out_norm(m))

    def _mac(self, x, cos, sin, kv_cache=None):
        """MAC (Section 4.1), segments = the memory's chunks. For each segment, in order:
        h = M*(q) retrieved with the segment-start memory for every input token (no update);
        y = attention over [persistent tokens, h, segment], where token i sees h_j and x_j for
        j <= i of its segment only (a causal LM must not read the retrievals of later tokens,
        which the paper's equations leave open); the memory then learns from y and is read at y,
        o = Norm(y) * sigmoid(Norm(M(y))). The input tokens' keys go through the KV cache (a
        segment's are its last ones), the retrieved tokens' live in the segment state."""
        mem, attn, s = self.memory, self.attn, self.shape
        b, t, _ = x.shape
        cache = kv_cache if kv_cache is not None else _LocalState()
        idx = mem.layer_idx
        seg = cache.state.get((idx, "segment"))
        if seg is None:
            buf = x.new_zeros(b, s.n_kv_heads, mem.chunk, s.head_dim)
            tail = torch.zeros(b, TITANS_CONV_KERNEL - 1, s.d_attn, device=x.device)
            seg = SegmentState(buf, buf.clone(), tail)
        outs, pos = [], 0
        while pos < t:
            state = cache.state.get(idx)
            offset = state.offset if state is not None else 0
            n = min(mem.chunk - offset, t - pos)
            xs, cs, sn = x[:, pos:pos + n], cos[..., pos:pos + n, :], sin[..., pos:pos + n, :]
            q_m, seg.conv_q = mem.query(xs, seg.conv_q)
            h = mem.output(xs, mem.retrieve(state, q_m))  # [B, n, d]
            q, k_x, v_x = attn.project(xs, cs, sn)
            k_h, v_h = attn.project_kv(h, cs, sn)
            end = offset + n
            seg.k_h[:, :, offset:end], seg.v_h[:, :, offset:end] = k_h.to(seg.k_h.dtype), v_h.to(seg.v_h.dtype)
            if kv_cache is not None:  # the segment's input keys so far: the cache's last `end`
                k_x, v_x = kv_cache.update(idx, k_x, v_x)
                k_x, v_x = k_x[:, :, k_x.shape[2] - end:], v_x[:, :, v_x.shape[2] - end:]
            keys = torch.cat([seg.k_h[:, :, :end], k_x], 2)
            values = torch.cat([seg.v_h[:, :, :end], v_x], 2)
            causal = torch.arange(offset, end, device=x.device)[:, None] >= torch.arange(end, device=x.device)
            mask = torch.cat([causal, causal], -1)
            if attn.persistent is not None:
                keys, values, mask = attn._with_persistent(keys, values, mask)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=s.group_size > 1)
            y = attn.o_proj(y.transpose(1, 2).reshape(b, n, s.d_attn))
            m = mem(y, cache)
            outs.append(self.attn_out_norm(y) * torch.sigmoid(self.memory_out_norm(m)))
            pos += n
        if kv_cache is not None:
            kv_cache.state[(idx, "segment")] = seg
        return torch.cat(outs, 1)

    def residual(self, x, norm: RMSNorm, reordered: bool, cos, sin, kv_cache=None):
        """MAL: the residual stream after the memory sublayer and then the attention sublayer."""
        if reordered:
            x = x + norm(self.memory(x, kv_cache))
            return x + self.norm(self.attn(x, cos, sin, kv_cache))
        x = x + self.memory(norm(x), kv_cache)
        return x + self.attn(self.norm(x), cos, sin, kv_cache)


#: A layer's mixer name -> the module that mixes its tokens: forward(x, cos, sin, cache).
#: Hope-attention mixes with plain attention; its continuum memory is the FFN (`_ffn`).
MIXER_MODULES = {"attention": Attention, "gated_attention": Attention, "titans": Titans, "hope_attention": Attention}


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
        hidden = _recomputed(_swiglu, gate, inner) if self.recompute else _swiglu(gate, inner)
        return self.down_proj(hidden)


def _swiglu(gate: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * inner


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        shape = cfg.layers[layer_idx]
        self.width = cfg.width(layer_idx)
        if self.width != cfg.d_model:  # a variable-width layer: its modules see its own residual width
            cfg = dataclasses.replace(cfg, d_model=self.width)
        self.reordered = cfg.norm_placement == "reordered"
        self.attn = MIXER_MODULES[shape.mixer](cfg, shape, layer_idx) if shape.attention else None
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps) if shape.attention else None
        self.mlps = nn.ModuleList(_ffn(cfg, shape, layer_idx, j) for j in range(len(shape.ffn_widths)))
        self.mlp_norms = nn.ModuleList(RMSNorm(cfg.d_model, cfg.norm_eps) for _ in shape.ffn_widths)
        self.recompute = "none"

    def set_recompute(self, mode: str) -> None:
        if mode not in RECOMPUTE_MODES:
            raise ValueError(f"activation checkpointing must be one of {RECOMPUTE_MODES}, got {mode!r}")
        self.recompute = mode
        for module in self.modules():
            if isinstance(module, (RMSNorm, SwiGLU)):
                module.recompute = mode == "selective"

    def forward(self, x, cos, sin, kv_cache=None):
        if self.recompute == "full" and kv_cache is None:
            return _recomputed(self._forward, x, cos, sin)
        return self._forward(x, cos, sin, kv_cache)

    def _forward(self, x, cos, sin, kv_cache=None):
        if isinstance(self.attn, Titans) and self.attn.variant == "mal":
            x = self.attn.residual(x, self.attn_norm, self.reordered, cos, sin, kv_cache)
        elif self.attn is not None:
            if self.reordered:
                x = x + self.attn_norm(self.attn(x, cos, sin, kv_cache))
            else:
                x = x + self.attn(self.attn_norm(x), cos, sin, kv_cache)
        for norm, mlp in zip(self.mlp_norms, self.mlps):
            if self.recompute == "ffn" and kv_cache is None:
                x = x + _recomputed(self._ffn_branch, norm, mlp, x)
            else:
                x = x + self._ffn_branch(norm, mlp, x, kv_cache)
        return x

    def _ffn_branch(self, norm: RMSNorm, mlp: SwiGLU | CMSLevel, x: torch.Tensor, cache=None) -> torch.Tensor:
        return norm(mlp(x, cache)) if self.reordered else mlp(norm(x), cache)


def _ffn(cfg: ModelConfig, shape: LayerShape, layer_idx: int, j: int) -> SwiGLU | CMSLevel:
    """Sub-MLP j of a layer: a SwiGLU, or Hope-attention's CMS level j (fast weights)."""
    if not shape.hope:
        return SwiGLU(cfg.d_model, shape.ffn_widths[j])
    return CMSLevel(
        cfg.d_model, shape.ffn_widths[j], shape.cms_chunks[j], shape.cms_lr,
        shape.cms_momentum, shape.cms_decay, key=(layer_idx, j),
    )


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # inv_freq per (head_dim, device): made on the device once, never copied per forward
        self._rope: dict[tuple[int, torch.device], tuple[torch.Tensor, float]] = {}
        if not self.lm_head.weight.is_meta:  # meta tensors hold no values to initialise
            self.reset_parameters()

    def set_recompute(self, mode: str) -> None:
        """Activation checkpointing for every block: one of RECOMPUTE_MODES."""
        for block in self.layers:
            block.set_recompute(mode)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
            elif isinstance(module, NeuralMemory):
                module.reset_memory()

    def _cos_sin(self, head_dim: int, positions: torch.Tensor, dtype: torch.dtype):
        key = (head_dim, positions.device)
        if key not in self._rope:
            inv_freq, factor = rope_inv_freq(head_dim, self.config.rope_theta, self.config.rope_scaling)
            self._rope[key] = inv_freq.to(positions.device), factor
        inv_freq, factor = self._rope[key]
        return rope_cos_sin(positions, inv_freq, factor, dtype)

    def set_rope_scaling(self, scaling: dict | None) -> None:
        """Switch RoPE (e.g. to YaRN for context extension); the weights are unchanged."""
        self.config.rope_scaling = scaling
        self.config.validate()
        self._rope.clear()

    def hidden_states(
        self, input_ids: torch.Tensor, kv_cache: KVCache | None = None, start_pos: int = 0
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        positions = torch.arange(start_pos, start_pos + input_ids.shape[1], device=input_ids.device)
        rope_tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        n = len(self.layers)
        for i in range(n * self.config.loops):  # looped blocks: the stored layers, round after round
            block = self.layers[i % n]
            cache = kv_cache if kv_cache is None or i < n else _RoundCache(kv_cache, i - i % n)
            cos = sin = None
            if block.attn is not None:
                hd = block.attn.shape.head_dim
                if hd not in rope_tables:
                    rope_tables[hd] = self._cos_sin(hd, positions, x.dtype)
                cos, sin = rope_tables[hd]
            x = block(resize(x, block.width), cos, sin, cache)
        return self.norm(resize(x, self.config.d_model))

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        z_loss_multiplier: float = 0.0,
        return_logits: bool = True,
        loss_chunk_tokens: int | None = None,
        kv_cache: KVCache | None = None,
        start_pos: int = 0,
    ) -> ModelOutput:
        """`labels` are already aligned with `input_ids` positions (-100 = ignored).

        With `loss_chunk_tokens`, the loss is computed over the vocabulary in token chunks with
        activation checkpointing, so long sequences never hold [tokens, vocab] logits at once.
        """
        h = self.hidden_states(input_ids, kv_cache, start_pos)
        if labels is None:
            return ModelOutput(self.lm_head(h), None, None, None)
        if loss_chunk_tokens and not return_logits:
            ce_sum, z_sum, count = _chunked_loss_sums(
                h.flatten(0, 1), self.lm_head.weight, labels.flatten(), loss_chunk_tokens
            )
            logits = None
        else:
            logits = self.lm_head(h)
            ce_sum, z_sum, count = _loss_sums(logits.flatten(0, 1), labels.flatten())
        count = count.clamp(min=1)
        ce, z = ce_sum / count, z_sum / count
        loss = ce + z_loss_multiplier * z if z_loss_multiplier else ce
        return ModelOutput(logits if return_logits else None, loss, ce, z)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.embed_tokens.weight.numel() + self.lm_head.weight.numel()
        return total


def _loss_sums(logits: torch.Tensor, labels: torch.Tensor):
    """Summed cross-entropy and summed z = logsumexp^2 over non-ignored tokens, and the count."""
    logits = logits.float()
    valid = labels != -100
    # One fused log_softmax serves both terms: ce = -logp[label], and since logp = logits - lse,
    # lse = logits[:, 0] - logp[:, 0] (z = lse^2) at no extra pass over the vocabulary.
    logp = F.log_softmax(logits, dim=-1)
    ce = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    lse = logits[..., 0] - logp[..., 0]
    return (ce * valid).sum(), (lse.pow(2) * valid).sum(), valid.sum()


def _chunk_sums(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor):
    ce, z, _ = _loss_sums(h @ weight.t(), labels)
    return ce, z


def _chunked_loss_sums(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int):
    ce_total = h.new_zeros((), dtype=torch.float32)
    z_total = h.new_zeros((), dtype=torch.float32)
    for start in range(0, h.shape[0], chunk):
        sl = slice(start, start + chunk)
        ce, z = checkpoint(_chunk_sums, h[sl], weight, labels[sl], use_reentrant=False)
        ce_total, z_total = ce_total + ce, z_total + z
    return ce_total, z_total, (labels != -100).sum()


def build_model(cfg: ModelConfig, device: str | torch.device = "cpu") -> Transformer:
    """Build on any device; on "meta" nothing is allocated (8B costs nothing)."""
    if torch.device(device).type == "meta":
        with torch.device("meta"), _skip_init():
            return Transformer(cfg)
    with torch.device(device):
        return Transformer(cfg)


@contextlib.contextmanager
def _skip_init():
    """torch's default initialisers on meta tensors load its decomposition machinery (tens of
    seconds on first use) to produce values that do not exist; skip them while building on meta."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "ones_", "zeros_")
    saved = {name: getattr(nn.init, name) for name in names}
    try:
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)
