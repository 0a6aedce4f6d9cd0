"""Hope-attention (Behrouz et al. 2025c): softmax attention + a continuum memory system (CMS).

The chunk-parallel training form against a token-by-token reference written here (per-token
autograd gradients of the local loss, applied at chunk boundaries), cached decoding against the
full forward, gradients to every parameter, accounting against the built module, config errors,
and a tiny model learning a copy task.
"""

import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from shapelm.shapes.accounting import fast_weight_state_bytes, flops_per_token, param_counts
from shapelm.errors import ConfigError
from shapelm.model.cache import StaticKVCache
from shapelm.model import ModelConfig, build_model
from shapelm.model.builders import build_model_config
from shapelm.model.hope import CMSLevel

pytestmark = pytest.mark.usefixtures("one_thread")

V = 61
STEPS = 120
ATTN = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}


def hope_cfg(chunks=(3, 8), momentum=0.0, decay=0.0, lr=1.0, **kw):
    layer = {"attention": ATTN, "ffn_widths": [24, 40][: len(chunks)], "mixer": "hope_attention",
             "cms_chunks": list(chunks), "cms_lr": lr, "cms_momentum": momentum, "cms_decay": decay}
    layers = [layer, {"attention": ATTN, "ffn_widths": [32]}, {**layer, "cms_chunks": list(chunks)[::-1]}]
    return ModelConfig(vocab_size=V, d_model=16, max_seq_len=64, layers=layers, **kw)


def reference_level(level: CMSLevel, x: torch.Tensor) -> torch.Tensor:
    """One token at a time, from the update rule (not from shapelm.model.hope): read with W,
    add autograd's gradient of 1/2 ||SwiGLU(x_t; W) - W_v x_t||^2 / C, update every C tokens."""
    c = level.chunk
    w = [p.detach().clone() for p in (level.gate_proj.weight, level.up_proj.weight, level.down_proj.weight)]
    mom = [torch.zeros_like(p) for p in w]  # gate, up, down: the model stacks gate and up
    acc = [torch.zeros_like(p) for p in w]
    outs = []
    for t in range(x.shape[0]):
        xt = x[t]
        params = [p.clone().requires_grad_(True) for p in w]
        g, u, d = params
        y = F.linear(F.silu(F.linear(xt, g)) * F.linear(xt, u), d)
        loss = 0.5 * (y - F.linear(xt, level.value_proj.weight)).pow(2).sum() / c
        grads = torch.autograd.grad(loss, params)
        outs.append(y.detach())
        acc = [a + gr for a, gr in zip(acc, grads)]
        if (t + 1) % c == 0:
            mom = [level.momentum * m + a for m, a in zip(mom, acc)]
            w = [(1 - level.decay) * p - level.lr * m for p, m in zip(w, mom)]
            acc = [torch.zeros_like(p) for p in w]
    return torch.stack(outs)


@pytest.mark.parametrize("chunk,momentum,decay", [(1, 0.0, 0.0), (4, 0.0, 0.0), (5, 0.9, 0.1)])
def test_chunk_parallel_level_equals_token_by_token_reference(chunk, momentum, decay):
    torch.manual_seed(0)
    level = CMSLevel(16, 24, chunk, lr=2.0, momentum=momentum, decay=decay)
    for p in level.parameters():
        torch.nn.init.normal_(p, std=0.15)
    x = torch.randn(2, 23, 16)
    with torch.no_grad():
        y, _ = level.scan(x, level.initial_state(2), keep_state=False)
    ref = torch.stack([reference_level(level, x[b]) for b in range(2)])
    assert torch.allclose(y, ref, atol=1e-5, rtol=1e-4)
    # the memory matters: the same level with its update off reads something else
    frozen = CMSLevel(16, 24, 10**6, lr=2.0)
    frozen.load_state_dict(level.state_dict())
    with torch.no_grad():
        assert not torch.allclose(frozen(x), y, atol=1e-3)


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_decoding_token_by_token_equals_full_forward(momentum):
    """The multi-frequency chain (chunks 3 and 8, reversed in the last layer) through the model:
    prefill 5 tokens, then one at a time, with the fast weights carried in either cache."""
    torch.manual_seed(1)
    cfg = hope_cfg(momentum=momentum, decay=0.05, lr=2.0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ids = torch.randint(0, V, (2, 27))
    with torch.no_grad():
        full = model(ids).logits
        cache = StaticKVCache(cfg, 2, 27)
        steps = [model(ids[:, :5], kv_cache=cache, start_pos=0).logits]
        for t in range(5, 27):
            steps.append(model(ids[:, t : t + 1], kv_cache=cache, start_pos=t).logits)
        assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)
        assert len(cache.state) == 4  # two Hope layers x two levels
        cache.reset()
        assert not cache.state


def test_gradients_reach_every_parameter():
    torch.manual_seed(2)
    model = build_model(hope_cfg())
    ids = torch.randint(0, V, (2, 20))
    model(ids, labels=ids).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing
    # the value projections learn only through the in-context update: with no chunk closing
    # inside the sequence they get no gradient, so the test above sees backprop through updates
    still = build_model(hope_cfg(chunks=(64, 64)))
    still(ids, labels=ids).loss.backward()
    values = [p.grad for n, p in still.named_parameters() if "value_proj" in n]
    assert values and all(g is None or not g.abs().sum() > 0 for g in values)


def test_accounting_matches_the_built_module():
    cfg = hope_cfg(momentum=0.5)
    model = build_model(cfg)
    counts = param_counts(cfg)
    assert counts.total == model.num_parameters()
    cms = sum(p.numel() for n, p in model.named_parameters() if ".mlps." in n)
    assert counts.ffn == cms
    plain = ModelConfig(vocab_size=V, d_model=16, layers=[{"attention": ATTN, "ffn_widths": [24, 40]}])
    hope = ModelConfig(vocab_size=V, d_model=16, layers=[{**hope_cfg().layers[0].to_dict()}])
    assert param_counts(hope).ffn - param_counts(plain).ffn == 2 * 16 * 16
    # the memory's update costs FLOPs, more for a faster level
    assert flops_per_token(hope, 64).forward > flops_per_token(plain, 64).forward
    # state: fast weights + open-chunk gradient (+ momentum) per level, fp32
    assert fast_weight_state_bytes(plain) == 0
    assert fast_weight_state_bytes(cfg) == 4 * 2 * 3 * 16 * (24 + 40) * 3


def test_configs_flow_from_arch_and_keep_old_fingerprints():
    arch = {"kind": "tapered", "schedule": "cosine", "start": 1.5, "end": 0.5, "d_model": 32,
            "n_layers": 4, "d_ff": 64, "n_heads": 2, "vocab_size": V}
    old = build_model_config(arch)
    assert "cms_chunks" not in old.to_dict()["layers"][0]
    hope = build_model_config({**arch, "mixer": "hope_attention", "cms_chunks": [4, 16, 64]})
    assert [len(layer.ffn_widths) for layer in hope.layers] == [3] * 4
    assert [layer.ffn_widths[0] for layer in hope.layers] == [layer.ffn_widths[0] for layer in old.layers]
    assert ModelConfig.from_dict(hope.to_dict()).fingerprint() == hope.fingerprint()
    one = build_model_config({**arch, "mixer": "hope_attention", "cms_tapered_level": "fastest"})
    assert {layer.ffn_widths[1] for layer in one.layers} == {64}
    assert [layer.ffn_widths[0] for layer in one.layers] == [layer.ffn_widths[0] for layer in old.layers]


@pytest.mark.parametrize(
    "arch,message",
    [
        ({"cms_chunks": [4]}, "applies only to mixer: hope_attention"),
        ({"mixer": "hope_attention", "cms_chunks": [0, 4]}, "arch.cms_chunks"),
        ({"mixer": "hope_attention", "cms_momentum": 1.0}, "arch.cms_momentum"),
        ({"mixer": "hope_attention", "cms_tapered_level": "middle"}, "arch.cms_tapered_level"),
        ({"mixer": "hope_attention", "kind": "hourglass", "k": 2, "d_h": 32}, "one FFN width"),
    ],
)
def test_bad_hope_keys_are_config_errors(arch, message):
    base = {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 2}
    with pytest.raises(ConfigError, match=message):
        build_model_config({**base, **arch})


def test_layer_validation_names_the_key():
    layer = {"attention": ATTN, "ffn_widths": [24], "mixer": "hope_attention", "cms_chunks": [4, 8]}
    with pytest.raises(ConfigError, match=r"layers\[0\].cms_chunks"):
        ModelConfig(vocab_size=V, d_model=16, layers=[layer])
    with pytest.raises(ConfigError, match=r"layers\[0\].cms_lr applies only"):
        ModelConfig(vocab_size=V, d_model=16, layers=[{"attention": ATTN, "ffn_widths": [24], "cms_lr": 1.0}])


def test_tiny_hope_model_learns_to_copy():
    """[a_1..a_8, SEP, a_1..a_8]: the second half is predictable only by copying."""
    torch.manual_seed(0)
    n, vocab = 8, 16
    layer = {"attention": {"n_heads": 2, "n_kv_heads": 2, "head_dim": 16}, "ffn_widths": [64, 64],
             "mixer": "hope_attention", "cms_chunks": [4, 16]}
    cfg = ModelConfig(vocab_size=vocab + 1, d_model=32, max_seq_len=32, layers=[layer])
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    start = time.monotonic()
    for _ in range(STEPS):
        a = torch.randint(0, vocab, (16, n))
        seq = torch.cat([a, torch.full((16, 1), vocab), a], 1)
        labels = torch.full_like(seq, -100)
        labels[:, n : 2 * n] = seq[:, n + 1 :]
        loss = model(seq, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert time.monotonic() - start < 60  # ~5 s on an idle core; loose for a shared machine
    assert loss.item() < 0.3, loss.item()  # chance is ln 16 = 2.77


def test_paper_hope_pairs_are_matched_and_hold_the_transformer_ffn():
    """Tapered Table 2's Hope-attention pairs: two CMS levels plus a value projection per level,
    at the width that matches the Transformer pair's total (within 2%); within each pair
    parameters and FLOPs are equal."""
    from pathlib import Path

    from shapelm.plan.experiment import load_experiment

    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "paper.yaml")
    for scale in ("760m", "1300m"):
        pair = {}
        for variant in ("uniform", "cosine_1p5_0p5"):
            plain, hope = exp.run(f"tp{scale}_{variant}"), exp.run(f"tp{scale}_hope_{variant}")
            assert "tapered_table2" in hope["tables"] and hope["train"] == plain["train"]
            plain_cfg, hope_cfg_ = ModelConfig.from_dict(plain["model"]), ModelConfig.from_dict(hope["model"])
            assert {(layer.mixer, layer.cms_chunks) for layer in hope_cfg_.layers} == {("hope_attention", (16, 64))}
            assert param_counts(hope_cfg_).total == pytest.approx(param_counts(plain_cfg).total, rel=0.02)
            pair[variant] = (param_counts(hope_cfg_).total, flops_per_token(hope_cfg_, 4096).train)
        (p_uniform, f_uniform), (p_tapered, f_tapered) = pair["uniform"], pair["cosine_1p5_0p5"]
        assert p_tapered == pytest.approx(p_uniform, rel=1e-3) and f_tapered == pytest.approx(f_uniform, rel=1e-3)


def test_default_config_has_the_tiny_hope_pair():
    from pathlib import Path

    from shapelm.plan.experiment import load_experiment

    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "default.yaml")
    for variant in ("uniform", "cosine_1p5_0p5"):
        cfg = ModelConfig.from_dict(exp.run(f"tp760m_hope_{variant}")["model"])
        assert {layer.mixer for layer in cfg.layers} == {"hope_attention"}
        assert cfg.d_model == 64 and cfg.n_layers == 6


def test_a_hope_model_trains_through_the_trainer_from_a_meta_build(tmp_path):
    """The trainer builds on meta and materialises with `to_empty` (nn.Module._apply), which a
    CMS level's own method of that name once shadowed."""
    import numpy as np

    from shapelm.data.tokens import write_token_dir
    from shapelm.plan.experiment import load_experiment
    from shapelm.plan.runs import resolve_run
    from shapelm.train import train

    exp = load_experiment(Path(__file__).resolve().parents[2] / "configs" / "default.yaml")
    run = resolve_run(exp.raw, "tp760m_hope_cosine_1p5_0p5")
    ids = np.random.default_rng(0).integers(1, 2048, size=300_000).astype(np.uint32)  # budget + split
    write_token_dir(tmp_path / "tokens", ids, vocab_size=2048, eos_id=0)
    result = train(run, tmp_path / "run", tmp_path / "tokens", max_steps=1, progress=False)
    assert result.status == "stopped" and result.step == 1
