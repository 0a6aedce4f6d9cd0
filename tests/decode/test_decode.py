"""Decode path: static KV cache, MLA, memory model, transformers peer, CLI."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

from shapelm.shapes.accounting import kv_cache_bytes, mla_group_factor
from shapelm.model.cache import MLASpec, StaticKVCache
from shapelm.decode.cli import parse_lengths
from shapelm.decode.model import build_decode_model, make_cache, mixer_config, predicted_kv_bytes
from shapelm.decode.specs import PRESETS, resolve_spec
from shapelm.errors import ShapelmError
from shapelm.model.builders import build_model_config

VOCAB = 97


pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = {
    "conventional": {"kind": "conventional", "d_model": 64, "n_layers": 3, "d_h": 128, "n_heads": 4},
    "hourglass": {"kind": "hourglass", "d_model": 96, "n_layers": 2, "k": 3, "d_h": 40, "d_attn": 64,
                  "n_heads": 4},
    # per-layer shapes: differing KV widths and head dims, and a layer without attention
    "explicit": {"kind": "explicit", "d_model": 64, "layers": [
        {"n_heads": 4, "head_dim": 16, "ffn": [96]},
        {"attention": False, "ffn": [48, 48]},
        {"n_heads": 8, "n_kv_heads": 2, "head_dim": 8, "ffn": [32, 32, 32]},
        {"n_heads": 2, "head_dim": 32, "ffn": []},
    ]},
}


def cfg_of(name: str, **over):
    return build_model_config({**SHAPES[name], "vocab_size": VOCAB, **over})


def decode_logits(model, ids: torch.Tensor, prefill: int) -> torch.Tensor:
    cache = make_cache(model, ids.shape[0], ids.shape[1])
    outs = [model(ids[:, :prefill], kv_cache=cache, start_pos=0).logits]
    for t in range(prefill, ids.shape[1]):
        assert cache.length == t
        outs.append(model(ids[:, t : t + 1], kv_cache=cache, start_pos=t).logits)
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("mixer", ["native", "mha", "gqa", "mla"])
def test_static_cache_decode_equals_full_forward(shape, mixer):
    """Prefill + one-token steps through the static cache give the full forward's logits (fp32).
    For MLA: the weight-absorbed cached decode equals the same module's full (up-projected) form."""
    model = build_decode_model(cfg_of(shape), mixer, n_kv_heads=2, mla=MLASpec(24, 8), seed=3)
    ids = torch.randint(0, VOCAB, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids).logits
        for prefill in (1, 9):
            torch.testing.assert_close(decode_logits(model, ids, prefill), full, rtol=1e-5, atol=1e-5)


def test_qk_norm_and_reordered_norms_decode():
    cfg = cfg_of("hourglass", qk_norm=True, norm_placement="reordered")
    model = build_decode_model(cfg, "gqa", n_kv_heads=1, seed=1)
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(decode_logits(model, ids, 4), model(ids).logits, rtol=1e-5, atol=1e-5)


def test_cache_writes_in_place_and_returns_views():
    cfg = cfg_of("explicit")
    model = build_decode_model(cfg, "native")
    cache = make_cache(model, 1, 8)
    ptrs = [t.data_ptr() for t in cache._buffers()]
    with torch.no_grad():
        for t in range(8):
            model(torch.tensor([[t]]), kv_cache=cache, start_pos=t)
    assert [t.data_ptr() for t in cache._buffers()] == ptrs
    assert cache.k[1] is None and cache.v[1] is None  # the attention-free layer holds nothing
    assert cache.k[2].shape == (1, 2, 8, 8)  # its own n_kv_heads/head_dim
    k_all, v_all = cache.update(0, torch.zeros(1, 4, 0, 16), torch.zeros(1, 4, 0, 16))
    assert k_all.shape == (1, 4, 8, 16) and k_all.data_ptr() == cache.k[0].data_ptr()
    with pytest.raises(ShapelmError, match="max_len"):
        cache.update(0, torch.zeros(1, 4, 1, 16), torch.zeros(1, 4, 1, 16))


def test_fill_random_and_tiled_set_lengths():
    cfg = cfg_of("conventional")
    model = build_decode_model(cfg, "gqa", n_kv_heads=2)
    cache = make_cache(model, 1, 50)
    cache.fill_random(40)
    assert cache.length == 40 and cache.k[0][:, :, 40:].abs().sum() == 0
    cache.reset()
    with torch.no_grad():
        model(torch.arange(7)[None], kv_cache=cache, start_pos=0)
    cache.fill_tiled(50)
    assert cache.length == 50
    torch.testing.assert_close(cache.k[1][:, :, 7:14], cache.k[1][:, :, :7])
    torch.testing.assert_close(cache.v[2][:, :, 49], cache.v[2][:, :, 0])


@pytest.mark.parametrize("mixer", ["mha", "gqa", "mla"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_measured_kv_bytes_equal_eq8(mixer, dtype):
    """Bytes of the allocated buffers == M_KV = 2 beta L S d_attn / g, on real CPU allocations."""
    for name in ("cpu_conv", "cpu_hg"):
        _, cfg = resolve_spec(name)
        model = build_decode_model(cfg, mixer, dtype=dtype)
        for length in (1, 1000, 4096):
            cache = make_cache(model, 1, length)
            beta = cache.k[0].element_size()
            assert cache.nbytes() == predicted_kv_bytes(model.config, mixer, length, beta)
            attn = cfg.layers[0].attention
            g = {"mha": 1, "gqa": attn.n_heads / (attn.n_heads // 4),
                 "mla": mla_group_factor(attn.d_attn, 256, 32)}[mixer]
            assert cache.nbytes() == round(2 * beta * cfg.n_layers * length * attn.d_attn / g)
            if mixer != "mla":
                assert cache.nbytes() == kv_cache_bytes(mixer_config(cfg, mixer), length, beta)


@pytest.mark.parametrize("mixer", ["mha", "gqa", "mla"])
def test_kv_reduction_is_exactly_one_minus_layer_ratio(mixer):
    """Measured allocation bytes: 1 - KV_hg / KV_conv == 1 - L_hg / L_conv exactly.
    CPU pair on real buffers; the 906M Table 12 pair at 32k..128k on meta buffers (same shapes,
    no memory), which report the same nbytes as the GPU allocations would."""
    for pair, device, lengths in (("cpu", "cpu", (1024, 16384)), ("906m", "meta", (32768, 65536, 131072))):
        (_, conv), (_, hg) = resolve_spec(f"{pair}_conv"), resolve_spec(f"{pair}_hg")
        conv_m, hg_m = mixer_config(conv, mixer), mixer_config(hg, mixer)
        mla = MLASpec() if mixer == "mla" else None
        for length in lengths:
            kv = [StaticKVCache(c, 1, length, torch.bfloat16, device, mla).nbytes() for c in (conv_m, hg_m)]
            assert Fraction(kv[1], kv[0]) == Fraction(hg.n_layers, conv.n_layers)
            assert 1 - Fraction(kv[1], kv[0]) == Fraction(1, 2)
            assert kv[0] == predicted_kv_bytes(conv_m, mixer, length, 2, mla=mla)


def test_table12_group_factors():
    _, conv = resolve_spec("906m_conv")
    assert mixer_config(conv, "gqa").layers[0].attention.n_kv_heads == 4  # 16 q heads over 4 KV heads
    assert mla_group_factor(1536, 256, 32) == pytest.approx(10.667, abs=1e-3)
    mla = build_decode_model(build_model_config({**PRESETS["cpu_conv"]}), "mla")
    assert mla.layers[0].attn.shape.cache_width == 288


def test_hf_llama_peer_matches_logits():
    pytest.importorskip("transformers")
    from shapelm.decode.hf import hf_decode_step, to_llama

    cfg = cfg_of("conventional", qk_norm=False, n_kv_heads=2)
    model = build_decode_model(cfg, "gqa", n_kv_heads=2, seed=2)
    hf = to_llama(model)
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)
        step = hf_decode_step(hf, 32)
        assert step().shape == (1, 1, VOCAB)
    with pytest.raises(ShapelmError, match="qk_norm"):
        to_llama(build_decode_model(cfg_of("conventional"), "mha"))


def test_parse_lengths():
    assert parse_lengths("4096, 8k,32K") == [4096, 8192, 32768]
    with pytest.raises(Exception):
        parse_lengths("abc")


def test_cli_bench_decode_writes_rows(tmp_path):
    import argparse

    from shapelm.decode.cli import add_commands

    parser = argparse.ArgumentParser(prog="shapelm")  # only this stage: no other stage's imports
    add_commands(parser.add_subparsers(dest="command"))

    def main(argv):
        args = parser.parse_args(argv)
        return args.func(args)

    a = json.dumps({**SHAPES["conventional"], "n_layers": 4, "vocab_size": VOCAB, "qk_norm": False})
    b = json.dumps({**SHAPES["hourglass"], "vocab_size": VOCAB})
    out = tmp_path / "r.json"
    rc = main(["bench", "decode", "--arch-a", a, "--arch-b", b, "--mixer", "mha,gqa,mla", "--lengths", "64,96",
               "--warmup", "1", "--iters", "2", "--n-kv-heads", "2", "--r-kv", "16", "--d-rope", "8",
               "--threads", "1", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert len(res["rows"]) == 3 * 2 * 2
    for row in res["rows"]:
        assert row["kv_bytes"] == row["kv_bytes_predicted"]
        assert row["latency_ms_min"] <= row["latency_ms_median"] <= row["latency_ms_max"]
        assert len(row["times_ms"]) == 2 and row["dtype"] == "float32"
    assert len(res["comparisons"]) == 6
    for c in res["comparisons"]:
        assert c["layer_ratio"] == 2.0 and c["kv_reduction"] == 0.5 and c["speedup"] > 0


def test_resolve_spec_forms(tmp_path):
    import yaml

    name, cfg = resolve_spec("906m_hg")
    assert (name, cfg.n_layers, cfg.d_model, cfg.layers[0].attention.d_attn) == ("906m_hg", 12, 2496, 1536)
    spec = {**SHAPES["hourglass"], "vocab_size": VOCAB}
    (tmp_path / "hg.yaml").write_text(yaml.safe_dump(spec))
    assert resolve_spec(str(tmp_path / "hg.yaml"))[1] == build_model_config(spec)
    (tmp_path / "model_config.json").write_text(json.dumps(build_model_config(spec).to_dict()))
    assert resolve_spec(str(tmp_path / "model_config.json"))[1].n_layers == 2
    (tmp_path / "run.json").write_text(json.dumps({"name": "r1", "model": build_model_config(spec).to_dict()}))
    assert resolve_spec(str(tmp_path / "run.json"), vocab_size=50)[0] == "r1"
    assert resolve_spec(json.dumps(spec), vocab_size=50)[1].vocab_size == 50


def test_runs_of_an_experiment_come_resolved_from_the_plan(tmp_path):
    """`shapelm bench decode --config PLAN --runs A B` (the decode_pair rule): the front end
    (shapelm.commands.bench) looks the runs up in the plan document, or in the plan of a config, and
    passes the resolved run configs down; the decode stage on its own reads no plan."""
    import argparse
    from pathlib import Path

    from shapelm.commands.bench import run_configs
    from shapelm.model.config import run_model_config
    from shapelm.decode.cli import add_commands, resolve_arms
    from shapelm.decode.specs import resolve_runs
    from shapelm.errors import ConfigError
    from shapelm.plan.build import write_plan
    from shapelm.plan.experiment import load_experiment

    config = Path(__file__).parents[2] / "configs" / "default.yaml"
    exp = load_experiment(config)
    plan = write_plan(exp, tmp_path / "plan.json")
    names = ["tp760m_uniform", "tp760m_titans_uniform"]
    arms = resolve_runs(run_configs(str(plan), names), vocab_size=64)
    assert [a[0] for a in arms] == names
    for (name, cfg), expected in zip(arms, names):
        want = run_model_config(exp.run(expected))
        want.vocab_size = 64
        assert cfg == want
    assert resolve_runs(run_configs(str(config), names)) == [(n, run_model_config(exp.run(n))) for n in names]
    with pytest.raises(ConfigError, match="nope"):
        run_configs(str(plan), ["tp760m_uniform", "nope"])
    parser = argparse.ArgumentParser(prog="shapelm")
    add_commands(parser.add_subparsers(dest="command"))  # the stage alone: no plan reader given
    args = parser.parse_args(["bench", "decode", "--config", str(plan), "--runs", *names])
    with pytest.raises(ConfigError, match="reads no plan"):
        resolve_arms(args)


@pytest.mark.parametrize("mixer_arch", [
    {"mixer": "titans", "memory_chunk": 4, "window": 8},
    {"mixer": "hope_attention", "cms_chunks": [4, 16]},
])
def test_recurrent_mixers_report_per_token_cost_and_state(mixer_arch):
    """Titans and Hope-attention decode against the same cache as softmax attention; their state
    keeps advancing while the positions rewind each step, and its bytes are the accounting's and
    do not grow with the context (the KV does). The accounting counts a Hope level's open-chunk
    gradient sum, which exists only while a chunk is open: measured after a step, at most that."""
    from shapelm.decode.bench import BenchSettings, bench_arm

    cfg = build_model_config({"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64, "n_heads": 4,
                              "vocab_size": VOCAB, **mixer_arch})
    rows = bench_arm(cfg, "recurrent", "native", [32, 64], BenchSettings(warmup=1, iters=3, threads=1))
    assert [r["length"] for r in rows] == [32, 64]
    for row in rows:
        assert row["kv_bytes"] == row["kv_bytes_predicted"] and row["mode"] == "eager"
        assert 0 < row["state_bytes"] <= row["state_bytes_predicted"]
        if mixer_arch["mixer"] == "titans":
            assert row["state_bytes"] == row["state_bytes_predicted"]
        assert row["latency_ms_median"] > 0 and len(row["times_ms"]) == 3
    assert rows[0]["state_bytes"] == rows[1]["state_bytes"] and rows[1]["kv_bytes"] == 2 * rows[0]["kv_bytes"]
    # A decode step still refuses to rewind a recurrent state outside the benchmark.
    model = build_decode_model(cfg, "native")
    cache = make_cache(model, 1, 16)
    model(torch.zeros(1, 4, dtype=torch.long), kv_cache=cache, start_pos=0)
    with pytest.raises(ShapelmError, match="cannot be rewound"):
        cache.set_length(2)
