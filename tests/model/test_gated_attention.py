"""Gated attention (Qiu et al. 2025, arXiv 2505.06708, gate position G1): the layer's `mixer`.

The model's gated layer against an independent implementation written here (float32 allclose),
accounting against the built module, configs without a mixer keep their fingerprints, and
cached decoding (the gate is per token: the KV cache is unchanged) equals the full forward.
"""

import math

import pytest
import torch
from model_helpers import greedy_cached_and_full, prefill_then_step_logits, randomized  # norm weights away from ones, so misplaced norms show

from shapelm.shapes.accounting import (
    flops_per_token,
    gate_width,
    kv_cache_bytes_per_token,
    param_counts,
)
from shapelm.model.cache import MLASpec
from shapelm.decode.model import build_decode_model
from shapelm.errors import ConfigError, ShapelmError
from shapelm.model import ModelConfig, build_model
from shapelm.model.builders import build_model_config

pytestmark = pytest.mark.usefixtures("one_thread")

V = 97
GQA = {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}


def gated_cfg(gate="elementwise", qk_norm=True, **kw):
    layers = [
        {"attention": GQA, "ffn_widths": [64], "mixer": "gated_attention", "gate": gate},
        {"attention": None, "ffn_widths": [32]},
        {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 12}, "ffn_widths": [48]},
    ]
    return ModelConfig(vocab_size=V, d_model=32, max_seq_len=64, layers=layers, qk_norm=qk_norm, **kw)


def reference_gated_attention(attn, x, theta):
    """Written from the paper, not from shapelm: Y = softmax(QK^T/sqrt(d_k) + causal) V per head,
    Y' = Y * sigmoid(X W_theta) (elementwise: one gate per channel; headwise: one per head),
    output = Y' W_O. QK-norm over the full q/k widths and half-split RoPE as the model uses."""
    b, s, _ = x.shape
    h, kvh, hd = attn.shape.n_heads, attn.shape.n_kv_heads, attn.shape.head_dim

    def rms(t, w):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    q, k, v = x @ attn.q_proj.weight.T, x @ attn.k_proj.weight.T, x @ attn.v_proj.weight.T
    q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
    q, k, v = (t.view(b, s, -1, hd).permute(0, 2, 1, 3) for t in (q, k, v))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), theta ** (-torch.arange(0, hd, 2) / hd))
    cos, sin = torch.cos(freqs).float(), torch.sin(freqs).float()

    def rope(t):
        a, c = t[..., : hd // 2], t[..., hd // 2:]
        return torch.cat((a * cos - c * sin, c * cos + a * sin), dim=-1)

    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).permute(0, 2, 1, 3)  # [b, s, h, hd]
    gate = torch.sigmoid(x @ attn.gate_proj.weight.T).view(b, s, h, -1)  # hd or 1 per head
    return (y * gate).reshape(b, s, h * hd) @ attn.o_proj.weight.T


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_gated_attention_matches_independent_implementation(gate):
    model = randomized(gated_cfg(gate))
    attn = model.layers[0].attn
    assert attn.gate_proj.weight.shape == ((32, 32) if gate == "elementwise" else (4, 32))
    x = torch.randn(2, 13, 32, generator=torch.Generator().manual_seed(1))
    cos, sin = model._cos_sin(8, torch.arange(13), torch.float32)
    with torch.no_grad():
        got = attn(x, cos, sin)
        ref = reference_gated_attention(attn, x, model.config.rope_theta)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        attn.gate_proj.weight.zero_()  # sigmoid(0) = 1/2: the gate really scales the output
        halved = attn(x, cos, sin)
        attn.gate_proj = None
        ungated = attn(x, cos, sin)
    torch.testing.assert_close(2 * halved, ungated)
    assert not torch.allclose(got, ungated, atol=1e-3)


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_accounting_counts_the_gate(gate):
    cfg = gated_cfg(gate)
    model = build_model(cfg)
    counts = param_counts(cfg)
    assert model.num_parameters() == counts.total
    assert model.num_parameters(exclude_embeddings=True) == counts.non_embedding
    gate_params = model.layers[0].attn.gate_proj.weight.numel()
    assert gate_params == 32 * gate_width(cfg.layers[0]) == 32 * (32 if gate == "elementwise" else 4)
    plain = ModelConfig(**{**cfg.to_dict(), "layers": [
        {k: v for k, v in layer.to_dict().items() if k not in ("mixer", "gate")} for layer in cfg.layers]})
    assert param_counts(cfg).attention - param_counts(plain).attention == gate_params
    # a matmul is 2 FLOPs per weight per token; the sigmoid and product 5 per gated channel
    extra = flops_per_token(cfg, 64).forward - flops_per_token(plain, 64).forward
    assert extra == 2 * gate_params + 5 * 32
    assert kv_cache_bytes_per_token(cfg) == kv_cache_bytes_per_token(plain)  # the gate caches nothing


def test_configs_without_mixer_keep_their_fingerprint():
    """The value the config had before mixers existed (computed with the previous config.py)."""
    cfg = ModelConfig(vocab_size=97, d_model=32, layers=[
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8}, "ffn_widths": [64]},
        {"attention": None, "ffn_widths": [16, 16]}])
    assert [layer.mixer for layer in cfg.layers] == ["attention", "none"]
    assert all(set(layer) == {"attention", "ffn_widths"} for layer in cfg.to_dict()["layers"])
    assert cfg.fingerprint() == "bd109da7299f435a"
    gated = gated_cfg()
    assert ModelConfig.from_dict(gated.to_dict()) == gated
    assert gated.fingerprint() != gated_cfg("headwise").fingerprint()


def test_builders_take_mixer_for_every_attention_layer():
    arch = {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4, "vocab_size": V}
    cfg = build_model_config({**arch, "mixer": "gated_attention"})
    assert [(layer.mixer, layer.gate) for layer in cfg.layers] == [("gated_attention", "elementwise")] * 2
    cfg = build_model_config({**arch, "mixer": "gated_attention", "gate": "headwise"})
    assert {layer.gate for layer in cfg.layers} == {"headwise"}
    with pytest.raises(ConfigError, match=r"arch\.mixer must be one of"):
        build_model_config({**arch, "mixer": "gated"})
    with pytest.raises(ConfigError, match=r"arch\.gate applies only to mixer: gated_attention"):
        build_model_config({**arch, "gate": "headwise"})


@pytest.mark.parametrize("layer, message", [
    ({"attention": GQA, "ffn_widths": [8], "mixer": "linear"}, r"layers\[0\]\.mixer must be one of"),
    ({"attention": None, "ffn_widths": [8], "mixer": "gated_attention"}, "needs an attention shape"),
    ({"attention": GQA, "ffn_widths": [8], "mixer": "none"}, "takes no attention shape"),
    ({"attention": GQA, "ffn_widths": [8], "gate": "headwise"}, "gate applies only to mixer 'gated_attention'"),
    ({"attention": GQA, "ffn_widths": [8], "mixer": "gated_attention", "gate": "channel"},
     r"layers\[0\]\.gate must be one of"),
])
def test_bad_mixer_is_a_config_error(layer, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(vocab_size=V, d_model=32, layers=[layer])


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_cached_generation_equals_uncached_forward(gate):
    model = randomized(gated_cfg(gate))
    prompt = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(2))
    cached, full = greedy_cached_and_full(model, prompt)
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)


def test_decode_benchmark_model_with_gate_decodes_like_full_forward():
    model = build_decode_model(gated_cfg(), "native", seed=3)
    assert model.layers[0].attn.gate_proj is not None
    ids = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(0))
    stepped, full = prefill_then_step_logits(model, ids)
    torch.testing.assert_close(stepped, full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapelmError, match="would drop its output gate"):
        build_decode_model(gated_cfg(), "mla", mla=MLASpec(24, 8))


def test_paper_gated_attention_pairs_match_the_transformer_pairs():
    """Tapered Table 2's Gated Attention pairs: the Transformer pairs' d_model and recipe plus an
    elementwise gate in every layer, a narrower MLP paying for it (total within 2%); within each
    pair, parameters and FLOPs are equal."""
    from pathlib import Path

    from shapelm.plan.experiment import load_experiment

    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "paper.yaml")
    for scale in ("760m", "1300m"):
        pair = {}
        for variant in ("uniform", "cosine_1p5_0p5"):
            plain, gated = exp.run(f"tp{scale}_{variant}"), exp.run(f"tp{scale}_ga_{variant}")
            assert "tapered_table2" in gated["tables"] and gated["train"] == plain["train"]
            plain_cfg, gated_cfg_ = ModelConfig.from_dict(plain["model"]), ModelConfig.from_dict(gated["model"])
            assert {(layer.mixer, layer.gate) for layer in gated_cfg_.layers} == {("gated_attention", "elementwise")}
            gate_params = sum(gated_cfg_.d_model * gate_width(layer) for layer in gated_cfg_.layers)
            narrower = param_counts(plain_cfg).ffn - param_counts(gated_cfg_).ffn
            assert narrower > 0
            assert param_counts(gated_cfg_).total == param_counts(plain_cfg).total + gate_params - narrower
            assert param_counts(gated_cfg_).total == pytest.approx(param_counts(plain_cfg).total, rel=0.02)
            pair[variant] = (param_counts(gated_cfg_).total, flops_per_token(gated_cfg_, 4096).train)
        (p_uniform, f_uniform), (p_tapered, f_tapered) = pair["uniform"], pair["cosine_1p5_0p5"]
        assert p_tapered == pytest.approx(p_uniform, rel=1e-3) and f_tapered == pytest.approx(f_uniform, rel=1e-3)


def test_decode_llama_peer_refuses_a_gated_model():
    from shapelm.decode.hf import llama_config

    layer = {"attention": GQA, "ffn_widths": [64], "mixer": "gated_attention"}
    cfg = ModelConfig(vocab_size=V, d_model=32, layers=[layer] * 2, qk_norm=False)
    with pytest.raises(ShapelmError, match="no output gate"):
        llama_config(cfg)
