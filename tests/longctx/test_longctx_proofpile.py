"""Proof-pile PPL on a tiny model, document sources, greedy generator, report."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shapelm.data.tokens import write_token_dir
from shapelm.errors import ConfigError, DataError
from tiny_longctx import english_text, tiny_model, tiny_tokenizer
from shapelm.model.generate import greedy_generate
from shapelm.longctx.proofpile import proofpile_perplexity
from shapelm.records import ProofpileRecord
from shapelm.longctx.sources import load_documents


def _docs():
    rng = np.random.default_rng(1)
    return [rng.integers(1, 300, size=n, dtype=np.uint32) for n in (150, 40, 200, 130)]


def test_proofpile_matches_full_logits(tmp_path):
    model = tiny_model(vocab_size=300, max_seq_len=64)
    stream = np.concatenate([np.append(d, 0) for d in _docs()]).astype(np.uint32)
    write_token_dir(tmp_path / "tok", stream, 300, 0)
    docs = load_documents(tmp_path / "tok", min_tokens=128, num_docs=3)
    assert [d.size for d in docs] == [150, 200, 130]
    res = proofpile_perplexity(model, docs, [128, 32, 64], loss_chunk_tokens=7)
    assert res["lengths"] == [32, 64, 128]
    # what `shapelm longctx proofpile` writes is the record the results read, key order kept
    assert list(ProofpileRecord.from_dict(res).to_dict()) == list(res)
    for L in (32, 64, 128):
        nlls = []
        with torch.no_grad():
            for d in docs:
                t = torch.from_numpy(d[:L].astype(np.int64))[None]
                logits = model(t[:, :-1]).logits
                nlls.append(float(F.cross_entropy(logits[0], t[0, 1:])))
        assert res["per_document_nll"][str(L)] == pytest.approx(nlls, rel=1e-5)
        assert res["ppl"][str(L)] == pytest.approx(math.exp(np.mean(nlls)), rel=1e-5)
        assert res["mean_doc_ppl"][str(L)] >= res["ppl"][str(L)] - 1e-9  # Jensen
    with pytest.raises(DataError):
        load_documents(tmp_path / "tok", min_tokens=128, num_docs=4)
    with pytest.raises(ConfigError):
        proofpile_perplexity(model, docs, [256])


def test_text_sources(tmp_path):
    tok = tiny_tokenizer()
    rows = [{"text": english_text(n, seed=n)} for n in (5, 40, 60)]
    (tmp_path / "pp.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    docs = load_documents(tmp_path / "pp.jsonl", tok, min_tokens=300, num_docs=2)
    assert len(docs) == 2 and all(d.size >= 300 for d in docs)
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "a.txt").write_text(rows[1]["text"])
    assert load_documents(tmp_path / "txt", tok, min_tokens=10, num_docs=1)[0].tolist() == docs[0].tolist()
    with pytest.raises(DataError):
        load_documents(tmp_path / "pp.jsonl", None, min_tokens=1, num_docs=1)


def test_greedy_generate_matches_uncached_argmax():
    model = tiny_model(vocab_size=300, max_seq_len=64).eval()
    prompt = list(range(5, 40))
    out = greedy_generate(model, prompt, 12, prefill_chunk=8)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(12):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert out == ids[len(prompt):]
    assert greedy_generate(model, prompt, 12, prefill_chunk=None) == out
    stop = out[3]
    assert greedy_generate(model, prompt, 12, eos_id=stop) == out[: out.index(stop)]
