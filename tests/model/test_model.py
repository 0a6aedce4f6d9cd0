"""The decoder: shapes, parameter accounting vs the built module, masking, losses, errors."""

import time
from pathlib import Path

import pytest
import torch

from shapelm.shapes.accounting import param_counts
from shapelm.errors import ConfigError
from shapelm.model import ModelConfig, build_model, load_pretrained, save_pretrained
from shapelm.model.builders import build_model_config

from model_helpers import tiny_arch

SHAPES = {
    "conventional": tiny_arch(),
    "hourglass": tiny_arch(kind="hourglass", d_model=48, k=3, d_h=16, d_attn=32),
    "gqa": tiny_arch(n_heads=4, n_kv_heads=2),
    "no_attention": tiny_arch(attention=False),
    "reordered_no_qknorm": tiny_arch(norm_placement="reordered", qk_norm=False),
    "gated_attention": tiny_arch(n_heads=4, n_kv_heads=2, mixer="gated_attention"),
    "gated_attention_headwise": tiny_arch(mixer="gated_attention", gate="headwise"),
    "explicit": {"kind": "explicit", "d_model": 32, "vocab_size": 97,
                 "layers": [{"n_heads": 4, "head_dim": 8, "ffn": [64]},
                            {"attention": False, "ffn": [16, 16, 16]},
                            {"n_heads": 2, "n_kv_heads": 1, "head_dim": 12, "ffn": []}]},
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_analytic_count_equals_built_module(name):
    cfg = build_model_config(SHAPES[name])
    model = build_model(cfg)
    counts = param_counts(cfg)
    assert model.num_parameters() == counts.total
    assert model.num_parameters(exclude_embeddings=True) == counts.non_embedding
    out = model(torch.randint(0, 97, (2, 11)))
    assert out.logits.shape == (2, 11, 97)


def test_meta_build_of_8b_allocates_nothing_and_counts():
    cfg = build_model_config({"kind": "hourglass", "d_model": 4992, "n_layers": 22, "k": 4,
                              "d_h": 4544, "d_attn": 4096, "n_heads": 32})
    start = time.perf_counter()
    model = build_model(cfg, "meta")
    assert all(p.is_meta for p in model.parameters())
    assert model.num_parameters() == param_counts(cfg).total
    assert time.perf_counter() - start < 60  # generous: the benchmark measures the real time


def test_causality_future_tokens_do_not_change_past_logits():
    model = build_model(build_model_config(tiny_arch(kind="hourglass", k=2, d_h=16)))
    x = torch.randint(0, 97, (1, 12))
    y = x.clone()
    y[0, 8:] = (y[0, 8:] + 1) % 97
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_loss_ignores_masked_labels_and_chunked_loss_matches():
    model = build_model(build_model_config(tiny_arch()))
    x = torch.randint(0, 97, (2, 16))
    labels = torch.randint(0, 97, (2, 16))
    labels[0, :5] = -100
    full = model(x, labels, z_loss_multiplier=1e-2)
    chunked = model(x, labels, z_loss_multiplier=1e-2, return_logits=False, loss_chunk_tokens=7)
    torch.testing.assert_close(full.loss, chunked.loss)
    logits = full.logits.flatten(0, 1)
    valid = labels.flatten() != -100
    ce = torch.nn.functional.cross_entropy(logits[valid], labels.flatten()[valid])
    z = torch.logsumexp(logits[valid], -1).pow(2).mean()
    torch.testing.assert_close(full.ce_loss, ce)
    torch.testing.assert_close(full.loss, ce + 1e-2 * z)
    chunked.loss.backward()  # checkpointed chunks still give gradients
    assert model.lm_head.weight.grad is not None
    with torch.no_grad():  # no gradients: the chunks are summed without recomputation, same bits
        assert torch.equal(model(x, labels, z_loss_multiplier=1e-2, return_logits=False,
                                 loss_chunk_tokens=7).loss, chunked.loss.detach())


def test_evaluation_sums_the_loss_chunks_without_checkpoint(monkeypatch):
    # torch.utils.checkpoint loads torch._dynamo on first use (about a second of each evaluation
    # process's start); without gradients there is nothing to recompute
    import shapelm.model.transformer as transformer

    model = build_model(build_model_config(tiny_arch()))
    x = torch.randint(0, 97, (2, 16))
    calls = []
    monkeypatch.setattr(transformer, "checkpoint", lambda fn, *a, **k: calls.append(1) or fn(*a))
    with torch.no_grad():
        model(x, x, return_logits=False, loss_chunk_tokens=7)
    assert calls == []
    model(x, x, return_logits=False, loss_chunk_tokens=7)  # training still recomputes each chunk
    assert len(calls) == 5


def test_materialize_lays_out_what_to_empty_does_without_loading_sympy():
    # to_empty's empty_like of a meta tensor runs torch's Python reference, which imports sympy
    # (0.3 s of every trainer's start); materialize allocates the same tensors directly
    import subprocess
    import sys

    from shapelm.model.transformer import materialize

    cfg = build_model_config(tiny_arch(kind="hourglass", k=2, d_attn=16))
    ours = materialize(build_model(cfg, "meta"), "cpu")
    theirs = build_model(cfg, "meta").to_empty(device="cpu")
    layout = lambda m: [(n, type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad)  # noqa: E731
                        for n, t in [*m.named_parameters(), *m.named_buffers()]]
    assert layout(ours) == layout(theirs) and not any(t.is_meta for t in ours.parameters())
    code = ("import sys, torch\n"
            "from types import SimpleNamespace\n"
            "from shapelm.model.builders import build_model_config\n"
            "from shapelm.train.parallel import initial_state\n"
            "sys.path.insert(0, 'tests')\n"
            "from model_helpers import tiny_arch\n"
            "initial_state(build_model_config(tiny_arch()), SimpleNamespace(seed=3))\n"
            "assert 'sympy' not in sys.modules, 'sympy loaded'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_init_is_truncated_normal_002():
    model = build_model(build_model_config(tiny_arch(d_model=64, d_h=256)))
    w = model.layers[0].mlps[0].gate_proj.weight
    assert w.abs().max() <= 3 * 0.02 + 1e-6
    assert 0.015 < w.std().item() < 0.02
    assert torch.equal(model.norm.weight, torch.ones(64))


def test_hourglass_k1_with_d_attn_equal_d_model_is_the_conventional_model():
    conv = build_model(build_model_config(tiny_arch()))
    hg = build_model(build_model_config(tiny_arch(kind="hourglass", k=1, d_attn=32)))
    hg.load_state_dict(conv.state_dict())
    x = torch.randint(0, 97, (2, 9))
    torch.testing.assert_close(conv(x).logits, hg(x).logits)


def test_save_and_load_roundtrip_and_shape_mismatch_error(tmp_path):
    model = build_model(build_model_config(tiny_arch(kind="hourglass", k=2, d_h=16)))
    save_pretrained(model, tmp_path / "m")
    loaded = load_pretrained(tmp_path / "m")
    x = torch.randint(0, 97, (1, 7))
    torch.testing.assert_close(model(x).logits, loaded(x).logits)
    other = build_model(build_model_config(tiny_arch(kind="hourglass", k=2, d_h=24)))
    save_pretrained(other, tmp_path / "o")
    (tmp_path / "m" / "model_config.json").write_text((tmp_path / "o" / "model_config.json").read_text())
    with pytest.raises(Exception, match=r"mlps\.0\.\w+_proj\.weight has shape"):
        load_pretrained(tmp_path / "m")


@pytest.mark.parametrize(
    "arch, key",
    [
        (tiny_arch(n_heads=5), "n_heads"),
        (tiny_arch(n_kv_heads=3), "n_kv_heads"),
        (tiny_arch(d_hh=3), "d_hh"),
        (tiny_arch(kind="pyramid"), "kind"),
        (tiny_arch(d_h=-4), "d_h"),
        (tiny_arch(norm_placement="post"), "norm_placement"),
        (tiny_arch(kind="hourglass"), "k"),
        (tiny_arch(d_h=None, ffn_ratio=None), "d_h"),
    ],
)
def test_impossible_shapes_name_the_key(arch, key):
    with pytest.raises(ConfigError, match=key):
        build_model_config(arch)


def test_model_config_roundtrip_and_unknown_key():
    cfg = build_model_config(tiny_arch(kind="hourglass", k=2, d_h=16))
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="bogus"):
        ModelConfig.from_dict({**cfg.to_dict(), "bogus": 1})
