"""Decode models for one sequence mixer, built from a `ModelConfig`, and their KV memory model.

    cfg_m = mixer_config(cfg, "gqa", n_kv_heads=4)      # MHA/GQA: only the KV head count changes
    model = build_decode_model(cfg, "mla", mla=MLASpec(256, 32), device="cuda", dtype=torch.bfloat16)
    cache = make_cache(model, batch=1, max_len=S)

MHA and GQA use the model's own `Attention` (a `Transformer` of the mixer's config); MLA swaps
every attention module for `MLAAttention` of the same n_heads/head_dim. `predicted_kv_bytes`
is Eq. 8 of arXiv 2602.06471, M_KV = 2 beta L S d_attn / g, summed over attention layers.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from shapelm.shapes.accounting import kv_cache_bytes, mla_group_factor
from shapelm.model.cache import MLASpec, StaticKVCache
from shapelm.decode.mla import MLAAttention
from shapelm.errors import ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.model.titans import NeuralMemory
from shapelm.model.layers import RMSNorm
from shapelm.model.transformer import Transformer, build_model, materialize

try:  # skips torch's initialisers on meta tensors (values are drawn after materialising)
    from shapelm.model.transformer import _skip_init
except ImportError:  # pragma: no cover
    from contextlib import nullcontext as _skip_init

MIXERS = ("mha", "gqa", "mla", "native")  # native: the config's own attention shapes


def mixer_config(cfg: ModelConfig, mixer: str, n_kv_heads: int | None = None) -> ModelConfig:
    """The config whose attention shapes the mixer uses: MHA (kv heads = heads), GQA (n_kv_heads,
    default heads // 4 as Table 12's 16 over 4), MLA (unchanged: MLA replaces the module), native
    (unchanged: each layer's own heads / KV heads, e.g. a trained checkpoint's)."""
    if mixer not in MIXERS:
        raise ShapelmError(f"unknown mixer {mixer!r}; choose from {MIXERS}")
    if mixer in ("mla", "native"):
        return cfg
    layers = []
    for i, layer in enumerate(cfg.layers):
        attn = layer.attention
        if attn is not None:
            kv = attn.n_heads if mixer == "mha" else (n_kv_heads or max(1, attn.n_heads // 4))
            if attn.n_heads % kv:
                raise ShapelmError(f"layer {i}: n_kv_heads={kv} does not divide n_heads={attn.n_heads}")
            attn = dataclasses.replace(attn, n_kv_heads=kv)
        layers.append(dataclasses.replace(layer, attention=attn))
    return dataclasses.replace(cfg, layers=layers)


def build_decode_model(
    cfg: ModelConfig,
    mixer: str = "mha",
    *,
    n_kv_heads: int | None = None,
    mla: MLASpec | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> Transformer:
    """A randomly initialised (N(0, 0.02) weights, unit norms) model for `mixer`.

    Built on the meta device and materialised directly in `dtype` on `device`, so an 8B model
    never exists in float32. `model.mixer`/`model.mla` record the arm.
    """
    cfg = mixer_config(cfg, mixer, n_kv_heads)
    if mixer == "mla":
        if any(layer.mixer not in ("attention", "none") for layer in cfg.layers):
            raise ShapelmError("mixer 'mla' replaces each attention module and would drop its output gate "
                               "or memory: the config has gated_attention or titans layers")
        mla = mla or MLASpec()
    model = build_model(cfg, "meta")
    with torch.device("meta"), _skip_init():
        if mixer == "mla":
            for i, block in enumerate(model.layers):
                if block.attn is not None:
                    block.attn = MLAAttention(dataclasses.replace(cfg, d_model=cfg.width(i)), cfg.layers[i].attention, i, mla)
    model = materialize(model.to(dtype=dtype), device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, cfg.init_std, generator=gen)
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
            elif isinstance(module, NeuralMemory):
                module.reset_memory()
    model.mixer = mixer
    model.mla = mla if mixer == "mla" else None
    return model.eval()


def make_cache(model: Transformer, batch: int, max_len: int, dtype: torch.dtype | None = None) -> StaticKVCache:
    p = next(model.parameters())
    return StaticKVCache(
        model.config, batch, max_len, dtype=dtype or p.dtype, device=p.device, mla=getattr(model, "mla", None)
    )


def group_factor(cfg: ModelConfig, mixer: str, mla: MLASpec | None = None) -> float:
    """g of the first attention layer (uniform in every benchmark shape)."""
    attn = next(layer.attention for layer in cfg.layers if layer.attention)
    if mixer == "mla":
        mla = mla or MLASpec()
        return mla_group_factor(attn.d_attn, mla.r_kv, mla.d_rope)
    return attn.group_size if mixer != "native" else 2 * attn.d_attn / (2 * attn.kv_width)


def predicted_kv_bytes(
    cfg: ModelConfig, mixer: str, seq_len: int, bytes_per_element: int, batch: int = 1, mla: MLASpec | None = None
) -> int:
    """Eq. 8: M_KV = 2 beta S d_attn / g summed over attention layers (x batch).

    `cfg` is the mixer's config (`mixer_config`). For MHA/GQA this is `accounting.kv_cache_bytes`;
    for MLA g = mla_group_factor(d_attn, r_KV, d_rope). Rounded to whole bytes (g is a float).
    """
    if mixer != "mla":
        return batch * kv_cache_bytes(cfg, seq_len, bytes_per_element)
    mla = mla or MLASpec()
    total = 0.0
    for layer in cfg.layers:
        if layer.attention:
            d_attn = layer.attention.d_attn
            g = mla_group_factor(d_attn, mla.r_kv, mla.d_rope)
            total += 2 * bytes_per_element * seq_len * d_attn / g
    return batch * round(total)


def pin_rope_tables(model: Transformer, device: torch.device | str) -> None:
    """Run-time RoPE frequencies live on the model's device (no host copy per step; CUDA graphs)."""
    heads = {block.attn.shape.head_dim for block in model.layers if block.attn is not None}
    for hd in heads:  # the model caches inv_freq per (head_dim, device) on first use
        model._cos_sin(hd, torch.zeros(1, device=device), torch.float32)
