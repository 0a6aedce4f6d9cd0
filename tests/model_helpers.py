"""Model helpers shared by test modules (no tests here): tiny architectures, a model whose norm
weights are away from ones, token ids, and a `shapelm export-hf` round trip."""

import torch

from shapelm.evaluation.export_hf import export_hf
from shapelm.model import ModelConfig, build_model, save_pretrained

#: The vocabulary of the parity models.
V = 300


def tiny_arch(**overrides):
    arch = {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4,
            "vocab_size": 97, "max_seq_len": 64}
    arch.update(overrides)
    return arch


def cfg(layers=None, **kw):
    base = dict(vocab_size=V, d_model=32, max_seq_len=128,
                layers=layers or [{"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8},
                                   "ffn_widths": [64]}] * 2)
    base.update(kw)
    return ModelConfig(**base)


def randomized(config):
    """A model whose norm weights are not all ones (so misplaced norms would show)."""
    torch.manual_seed(0)
    m = build_model(config)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return m.eval()


def ids(seq=80, batch=2):
    return torch.randint(0, V, (batch, seq), generator=torch.Generator().manual_seed(1))


def export_and_load(tmp_path, model, name, **kw):
    from transformers import AutoModelForCausalLM

    save_pretrained(model, tmp_path / name / "final")
    info = export_hf(tmp_path / name, tmp_path / f"{name}_hf", **kw)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / f"{name}_hf", trust_remote_code=True,
                                              dtype=torch.float32).eval()
    return info, hf


def greedy_cached_and_full(model, prompt, steps=9, max_len=16):
    """Greedy decoding through the static KV cache, one token at a time after the prompt: the
    last-position logits of each step and the full forward's logits of the same tokens."""
    from shapelm.model.cache import StaticKVCache

    with torch.no_grad():
        cache = StaticKVCache(model.config, prompt.shape[0], max_len)  # the greedy generator's cache
        x, pos, cached = prompt, 0, []
        for _ in range(steps):
            logits = model(x, kv_cache=cache, start_pos=pos).logits
            pos += x.shape[1]
            cached.append(logits[:, -1])
            x = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([prompt, torch.stack([c.argmax(-1) for c in cached[:-1]], dim=1)], dim=1)
        full = model(tokens).logits[:, prompt.shape[1] - 1:]
    return torch.stack(cached, dim=1), full


def prefill_then_step_logits(model, tokens, prefix=4):
    """A decode model's logits for `tokens`: the prefix through a fresh cache, then one token a
    step; and its full forward's, to compare."""
    from shapelm.decode.model import make_cache

    b, t = tokens.shape
    with torch.no_grad():
        full = model(tokens).logits
        cache = make_cache(model, b, t)
        outs = [model(tokens[:, :prefix], kv_cache=cache, start_pos=0).logits]
        outs += [model(tokens[:, i:i + 1], kv_cache=cache, start_pos=i).logits for i in range(prefix, t)]
    return torch.cat(outs, dim=1), full


def assert_cached_decode_matches(model):
    """Greedy cached decoding's logits equal the full forward's (a 2 x 7 prompt, 9 steps)."""
    prompt = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(2))
    cached, full = greedy_cached_and_full(model, prompt)
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)


def assert_remote_export_exact(tmp_path, model, name):
    """`export-hf` with remote code, reloaded: the same logits to the last bit; returns the HF model."""
    info, hf = export_and_load(tmp_path, model, name)
    assert info["architecture"] == "ShapelmForCausalLM"
    x = ids()
    with torch.no_grad():
        assert (hf(x).logits - model(x).logits).abs().max().item() == 0.0
    return hf
