"""The transformers peer: the same conventional model as a `LlamaForCausalLM`, decoded with
transformers' own `StaticCache`, to check shapelm's decode path is not slower.

`to_llama(model)` copies the weights of a shapelm `Transformer` whose shape LLaMA can express
(uniform layers, one SwiGLU per layer, pre-norm, no QK-norm, no YaRN), with the one shapelm ->
transformers mapping, `shapelm export-hf`'s (`shapelm.evaluation.export_hf`):

    embed_tokens -> model.embed_tokens          layers.i.attn_norm  -> input_layernorm
    layers.i.attn.{q,k,v,o}_proj -> self_attn   layers.i.mlp_norms.0 -> post_attention_layernorm
    layers.i.mlps.0.{gate,up,down}_proj -> mlp  norm -> model.norm, lm_head -> lm_head
"""

from __future__ import annotations

import inspect

import torch

from shapelm.errors import ShapelmError
from shapelm.evaluation.export_hf import choose_architecture, stock_config, stock_state_dict
from shapelm.model.transformer import Transformer


def llama_config(cfg):
    """transformers' `LlamaConfig` of a shapelm config LLaMA can express: the `shapelm export-hf`
    mapping (`stock_config`), refused with the reason for any other shape."""
    mixers = sorted({layer.mixer for layer in cfg.layers} - {"attention", "none"})
    if mixers:
        raise ShapelmError(f"to_llama: LLaMA attention has no output gate or memory; "
                           f"the config has {', '.join(mixers)} layers")
    if cfg.rope_scaling:  # the peer recomputes default RoPE frequencies (to_llama)
        raise ShapelmError("to_llama: the decode peer has no rope_scaling (YaRN)")
    if choose_architecture(cfg) != "LlamaForCausalLM":
        raise ShapelmError("to_llama: LLaMA needs every layer the same shape (attention and exactly one "
                           "FFN), qk_norm False and norm_placement 'pre'")
    return stock_config(cfg, "LlamaForCausalLM")


def to_llama(model: Transformer, attn_implementation: str = "sdpa"):
    """A `LlamaForCausalLM` with `model`'s weights (same device and dtype)."""
    from transformers import LlamaForCausalLM

    hf_cfg = llama_config(model.config)
    state = stock_state_dict({k: v.detach() for k, v in model.state_dict().items()}, "LlamaForCausalLM")
    p = next(model.parameters())
    with torch.device("meta"):
        hf = LlamaForCausalLM(hf_cfg)
    hf = hf.to(dtype=p.dtype).to_empty(device=p.device)
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    if missing or unexpected:
        raise ShapelmError(f"to_llama: missing {missing[:5]}, unexpected {unexpected[:5]}")
    # Non-persistent buffers (RoPE inv_freq) were not materialised by to_empty: recompute them.
    for module in hf.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            inv_freq, scaling = module.compute_default_rope_parameters(module.config)
            module.inv_freq = inv_freq.to(p.device)
            module.original_inv_freq = inv_freq.clone().to(p.device)
            module.attention_scaling = scaling
    hf.config._attn_implementation = attn_implementation
    return hf.eval()


def hf_decode_step(hf, length: int, seed: int = 0):
    """A callable doing one-token decode at position length - 1 against a transformers
    `StaticCache` of `length` slots filled with random keys/values (the protocol of
    `shapelm.decode.bench`: rewind, decode one token into the last slot)."""
    from transformers import StaticCache

    p = next(hf.parameters())
    cfg = hf.config
    cache = StaticCache(config=cfg, max_cache_len=length)
    cache.early_initialization(1, cfg.num_key_value_heads, cfg.head_dim, p.dtype, p.device)
    gen = torch.Generator(device=p.device).manual_seed(seed)
    for layer in cache.layers:
        layer.keys.normal_(generator=gen)
        layer.values.normal_(generator=gen)
    token = torch.randint(0, cfg.vocab_size, (1, 1), device=p.device)
    pos = torch.tensor([length - 1], device=p.device)
    # transformers 5.x renamed `past_key_values` to `cache` (the old name warns until 5.40).
    cache_kw = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"

    def step():
        for layer in cache.layers:
            layer.cumulative_length.fill_(length - 1)
        return hf(input_ids=token, cache_position=pos, position_ids=pos[None], use_cache=True,
                  **{cache_kw: cache}).logits

    return step
