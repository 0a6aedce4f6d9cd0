"""Evaluation loading (meta build, weights straight to the device dtype), cached attention
without a dense mask, batched and resumable RULER decoding."""

import json

import pytest
import torch
from model_helpers import tiny_arch

from shapelm.evaluation.loading import load_model, resolve_dtype
from tiny_longctx import tiny_model, tiny_tokenizer
from shapelm.model.cache import StaticKVCache
from shapelm.model.generate import greedy_generate, greedy_generate_batch
from shapelm.model import build_model, save_pretrained
from shapelm.model.builders import build_model_config
from shapelm.model.transformer import Transformer


def test_load_builds_on_meta_and_materialises_in_the_dtype(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = build_model(build_model_config(tiny_arch(n_heads=4, n_kv_heads=2)))
    save_pretrained(model, tmp_path)

    def no_random_init(self):
        raise AssertionError("loading must not initialise a random model first")

    monkeypatch.setattr(Transformer, "reset_parameters", no_random_init)
    loaded = load_model(tmp_path, device="cpu", dtype="bfloat16")
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.to(torch.bfloat16)), name
    assert not loaded.training
    assert load_model(tmp_path).lm_head.weight.dtype == torch.float32  # auto on CPU


def test_auto_dtype_is_bf16_on_cuda_only():
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype(None, "cpu") == torch.float32
    assert resolve_dtype("float32", "cuda") == torch.float32


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_chunked_prefill_matches_one_pass(n_kv_heads):
    torch.manual_seed(0)
    model = build_model(build_model_config(tiny_arch(n_heads=4, n_kv_heads=n_kv_heads))).eval()
    ids = torch.randint(0, 97, (2, 40))
    with torch.no_grad():
        full = model.hidden_states(ids)
        cache = StaticKVCache(model.config, 2, 40)
        parts = [model.hidden_states(ids[:, s: s + 16], kv_cache=cache, start_pos=s) for s in (0, 16, 32)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)


def test_batched_greedy_decoding_matches_one_prompt_at_a_time():
    torch.manual_seed(0)
    model = tiny_model(vocab_size=97, max_seq_len=128)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 97, (n,), generator=gen).tolist() for n in (37, 9, 60)]
    budgets = [6, 3, 8]
    alone = [greedy_generate(model, p, n, prefill_chunk=16) for p, n in zip(prompts, budgets)]
    together = greedy_generate_batch(model, prompts, budgets, prefill_chunk=16)
    assert together == alone
    assert [len(x) for x in together] == budgets


def test_ruler_resumes_finished_tasks(tmp_path, monkeypatch):
    from tiny_longctx import english_text
    from shapelm.longctx.ruler.run import evaluate_ruler, generate_ruler, load_resources

    tok = tiny_tokenizer()
    text = tmp_path / "essay.txt"
    text.write_text(english_text(400))
    res = load_resources(essays=text, qa_text=text)
    generate_ruler(tmp_path / "ruler", tok, [512], 3, tasks=["niah_single_1", "vt"], resources=res)
    model = tiny_model(vocab_size=tok.get_vocab_size(), max_seq_len=512)
    first = evaluate_ruler(model, tok, tmp_path / "ruler", pred_dir=tmp_path / "pred", eos_id=0, batch_size=2)
    (tmp_path / "pred" / "512" / "vt.jsonl").unlink()  # as if the job died during "vt"
    calls = []
    from shapelm.model import generate

    real = generate.greedy_generate_batch
    monkeypatch.setattr(generate, "greedy_generate_batch",
                        lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    again = evaluate_ruler(model, tok, tmp_path / "ruler", pred_dir=tmp_path / "pred", eos_id=0, batch_size=2)
    assert calls == [2, 1]  # only "vt" decoded again, in batches of 2
    assert again["scores"] == first["scores"]


def test_proofpile_resumes_per_length(tmp_path, monkeypatch):
    import numpy as np

    import shapelm.longctx.proofpile as pp

    model = tiny_model(vocab_size=97, max_seq_len=64)
    docs = [np.random.default_rng(i).integers(1, 97, 64) for i in range(2)]
    partial = tmp_path / "pp.json.partial"
    full = pp.proofpile_perplexity(model, docs, [16, 32, 64], loss_chunk_tokens=8)
    calls = []
    real = pp.document_nll

    def dies_at_64(m, tokens, **kw):
        if tokens.size == 64:
            raise KeyboardInterrupt  # the job's time ran out
        calls.append(tokens.size)
        return real(m, tokens, **kw)

    monkeypatch.setattr(pp, "document_nll", dies_at_64)
    with pytest.raises(KeyboardInterrupt):
        pp.proofpile_perplexity(model, docs, [16, 32, 64], loss_chunk_tokens=8, partial=partial)
    assert partial.is_file() and calls == [16, 16, 32, 32]
    monkeypatch.setattr(pp, "document_nll", lambda m, tokens, **kw: calls.append(tokens.size) or real(m, tokens, **kw))
    again = pp.proofpile_perplexity(model, docs, [16, 32, 64], loss_chunk_tokens=8, partial=partial)
    assert calls[4:] == [64, 64] and not partial.exists()
    assert again["ppl"] == pytest.approx(full["ppl"])


def test_a_checkpoint_s_tokenizer_is_found_through_its_run_manifest(tmp_path):
    """find_tokenizer_near reads the run manifest through its record: the tokenizer it names, else
    the one its token directory's manifest names; a manifest that is not valid JSON names none."""
    from shapelm.evaluation.loading import find_tokenizer_near

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"config": {"data": {"tokenizer": "org/tok"}}}))
    assert find_tokenizer_near(run / "final") == "org/tok"

    tokens = tmp_path / "corpus" / "train"
    tokens.mkdir(parents=True)
    (tmp_path / "corpus" / "tokenizer.json").write_text("{}")
    (tokens / "manifest.json").write_text(json.dumps({"tokenizer": "tokenizer.json"}))
    (run / "manifest.json").write_text(json.dumps({"data": {"dir": str(tokens)}}))
    assert find_tokenizer_near(run) == str(tmp_path / "corpus" / "tokenizer.json")

    (run / "manifest.json").write_text("{not json")
    assert find_tokenizer_near(run) is None
