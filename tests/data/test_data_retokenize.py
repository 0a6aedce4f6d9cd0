"""Re-tokenizing a token dir: exact against a direct implementation, chunk-invariant, resumable."""

import json

import numpy as np
import pytest

from shapelm.data import corpus, retokenize as rt
from shapelm.data.cli import main as data_cli
from shapelm.data.tokenizer import tokenizer_eos_id, train_bpe
from shapelm.data.tokens import TokenStore, read_manifest, write_token_dir
from shapelm.errors import DataError

INSTANCE = 64  # a small "OLMo instance" so every document crosses boundaries


@pytest.fixture(scope="module")
def texts():
    docs = sorted(corpus.wiki_documents(), key=lambda d: d.name)[:40]
    texts = [d.text[:1500] for d in docs]
    texts[3] = "An HTML strike tag </s> and <|endoftext|> are text here.\n" + texts[3]
    return texts


@pytest.fixture(scope="module")
def toks(tmp_path_factory, texts):
    """A dolma2-like source (EOS appended after the vocabulary) and a Llama-like target."""
    d = tmp_path_factory.mktemp("tok")
    train_bpe(texts, 700, d / "src" / "tokenizer.json", special_tokens=(),
              added_tokens=("<|endoftext|>", "<|pad|>"))
    train_bpe(texts, 300, d / "tgt" / "tokenizer.json", special_tokens=("<unk>", "<s>", "</s>"))
    (d / "tgt" / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return d / "src" / "tokenizer.json", d / "tgt" / "tokenizer.json"


def encode_docs(tok, texts, eos):
    tok.encode_special_tokens = True
    return np.concatenate([np.array(tok.encode(t, add_special_tokens=False).ids + [eos], dtype=np.uint32)
                           for t in texts])


@pytest.fixture(scope="module")
def slice_dir(tmp_path_factory, toks, texts):
    src = rt.TokenizerSpec.open(toks[0])
    ids = encode_docs(src.tok, texts, src.eos_id)
    n = ids.size // INSTANCE * INSTANCE
    d = tmp_path_factory.mktemp("slice") / "slice"
    write_token_dir(d, ids[:n], 100278, 100257,
                    {"kind": "olmo-slice", "instance_len": INSTANCE, "seq_len": INSTANCE})
    return d


def reference(tokens, src, tgt, boundary):
    """The rule spelled out: pieces end after EOS and at instance boundaries; each piece is
    decoded and re-encoded on its own; EOS follows a piece exactly where the source had one."""
    out, piece = [], []
    for i, t in enumerate(tokens.tolist()):
        if t == src.eos_id:
            out += tgt.tok.encode(src.tok.decode(piece), add_special_tokens=False).ids + [tgt.eos_id]
            piece = []
        else:
            piece.append(t)
        if boundary and (i + 1) % boundary == 0 and piece:
            out += tgt.tok.encode(src.tok.decode(piece), add_special_tokens=False).ids
            piece = []
    if piece:
        out += tgt.tok.encode(src.tok.decode(piece), add_special_tokens=False).ids
    return np.array(out, dtype=np.uint32)


def test_eos_comes_from_the_tokenizer_files(toks):
    src, tgt = rt.TokenizerSpec.open(toks[0]), rt.TokenizerSpec.open(toks[1])
    assert (src.eos_id, src.vocab_size) == (700, 702)  # after the vocabulary, like dolma2's
    assert (tgt.eos_id, tgt.vocab_size) == (2, 300)  # tokenizer_config.json: </s>, like Llama's
    bad = toks[1].parent / "tokenizer_config.json"
    saved = bad.read_text()
    bad.write_text(json.dumps({"eos_token": "<eot>"}))
    try:
        with pytest.raises(DataError, match=r"tokenizer_config\.json: eos_token '<eot>' is not in"):
            tokenizer_eos_id(tgt.tok, toks[1])
    finally:
        bad.write_text(saved)


def test_matches_the_rule_and_keeps_order(slice_dir, toks, tmp_path):
    src, tgt = rt.TokenizerSpec.open(toks[0]), rt.TokenizerSpec.open(toks[1])
    m = rt.retokenize(slice_dir, tmp_path / "out", toks[0], toks[1], progress=False)
    store = TokenStore(tmp_path / "out", verify=True)
    source = TokenStore(slice_dir).read(0, TokenStore(slice_dir).n_tokens)
    want = reference(source, src, tgt, INSTANCE)
    np.testing.assert_array_equal(store.read(0, store.n_tokens), want)
    assert m["vocab_size"] == 300 and m["eos_id"] == 2 and m["kind"] == "retokenized"
    # one target EOS per source EOS: document 3's literal "</s>" stayed text
    assert int((want == 2).sum()) == int((source == src.eos_id).sum()) == m["n_documents"]
    assert m["source"]["eos_id"] == 700 and m["source"]["instance_len"] == INSTANCE
    assert m["source"]["tokens_used"] == source.size


def test_chunk_and_part_sizes_do_not_change_the_stream(slice_dir, toks, tmp_path):
    rt.retokenize(slice_dir, tmp_path / "a", toks[0], toks[1], progress=False)
    m = rt.retokenize(slice_dir, tmp_path / "b", toks[0], toks[1], progress=False,
                      chunk_tokens=INSTANCE, part_tokens=5 * INSTANCE)
    a, b = TokenStore(tmp_path / "a"), TokenStore(tmp_path / "b")
    assert len(m["files"]) > 3
    np.testing.assert_array_equal(a.read(0, a.n_tokens), b.read(0, b.n_tokens))


def test_validation_stream_without_boundaries(toks, texts, tmp_path):
    """A validation set is one contiguous document stream: pieces end only at EOS, also when a
    document is longer than a chunk."""
    src, tgt = rt.TokenizerSpec.open(toks[0]), rt.TokenizerSpec.open(toks[1])
    ids = encode_docs(src.tok, texts[:12], src.eos_id)
    write_token_dir(tmp_path / "val", ids, 100278, 100257,
                    {"kind": "validation", "name": "wikitext_103", "seq_len": 4096})
    m = rt.retokenize(tmp_path / "val", tmp_path / "out", toks[0], toks[1], progress=False,
                      chunk_tokens=50, part_tokens=120)
    got = TokenStore(tmp_path / "out").read(0, m["n_tokens"])
    np.testing.assert_array_equal(got, reference(ids, src, tgt, None))
    assert m["name"] == "wikitext_103" and m["seq_len"] == 4096 and m["source"]["instance_len"] is None


def test_budget_windows_and_short_source(slice_dir, toks, tmp_path):
    m = rt.retokenize(slice_dir, tmp_path / "ok", toks[0], toks[1], n_tokens=1000, seq_len=128,
                      chunk_tokens=INSTANCE, progress=False)
    assert m["n_tokens"] == 1024 and m["seq_len"] == 128 and m["requested_tokens"] == 1000
    assert m["source"]["tokens_used"] < TokenStore(slice_dir).n_tokens  # reading stops after the chunk that fills it
    full = TokenStore(slice_dir).n_tokens
    with pytest.raises(DataError, match=r"scales\.tapered440M: .* re-encodes to only [\d,]+ .* "
                                        r"windows of 128 need .*; raise scales\.tapered440M"):
        rt.retokenize(slice_dir, tmp_path / "short", toks[0], toks[1], n_tokens=100 * full,
                      seq_len=128, context="scales.tapered440M",
                      hint="raise scales.tapered440M.data.retokenize.over_slice", progress=False)


def test_resumes_after_an_interruption(slice_dir, toks, tmp_path, monkeypatch):
    kw = dict(progress=False, chunk_tokens=INSTANCE, part_tokens=4 * INSTANCE)
    want = rt.retokenize(slice_dir, tmp_path / "ref", toks[0], toks[1], **kw)
    real, calls = rt.retokenize_chunk, {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 11:  # in the third part
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(rt, "retokenize_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        rt.retokenize(slice_dir, tmp_path / "out", toks[0], toks[1], **kw)
    prog = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert len(prog["parts"]) == 2 and not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out").glob(".*.tmp"))
    monkeypatch.setattr(rt, "retokenize_chunk", real)
    got = rt.retokenize(slice_dir, tmp_path / "out", toks[0], toks[1], **kw)
    assert [f["sha256"] for f in got["files"]] == [f["sha256"] for f in want["files"]]
    # a different plan in the same directory is refused, naming what differs
    (tmp_path / "out" / "manifest.json").unlink()
    with pytest.raises(DataError, match=r"different plan .*need"):
        rt.retokenize(slice_dir, tmp_path / "out", toks[0], toks[1], n_tokens=640, seq_len=64, **kw)


def test_source_ids_outside_the_source_tokenizer(toks, tmp_path):
    write_token_dir(tmp_path / "bad", np.array([5, 6, 5000, 700], dtype=np.uint32), 100278, 100257)
    with pytest.raises(DataError, match=r"token id 5000 at stream position 2 >= 702, the vocabulary "
                                        r"of source tokenizer"):
        rt.retokenize(tmp_path / "bad", tmp_path / "out", toks[0], toks[1], progress=False)


def test_cli(slice_dir, toks, tmp_path, capsys):
    assert data_cli(["data", "retokenize", str(slice_dir), str(tmp_path / "o"), "--source-tokenizer",
                     str(toks[0]), "--tokenizer", str(toks[1]), "--tokens", "500", "--seq-len", "100",
                     "--quiet"]) == 0
    assert read_manifest(tmp_path / "o")["n_tokens"] == 500
    assert "500 tokens" in capsys.readouterr().out
