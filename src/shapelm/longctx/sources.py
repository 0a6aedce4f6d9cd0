"""Where long documents come from: token directories, text files, JSONL, the default corpus.

A *source* is one of

* a token directory (``manifest.json`` + ``*.u32``): documents are the EOS-separated runs of
  the stream (the default corpus writes every document followed by EOS);
* a ``.jsonl`` file (Proof-pile / PG19 dumps): one JSON object per line, text in ``"text"``
  (``text_key``); also ``.jsonl.gz``;
* a ``.json`` file holding ``{"text": ...}`` (RULER's ``PaulGrahamEssays.json``) or a list of such
  objects;
* a ``.txt`` file (one document) or a directory of ``.txt`` files (one document each, sorted by
  name).

Text sources need a tokenizer (``tokenizers.Tokenizer``); token directories do not.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from shapelm.errors import DataError


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (HF ``tokenizers`` or a transformers tokenizer)."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    return list(enc.ids) if hasattr(enc, "ids") else list(enc)


def decode(tokenizer, ids) -> str:
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)


def is_token_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "manifest.json").is_file()


def iter_texts(path: str | os.PathLike, text_key: str = "text") -> Iterator[str]:
    """Documents (strings) of a text source, in source order."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    if p.is_dir():
        files = sorted(p.glob("*.txt"))
        if not files:
            raise DataError(f"{p}: directory holds no .txt files (and no manifest.json)")
        for f in files:
            yield f.read_text(encoding="utf-8", errors="replace")
        return
    name = p.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{p}:{i + 1}: invalid JSON ({e})") from e
                if text_key not in obj:
                    raise DataError(f"{p}:{i + 1}: no {text_key!r} field")
                yield obj[text_key]
        return
    if name.endswith(".json"):
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{p}: invalid JSON ({e})") from e
        items = obj if isinstance(obj, list) else [obj]
        for i, item in enumerate(items):
            if not isinstance(item, dict) or text_key not in item:
                raise DataError(f"{p}: item {i} has no {text_key!r} field")
            yield item[text_key]
        return
    yield p.read_text(encoding="utf-8", errors="replace")


def token_dir_documents(path: str | os.PathLike) -> Iterator[np.ndarray]:
    """EOS-separated documents of a token directory (EOS excluded), in stream order."""
    from shapelm.data.tokens import TokenStore

    store = TokenStore(path)
    eos = store.eos_id
    chunk = 1 << 22
    carry = np.zeros(0, dtype=np.uint32)
    for start in range(0, store.n_tokens, chunk):
        a = np.concatenate([carry, store.read(start, min(chunk, store.n_tokens - start))])
        ends = np.flatnonzero(a == eos)
        prev = 0
        for e in ends:
            if e > prev:
                yield a[prev:e]
            prev = e + 1
        carry = a[prev:]
    if carry.size:
        yield carry


def iter_documents(
    source: str | os.PathLike, tokenizer=None, text_key: str = "text"
) -> Iterator[np.ndarray]:
    """Token arrays of every document of ``source`` (see module docstring), in order."""
    if is_token_dir(source):
        yield from token_dir_documents(source)
        return
    if not Path(source).exists():
        raise DataError(f"{source}: no such file or directory")
    if tokenizer is None:
        raise DataError(f"{source}: a text source needs --tokenizer (the model's tokenizer)")
    for text in iter_texts(source, text_key):
        yield np.asarray(encode(tokenizer, text), dtype=np.uint32)


def load_documents(
    source: str | os.PathLike,
    tokenizer=None,
    *,
    min_tokens: int = 131_072,
    num_docs: int = 10,
    text_key: str = "text",
) -> list[np.ndarray]:
    """The first ``num_docs`` documents of at least ``min_tokens`` tokens (Proof-pile protocol)."""
    out = []
    for doc in iter_documents(source, tokenizer, text_key):
        if doc.size >= min_tokens:
            out.append(doc)
            if len(out) == num_docs:
                break
    if len(out) < num_docs:
        raise DataError(
            f"{source}: only {len(out)} document(s) of >= {min_tokens} tokens, {num_docs} needed "
            "(lower --min-tokens / --num-docs for small corpora)"
        )
    return out


def concatenated_text(source: str | os.PathLike, tokenizer=None, max_chars: int | None = None) -> str:
    """All text of a source joined by blank lines (token dirs are decoded with ``tokenizer``)."""
    parts, n = [], 0
    if is_token_dir(source):
        if tokenizer is None:
            raise DataError(f"{source}: decoding a token directory needs --tokenizer")
        gen = (decode(tokenizer, d) for d in token_dir_documents(source))
    else:
        gen = iter_texts(source)
    for text in gen:
        parts.append(text)
        n += len(text)
        if max_chars is not None and n >= max_chars:
            break
    return "\n\n".join(parts)


def segment_stream(
    docs: Iterator[np.ndarray], seq_len: int, eos_id: int | None
) -> Iterator[np.ndarray]:
    """Concatenate documents (each followed by EOS when given) and cut ``seq_len`` segments."""
    from shapelm.data.tokens import iter_chunks

    def with_eos():
        for d in docs:
            yield d
            if eos_id is not None:
                yield np.array([eos_id], dtype=np.uint32)

    for chunk in iter_chunks(with_eos(), seq_len):
        if chunk.size == seq_len:
            yield chunk
