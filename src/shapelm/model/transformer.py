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

This file is the model itself: the decoder block, the Transformer around it and its loss. The
shared blocks (RMSNorm, attention, SwiGLU, the KV-cache protocol) are in `shapelm.model.layers`,
the Titans layer beside its memory in `shapelm.model.titans`, the CMS levels in
`shapelm.model.hope`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from shapelm.config import RECOMPUTE_MODES
from shapelm.model.config import LayerShape, ModelConfig
from shapelm.model.hope import CMSLevel
from shapelm.model.layers import Attention, KVCache, RMSNorm, SwiGLU, recomputed, resize
from shapelm.model.rope import rope_cos_sin, rope_inv_freq
from shapelm.model.titans import NeuralMemory, Titans


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


#: A layer's mixer name -> the module that mixes its tokens: forward(x, cos, sin, cache).
#: Hope-attention mixes with plain attention; its continuum memory is the FFN (`_ffn`).
MIXER_MODULES = {"attention": Attention, "gated_attention": Attention, "titans": Titans, "hope_attention": Attention}


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
            return recomputed(self._forward, x, cos, sin)
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
                x = x + recomputed(self._ffn_branch, norm, mlp, x)
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
        # the embeddings' widths: d_model, or a variable-width model's first / last layer's
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.input_width)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.final_norm_width, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.output_width, cfg.vocab_size, bias=False)
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
        # a variable-width stream as it leaves the embedding and each layer: where "move_up" (and
        # the widening to the unembedding) takes added channels from, newest first
        earlier = [x] if self.config.variable_width else None
        move_up = earlier is not None and self.config.resize == "move_up"
        for i in range(n * self.config.loops):  # looped blocks: the stored layers, round after round
            block = self.layers[i % n]
            cache = kv_cache if kv_cache is None or i < n else _RoundCache(kv_cache, i - i % n)
            cos = sin = None
            if block.attn is not None:
                hd = block.attn.shape.head_dim
                if hd not in rope_tables:
                    rope_tables[hd] = self._cos_sin(hd, positions, x.dtype)
                cos, sin = rope_tables[hd]
            x = block(resize(x, block.width, earlier[::-1] if move_up else ()), cos, sin, cache)
            if earlier is not None:
                earlier.append(x)
        return resize(self.norm(x), self.config.output_width, earlier[::-1] if earlier else ())

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
    # Without gradients there is nothing to recompute; torch's `checkpoint` would only load
    # torch._dynamo (about a second of every evaluation process's start) to run the same sums.
    recompute = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    for start in range(0, h.shape[0], chunk):
        sl = slice(start, start + chunk)
        if recompute:
            ce, z = checkpoint(_chunk_sums, h[sl], weight, labels[sl], use_reentrant=False)
        else:
            ce, z = _chunk_sums(h[sl], weight, labels[sl])
        ce_total, z_total = ce_total + ce, z_total + z
    return ce_total, z_total, (labels != -100).sum()


def build_model(cfg: ModelConfig, device: str | torch.device = "cpu") -> Transformer:
    """Build on any device; on "meta" nothing is allocated (8B costs nothing)."""
    if torch.device(device).type == "meta":
        with torch.device("meta"), _skip_init():
            return Transformer(cfg)
    with torch.device(device):
        return Transformer(cfg)


def materialize(model: nn.Module, device: str | torch.device) -> nn.Module:
    """Allocate a meta-built module's tensors on `device`, uninitialised, as `Module.to_empty`
    does (same shapes, strides and dtypes). `to_empty`'s `empty_like` of a meta tensor runs torch's
    Python reference, whose first call imports sympy: 0.3 s of every trainer's start for nothing.
    (FSDP's sharded parameters are DTensors, which load sympy anyway: they use `to_empty`.)"""
    return model._apply(lambda t: torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device))


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
