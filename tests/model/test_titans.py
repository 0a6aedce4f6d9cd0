"""Titans (Behrouz et al. 2024, arXiv 2501.00663), MAC by default, MAG and MAL: the neural long-term memory and the mixer.

The chunk-parallel memory against a token-by-token reference written here with torch.func (the
per-token gradient of ||M(k) - v||^2 at the chunk-start weights, momentum, forgetting), cached
decoding against the full forward, gradients, accounting against the built module (parameters
and every matmul FLOP counted by torch's FlopCounterMode), config validation, and a tiny model
learning a copy task.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap
from torch.utils.flop_counter import FlopCounterMode

from shapelm.shapes.accounting import (
    flops_per_token,
    kv_cache_bytes_per_token,
    param_counts,
    recurrent_state_bytes,
    titans_layer_flops,
    titans_memory_flops,
    titans_memory_params,
)
from shapelm.errors import ConfigError
from shapelm.model.cache import StaticKVCache
from shapelm.model import ModelConfig, build_model
from shapelm.model.builders import build_model_config
from shapelm.model import titans
from shapelm.model.titans import NeuralMemory

pytestmark = pytest.mark.usefixtures("one_thread")

V = 17
ATTN = {"n_heads": 2, "n_kv_heads": 2, "head_dim": 8}


def titans_cfg(window=6, chunk=4, titans_variant="mag", **kw):
    layer = {"attention": ATTN, "ffn_widths": [48], "mixer": "titans", "memory_chunk": chunk, "window": window,
             "titans_variant": titans_variant}
    return ModelConfig(vocab_size=V, d_model=32, max_seq_len=64,
                       layers=[layer, {**layer, "ffn_widths": [24]}], **kw)


def reference_memory(mem, x, chunk):
    """Token by token from the paper's equations (Titans Sections 3.1-3.2 and 4.4), sharing only
    the module's parameters: for every t,
        q_t, k_t, v_t = SiLU(causal depthwise conv of W_q x, W_k x, W_v x), q_t and k_t L2-normalised
        theta_t = sigmoid(.) x INNER_LR / memory_hidden, eta_t = sigmoid(. + ETA_OFFSET), alpha_t = sigmoid(. + ALPHA_OFFSET)
        u_t = grad_M ||M(k_t) - v_t||^2 at the chunk-start M (per-sample gradients by torch.func),
              each of its two matrices scaled to Frobenius norm at most MAX_SURPRISE_NORM
        S_t = eta_t S_{t-1} - theta_t u_t,  M_t = (1 - alpha_t) M_{t-1} + S_t,  y_t = M_t(q_t)
        out_t = W_o (RMSNorm_heads(y_t) * sigmoid(W_g x_t))."""
    from shapelm.model.titans import ALPHA_OFFSET, ETA_OFFSET, INNER_LR, MAX_SURPRISE_NORM

    b, t, _ = x.shape
    h, hd = mem.n_heads, mem.head_dim
    raw = torch.cat([mem.q_proj(x), mem.k_proj(x), mem.v_proj(x)], -1)  # [B, T, 3W]
    taps = mem.conv.shape[1]
    conv = torch.stack([sum(mem.conv[:, j] * raw[:, i - (taps - 1) + j] for j in range(taps) if i - (taps - 1) + j >= 0)
                        for i in range(t)], 1)
    q, k, v = (F.silu(conv).view(b, t, 3, h, hd)[:, :, j] for j in range(3))  # [B, T, H, hd]
    q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    g = mem.gate_proj(x).view(b, t, 3, h)
    theta, eta = torch.sigmoid(g[:, :, 0]) * INNER_LR / mem.hidden, torch.sigmoid(g[:, :, 1] + ETA_OFFSET)
    alpha = torch.sigmoid(g[:, :, 2] + ALPHA_OFFSET)

    def loss(w1, w2, key, value):
        return (w2 @ F.silu(w1 @ key) - value).pow(2).sum()

    per_head_grad = vmap(vmap(grad(loss, argnums=(0, 1))))
    w = [mem.w1.expand(b, -1, -1, -1), mem.w2.expand(b, -1, -1, -1)]
    w0, s = list(w), [torch.zeros_like(w[0]), torch.zeros_like(w[1])]
    ys = []
    for i in range(t):
        u = per_head_grad(w0[0], w0[1], k[:, i], v[:, i])
        u = [g * (MAX_SURPRISE_NORM / g.flatten(-2).norm(dim=-1))[..., None, None].clamp(max=1.0) for g in u]
        e, keep, th = eta[:, i, :, None, None], 1 - alpha[:, i, :, None, None], theta[:, i, :, None, None]
        s = [e * s[j] - th * u[j] for j in range(2)]
        w = [keep * w[j] + s[j] for j in range(2)]
        hidden = F.silu(torch.einsum("bhmd,bhd->bhm", w[0], q[:, i]))
        ys.append(torch.einsum("bhdm,bhm->bhd", w[1], hidden))
        if (i + 1) % chunk == 0:
            w0 = list(w)
    y = torch.stack(ys, 1)  # [B, T, H, hd]
    y = y / (y.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    y = y.reshape(b, t, -1) * mem.out_norm * torch.sigmoid(mem.out_gate_proj(x))
    return mem.o_proj(y)


class MemoryOnlyCache:
    state: dict

    def __init__(self):
        self.state = {}


@pytest.mark.parametrize("chunk", [1, 3, 4, 16])
def test_chunk_parallel_equals_token_by_token(chunk):
    torch.manual_seed(0)
    mem = NeuralMemory(32, n_heads=2, head_dim=8, hidden=16, chunk=chunk, layer_idx=0)
    with torch.no_grad():
        mem.gate_proj.weight.normal_(0, 0.5)  # gates that vary per token, so the products matter
        mem.conv.normal_(0, 0.5)  # every tap matters, not only the identity one
        mem.out_norm.uniform_(0.5, 1.5)
    x = torch.randn(2, 13, 32)
    with torch.no_grad():
        got, ref = mem(x), reference_memory(mem, x, chunk)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
        # the memory learns: its retrieval differs from the untrained (no-update) memory's
        q = mem.project(x)[0]
        frozen = mem.output(x, F.silu(q @ mem.w1.transpose(-1, -2)) @ mem.w2.transpose(-1, -2))
        assert (got - frozen).abs().max() > 1e-3
        # and the convolution mixes earlier tokens into q, k, v: moving token 0 moves output 2
        moved = x.clone()
        moved[:, 0] += 1.0
        mem_off = NeuralMemory(32, n_heads=2, head_dim=8, hidden=16, chunk=16, layer_idx=0)
        mem_off.load_state_dict(mem.state_dict())
        mem_off.k_proj.weight.zero_()  # keys and values 0: every inner gradient is 0, nothing
        mem_off.v_proj.weight.zero_()  # is written, and only q's convolution mixes tokens
        mem_off.gate_proj.weight.zero_()  # (forgetting alone would, by the product of 1 - alpha_t)
        assert (mem_off(moved)[:, 2] - mem_off(x)[:, 2]).abs().max() > 1e-4
        assert (mem_off(moved)[:, 4:] - mem_off(x)[:, 4:]).abs().max() < 1e-6  # the kernel is 4 wide
        # decoding: a prefill ending mid-chunk, then one token at a time
        cache = MemoryOnlyCache()
        parts = [mem(x[:, :6], cache)] + [mem(x[:, i:i + 1], cache) for i in range(6, 13)]
        torch.testing.assert_close(torch.cat(parts, 1), got, rtol=1e-5, atol=1e-6)


def surprising_memory(chunk: int) -> NeuralMemory:
    """A memory whose chunk steps exceed the stability limit of its loss: the largest inner rate,
    momentum ~0.98, values ~40x the unit keys (a trained tiny layer reached the same regime)."""
    torch.manual_seed(3)
    mem = NeuralMemory(32, n_heads=2, head_dim=8, hidden=16, chunk=chunk, layer_idx=0)
    with torch.no_grad():
        mem.gate_proj.weight.zero_()
        mem.gate_proj.weight[:2].fill_(1.0)  # theta logits (x has positive mean below): near the ceiling
        mem.gate_proj.weight[2:4].fill_(0.2)  # eta: sigmoid(. + ETA_OFFSET) ~ 0.98
        mem.v_proj.weight.mul_(40.0)
    return mem


def test_surprise_cap_binds_in_both_forms_alike():
    """The per-token cap is part of the recurrence: chunk-parallel and token by token agree where
    it binds too (values far from the keys' scale)."""
    mem = surprising_memory(chunk=4)
    x = torch.randn(2, 13, 32) + 1.0
    q, k, v, *_ = mem.project(x)
    a, d1, d2 = titans._grads(mem.w1.float(), mem.w2.float(), k, v)
    assert (d2.norm(dim=-1) * a.norm(dim=-1)).max() > titans.MAX_SURPRISE_NORM * 0.999  # it binds
    with torch.no_grad():
        torch.testing.assert_close(mem(x), reference_memory(mem, x, 4), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cap", [True, False])
def test_a_large_chunk_step_stays_finite_with_the_cap(cap, monkeypatch):
    """Without the cap the memory's weights grow geometrically chunk after chunk (the trained tiny
    Titans default went NaN in the chunk after its trained length); with it they stay bounded."""
    if not cap:
        monkeypatch.setattr(titans, "MAX_SURPRISE_NORM", math.inf)
    mem = surprising_memory(chunk=32)
    x = torch.randn(1, 32 * 24, 32) + 1.0
    with torch.no_grad():
        q, k, v, theta, log_eta, log_keep, _ = mem.project(x)
        state, norms = mem.initial_state(1), []
        for start in range(0, x.shape[1], 32):
            sl = slice(start, start + 32)
            _, state = titans.chunk_memory(state, q[:, :, sl], k[:, :, sl], v[:, :, sl], theta[..., sl],
                                           log_eta[..., sl], log_keep[..., sl])
            norms.append(float(state.w[0].norm() + state.w[1].norm()))
    bounded = all(math.isfinite(n) and n < 1e4 for n in norms)
    assert bounded == cap, norms


@pytest.mark.parametrize("variant", ["mac", "mag", "mal"])
def test_cached_generation_equals_full_forward(variant):
    torch.manual_seed(1)
    model = build_model(titans_cfg(titans_variant=variant)).eval()
    ids = torch.randint(0, V, (2, 15))
    with torch.no_grad():
        full = model(ids).logits
        cache = StaticKVCache(model.config, 2, 15)
        steps = [model(ids[:, :7], kv_cache=cache).logits]
        steps += [model(ids[:, i:i + 1], kv_cache=cache, start_pos=i).logits for i in range(7, 15)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert {key for key in cache.state if isinstance(key, int)} == {0, 1}
    state, segment = cache.state[0], cache.state.get((0, "segment"))  # MAC: the open segment's keys
    assert (segment is not None) == (variant == "mac")
    nbytes = state.nbytes() + (segment.nbytes() if segment is not None else 0)
    assert state.offset == 15 % 4 and nbytes * model.config.n_layers == 2 * recurrent_state_bytes(model.config)


def test_sliding_window_limits_what_attention_sees():
    torch.manual_seed(2)
    model = build_model(titans_cfg(window=3)).eval()
    attn = model.layers[0].attn.attn
    x = torch.randn(1, 10, 32)
    cos, sin = model._cos_sin(8, torch.arange(10), torch.float32)
    with torch.no_grad():
        base = attn(x, cos, sin)
        moved = x.clone()
        moved[:, 0] += 5.0  # outside the window of queries 3.. (they see positions i-2..i)
        out = attn(moved, cos, sin)
    assert torch.allclose(out[:, 3:], base[:, 3:], atol=1e-6)
    assert not torch.allclose(out[:, :3], base[:, :3], atol=1e-3)


@pytest.mark.parametrize("variant", ["mac", "mag", "mal"])
def test_gradients_reach_every_parameter(variant):
    torch.manual_seed(3)
    model = build_model(titans_cfg(titans_variant=variant))
    ids = torch.randint(0, V, (2, 11))
    model(ids, labels=ids).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []
    assert any(".memory.w1" in n for n, _ in model.named_parameters())


def test_accounting_matches_the_built_module():
    cfg = titans_cfg()
    model = build_model(cfg)
    counts = param_counts(cfg)
    assert model.num_parameters() == counts.total
    assert model.num_parameters(exclude_embeddings=True) == counts.non_embedding
    mem = model.layers[0].attn.memory
    assert sum(p.numel() for p in mem.parameters()) == titans_memory_params(32, cfg.layers[0])
    # every matmul the memory does, as torch counts them, at a length the chunk divides
    x = torch.randn(1, 16, 32)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        mem(x)
    matmul, elementwise = titans_memory_flops(32, cfg.layers[0], 16)
    assert counter.get_total_flops() == matmul * 16
    assert elementwise > 0
    plain = ModelConfig(vocab_size=V, d_model=32, max_seq_len=64, layers=[
        {"attention": ATTN, "ffn_widths": [w]} for w in (48, 24)])
    extra = flops_per_token(cfg, 4).forward - flops_per_token(plain, 4).forward  # window 6 >= S: full attention
    # the memory and MAG's wiring, plus the score terms of the persistent keys every query sees
    persistent = sum(2 * layer.persistent_tokens * (3 * layer.attention.d_attn + 3 * layer.attention.n_heads)
                     for layer in cfg.layers)
    assert extra == sum(titans_layer_flops(32, layer, 4) for layer in cfg.layers) + persistent
    mal, mac = titans_cfg(titans_variant="mal"), titans_cfg(titans_variant="mac")
    assert param_counts(mal).total == build_model(mal).num_parameters() == counts.total - 2 * 32
    assert param_counts(mac).total == build_model(mac).num_parameters() == counts.total  # MAG's parameters
    # MAC: a query sees its segment's retrieved and input tokens up to itself, not the window
    assert flops_per_token(mac, 64).forward_scores < flops_per_token(cfg, 64).forward_scores
    assert flops_per_token(cfg, 64).forward_scores < flops_per_token(plain, 64).forward_scores  # the window
    assert kv_cache_bytes_per_token(cfg) == kv_cache_bytes_per_token(plain)  # the static cache keeps every key
    # two layers: W0, W, S (two 16 x 8 matrices per head, 2 heads) and 3 q/k/v inputs of the convolution
    assert recurrent_state_bytes(cfg) == 2 * (3 * 2 * (2 * 16 * 8) + 3 * 3 * 16) * 4
    assert recurrent_state_bytes(plain) == 0


def test_configs_defaults_and_errors():
    arch = {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4, "vocab_size": V}
    cfg = build_model_config({**arch, "mixer": "titans"})
    layer = cfg.layers[0]
    assert (layer.mixer, layer.memory_hidden, layer.memory_chunk, layer.window) == ("titans", 16, 64, 512)
    assert (layer.titans_variant, layer.persistent_tokens) == ("mac", 4)
    mal = build_model_config({**arch, "mixer": "titans", "titans_variant": "mal"})
    assert mal.layers[0].titans_variant == "mal" and mal.fingerprint() != cfg.fingerprint()
    with pytest.raises(ConfigError, match=r"arch\.titans_variant must be one of \['mac', 'mag', 'mal'\], got 'lmm'"):
        build_model_config({**arch, "mixer": "titans", "titans_variant": "lmm"})
    with pytest.raises(ConfigError, match=r"arch\.titans_variant applies only to mixer: titans"):
        build_model_config({**arch, "titans_variant": "mal"})
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert build_model_config({**arch, "mixer": "titans", "window": 64}).fingerprint() != cfg.fingerprint()
    plain = build_model_config(arch)
    assert "window" not in plain.to_dict()["layers"][0]  # older configs keep their fingerprints
    with pytest.raises(ConfigError, match=r"arch\.window applies only to mixer: titans"):
        build_model_config({**arch, "window": 64})
    with pytest.raises(ConfigError, match=r"arch\.memory_chunk must be an integer >= 1"):
        build_model_config({**arch, "mixer": "titans", "memory_chunk": 0})
    with pytest.raises(ConfigError, match=r"layers\[0\]\.window applies only to mixer 'titans'"):
        ModelConfig(vocab_size=V, d_model=32, layers=[{"attention": ATTN, "ffn_widths": [8], "window": 4}])


def test_tiny_titans_learns_a_copy_task():
    """x SEP x over a 4-token alphabet: a tiny Titans model (memory + window attention) learns
    to copy in 150 steps. (A window shorter than the copy distance, so that only the memory can
    carry it, also learns, ln 4 -> ~0.7 in 150 steps, but too slowly for a unit test.)"""
    torch.manual_seed(0)
    n, sep = 6, V - 1
    model = build_model(titans_cfg(window=16, chunk=16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        src = torch.randint(0, 4, (16, n))
        ids = torch.cat([src, torch.full((16, 1), sep), src], 1)
        labels = torch.full_like(ids, -100)
        labels[:, n:-1] = ids[:, n + 1:]
        loss = model(ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * torch.log(torch.tensor(4.0)).item(), loss.item()


def test_paper_titans_pairs_match_the_transformer_pairs():
    """Tapered Table 2's Titans pairs: the Transformer pairs' d_model and recipe plus the memory in
    every layer, a narrower MLP paying for it (total within 2%); within each pair, parameters and
    FLOPs are equal."""
    from pathlib import Path

    from shapelm.plan.experiment import load_experiment

    root = Path(__file__).resolve().parents[2]
    exp = load_experiment(root / "configs" / "paper.yaml")
    for scale in ("760m", "1300m"):
        pair = {}
        for variant in ("uniform", "cosine_1p5_0p5"):
            plain, titans = exp.run(f"tp{scale}_{variant}"), exp.run(f"tp{scale}_titans_{variant}")
            assert "tapered_table2" in titans["tables"] and titans["train"] == plain["train"]
            plain_cfg, cfg = ModelConfig.from_dict(plain["model"]), ModelConfig.from_dict(titans["model"])
            assert {(layer.mixer, layer.titans_variant, layer.memory_chunk, layer.window)
                    for layer in cfg.layers} == {("titans", "mac", 64, 512)}
            assert param_counts(plain_cfg).ffn > param_counts(cfg).ffn  # the memory's parameters come out of the MLP
            assert param_counts(cfg).total == pytest.approx(param_counts(plain_cfg).total, rel=0.02)
            pair[variant] = (param_counts(cfg).total, flops_per_token(cfg, 4096).train)
        (p_uniform, f_uniform), (p_tapered, f_tapered) = pair["uniform"], pair["cosine_1p5_0p5"]
        assert p_tapered == pytest.approx(p_uniform, rel=1e-3) and f_tapered == pytest.approx(f_uniform, rel=1e-3)
    tiny = load_experiment(root / "configs" / "default.yaml")
    assert {"tp760m_titans_uniform", "tp760m_titans_cosine_1p5_0p5"} <= set(tiny.runs)


@pytest.mark.parametrize("variant", ["mac", "mag", "mal"])
def test_remote_code_export_matches(tmp_path, variant):
    """HF export with trust_remote_code: the self-contained memory and windowed attention give
    shapelm's logits; right padding is accepted, left padding (the memory would learn it) refused."""
    from model_helpers import cfg, export_and_load, ids, randomized

    layer = {"attention": ATTN, "ffn_widths": [48], "mixer": "titans", "memory_chunk": 8, "window": 12,
             "titans_variant": variant}
    model = randomized(cfg(layers=[layer, {"attention": None, "ffn_widths": [16]}, layer]))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, NeuralMemory):
                m.gate_proj.weight.normal_(0, 0.5)
    info, hf = export_and_load(tmp_path, model, "titans")
    assert info["architecture"] == "ShapelmForCausalLM"
    x = ids(seq=30)
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)
        right = torch.ones_like(x)
        right[0, 25:] = 0
        torch.testing.assert_close(hf(x, attention_mask=right).logits[0, :25], model(x[:1, :25]).logits[0],
                                   rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="left padding"):
            hf(x, attention_mask=right.flip(-1))


@pytest.mark.parametrize("variant", ["mac", "mag", "mal"])
def test_memory_carries_information_beyond_the_window(variant):
    """Two window-3 layers reach 4 tokens back; a token 12 back still changes the output through
    the memory, and stops doing so when the memory can no longer write."""
    torch.manual_seed(4)
    model = build_model(titans_cfg(window=3, chunk=4, titans_variant=variant)).eval()
    ids = torch.randint(0, V - 1, (1, 16))
    moved = ids.clone()
    moved[0, 0] = V - 1
    with torch.no_grad():
        delta = (model(ids).logits[0, 12:] - model(moved).logits[0, 12:]).abs().max()
        assert delta > 1e-4
        for block in model.layers:
            block.attn.memory.gate_proj.weight.zero_()
            block.attn.memory.k_proj.weight.zero_()  # keys and values 0: every inner gradient is 0,
            block.attn.memory.v_proj.weight.zero_()  # so the memory stores nothing of the tokens
        frozen = (model(ids).logits[0, 12:] - model(moved).logits[0, 12:]).abs().max()
    assert frozen < 1e-6


@pytest.mark.parametrize("mixer", ["titans", "hope_attention"])
def test_ragged_greedy_generation_decodes_each_prompt_as_the_full_forward_would(mixer):
    """RULER's batched decoding: a model with a recurrent state decodes each prompt alone, and
    every token is the full forward's argmax."""
    from shapelm.model.generate import greedy_generate_batch

    torch.manual_seed(3)
    if mixer == "titans":
        cfg = titans_cfg(titans_variant="mac")
    else:
        layer = {"attention": ATTN, "ffn_widths": [24, 24], "mixer": "hope_attention", "cms_chunks": [2, 4]}
        cfg = ModelConfig(vocab_size=V, d_model=32, max_seq_len=64, layers=[layer, layer])
    model = build_model(cfg).eval()
    prompts = [torch.randint(0, V, (n,)).tolist() for n in (9, 4, 13)]
    got = greedy_generate_batch(model, prompts, [6, 6, 3])
    for prompt, out, n in zip(prompts, got, [6, 6, 3]):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(n):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        assert out == ids[len(prompt):]


def test_the_shapes_table_counts_the_memory_as_decoding_state():
    from shapelm.shapes.accounting import shape_row

    cfg = titans_cfg()
    assert shape_row("t", cfg, 64, 256)["state_bytes_per_seq"] == recurrent_state_bytes(cfg) > 0


@pytest.mark.parametrize("mixer", ["attention", "gated_attention", "titans", "hope_attention"])
def test_a_recurrent_state_is_what_the_accounting_counts(mixer):
    """The generator decodes prompts one by one exactly when decoding carries a state."""
    from shapelm.shapes.accounting import decoding_state_bytes

    extra = {"memory_chunk": 8, "window": 16} if mixer == "titans" else {}
    cfg = build_model_config({"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4,
                              "vocab_size": 97, "max_seq_len": 64, "mixer": mixer, **extra})
    assert cfg.has_recurrent_state == bool(decoding_state_bytes(cfg)) == (mixer in ("titans", "hope_attention"))
