"""Where long documents come from: token directories, text files, JSONL, parquet, the HF cache.

A *source* is one of

* a token directory (``manifest.json`` + ``*.u32``): documents are the EOS-separated runs of
  the stream (the default corpus writes every document followed by EOS);
* a ``.jsonl`` file (Proof-pile / PG19 dumps): one JSON object per line, text in ``"text"``
  (``text_key``); also ``.jsonl.gz``;
* a ``.parquet`` file (HF datasets: ``emozilla/pg19``): one document per row, column ``"text"``;
* a ``.json`` file holding ``{"text": ...}`` (RULER's ``PaulGrahamEssays.json``) or a list of such
  objects;
* a ``.txt`` file (one document);
* a directory of such files (sorted by name; with a ``split``, its ``<split>/`` subdirectory or
  the files named ``<split>-*`` / ``<split>.*``: :func:`shapelm.longctx.inputs.data_files`);
* ``hf:OWNER/NAME[/SUBDIR]``: a dataset repo in the local HF hub cache, read as a directory;
* through Hugging Face ``datasets`` (the split is the input's, e.g. PG19 ``train``, Proof-pile
  ``test``):

  - ``datasets:OWNER/NAME[:CONFIG]``: ``datasets.load_dataset(OWNER/NAME, CONFIG, split=...)``;
    with ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` (no network here) it is read from the
    datasets cache (``$HF_DATASETS_CACHE``) a previous load left;
  - ``datasets:hf:OWNER/NAME[/SUBDIR]`` or ``datasets:DIR``: the cached hub snapshot (or a local
    directory) loaded by ``datasets`` as a local dataset (its own data-file and split patterns);
  - a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
    (``state.json`` / ``dataset_dict.json``), read with ``datasets.load_from_disk``.

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
from shapelm.longctx.inputs import data_files, resolve_input


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (HF ``tokenizers`` or a transformers tokenizer)."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    return list(enc.ids) if hasattr(enc, "ids") else list(enc)


def decode(tokenizer, ids) -> str:
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)


RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".json")


def is_token_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "manifest.json").is_file()


DATASETS_PREFIX = "datasets:"


def is_saved_dataset(path: str | os.PathLike) -> bool:
    """A directory ``datasets``' ``save_to_disk`` wrote (a Dataset or a DatasetDict)."""
    p = Path(path)
    return p.is_dir() and ((p / "state.json").is_file() or (p / "dataset_dict.json").is_file())


def is_datasets_source(source: str | os.PathLike) -> bool:
    return str(source).startswith(DATASETS_PREFIX) or is_saved_dataset(source)


def load_hf_dataset(source: str | os.PathLike, split: str | None = None):
    """The ``datasets.Dataset`` of a ``datasets`` source (see the module docstring), one split."""
    import datasets

    spec = str(source)
    try:
        if is_saved_dataset(spec):
            ds = datasets.load_from_disk(spec)
        else:
            target = spec[len(DATASETS_PREFIX):]
            local = target.startswith(("hf:", "/", ".", "~")) or Path(target).expanduser().exists()
            if local:
                ds = datasets.load_dataset(str(resolve_input(target)), split=split)
            else:
                path, _, config = target.partition(":")
                ds = datasets.load_dataset(path, config or None, split=split)
    except DataError:
        raise
    except Exception as e:  # datasets raises ConnectionError offline, FileNotFoundError, ValueError...
        offline = " (offline: only what the datasets cache holds can load)" if datasets.config.HF_HUB_OFFLINE \
            else ""
        raise DataError(f"{spec}: datasets cannot load it{offline}: {e}") from e
    if isinstance(ds, datasets.DatasetDict):
        if split in ds:
            return ds[split]
        if split is None and len(ds) == 1:
            return next(iter(ds.values()))
        raise DataError(f"{spec}: no split {split!r} (it has {', '.join(ds)})")
    return ds


def datasets_problem(source: str | os.PathLike) -> str | None:
    """Why a ``datasets`` source cannot load, or None; reads no rows (a hub id: its builder only)."""
    spec = str(source)
    if is_saved_dataset(spec):
        return None
    target = spec[len(DATASETS_PREFIX):]
    if target.startswith(("hf:", "/", ".", "~")) or Path(target).expanduser().exists():
        try:
            resolve_input(target)
        except DataError as e:
            return str(e)
        return None
    import datasets

    path, _, config = target.partition(":")
    try:
        datasets.load_dataset_builder(path, config or None)
    except Exception as e:  # as in load_hf_dataset
        return f"{spec}: datasets cannot load it ({e.__class__.__name__}: {e})"
    return None


def iter_texts(source: str | os.PathLike, text_key: str = "text", split: str | None = None) -> Iterator[str]:
    """Documents (strings) of a text source, in source order (a file that is not
    ``.jsonl(.gz)`` / ``.parquet`` / ``.json`` is one plain-text document)."""
    if is_datasets_source(source):
        ds = load_hf_dataset(source, split)
        if text_key not in ds.column_names:
            raise DataError(f"{source}: no {text_key!r} column (it has {', '.join(ds.column_names)})")
        for rec in ds:
            yield rec[text_key]
        return
    for f in source_files(source, split):
        if not f.name.lower().endswith(RECORD_SUFFIXES):
            yield f.read_text(encoding="utf-8", errors="replace")
            continue
        for where, rec in iter_file_records(f):
            if not isinstance(rec, dict) or text_key not in rec:
                raise DataError(f"{where}: no {text_key!r} field")
            yield rec[text_key]


def source_files(source: str | os.PathLike, split: str | None = None) -> list[Path]:
    """The files of a source (a file, a directory's data files, a cached hub repo's)."""
    p = resolve_input(source)
    return data_files(p, split) if p.is_dir() else [p]


def iter_records(source: str | os.PathLike, split: str | None = None) -> Iterator[dict]:
    """Rows of a table-like source (``.jsonl(.gz)``, ``.parquet``, a ``.json`` list, a ``datasets``
    source), in order."""
    if is_datasets_source(source):
        yield from load_hf_dataset(source, split)
        return
    for f in source_files(source, split):
        for _, rec in iter_file_records(f):
            yield rec


def iter_file_records(f: Path) -> Iterator[tuple[str, object]]:
    """(location for errors, record) of one ``.jsonl(.gz)`` / ``.parquet`` / ``.json`` file."""
    name = f.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if not line.strip():
                    continue
                try:
                    yield f"{f}:{i + 1}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{f}:{i + 1}: invalid JSON ({e})") from e
    elif name.endswith(".parquet"):
        yield from _parquet_records(f)
    elif name.endswith(".json"):
        try:
            obj = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{f}: invalid JSON ({e})") from e
        items = obj if isinstance(obj, list) else [obj]
        for i, item in enumerate(items):
            yield f"{f}: item {i}", item
    else:
        raise DataError(f"{f}: not a .jsonl(.gz), .parquet or .json file")


def _parquet_records(f: Path, batch_rows: int = 64) -> Iterator[tuple[str, dict]]:
    # Batches of rows: a PG19 parquet shard holds ~1,000 books (~400 MB of text).
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(f)
    except Exception as e:  # pyarrow raises ArrowInvalid for a file that is not parquet
        raise DataError(f"{f}: cannot be read as parquet ({e})") from e
    row = 0
    for batch in table.iter_batches(batch_size=batch_rows):
        for rec in batch.to_pylist():
            yield f"{f}: row {row}", rec
            row += 1


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
    source: str | os.PathLike, tokenizer=None, text_key: str = "text", split: str | None = None,
    batch_docs: int = 32,
) -> Iterator[np.ndarray]:
    """Token arrays of every document of ``source`` (see module docstring), in order.

    Text is tokenized ``batch_docs`` documents at a time with ``encode_batch``, which runs on
    every CPU of the job (one document at a time would tokenize PG19 on one core)."""
    if is_token_dir(source):
        yield from token_dir_documents(source)
        return
    if not is_datasets_source(source):
        resolve_input(source)  # a missing path or hub repo fails before the tokenizer check
    if tokenizer is None:
        raise DataError(f"{source}: a text source needs --tokenizer (the model's tokenizer)")
    batch: list[str] = []
    for text in iter_texts(source, text_key, split):
        batch.append(text)
        if len(batch) == batch_docs:
            yield from encode_many(tokenizer, batch)
            batch = []
    if batch:
        yield from encode_many(tokenizer, batch)


def encode_many(tokenizer, texts: list[str]) -> list[np.ndarray]:
    """``encode`` of several texts; HF ``tokenizers`` encodes them in parallel."""
    if hasattr(tokenizer, "encode_batch"):
        encs = tokenizer.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encs]
    return [np.asarray(encode(tokenizer, t), dtype=np.uint32) for t in texts]


def load_documents(
    source: str | os.PathLike,
    tokenizer=None,
    *,
    min_tokens: int = 131_072,
    num_docs: int = 10,
    text_key: str = "text",
    split: str | None = "test",
) -> list[np.ndarray]:
    """The first ``num_docs`` documents of at least ``min_tokens`` tokens (Proof-pile protocol:
    its ``test`` split when the source holds several)."""
    out = []
    for doc in iter_documents(source, tokenizer, text_key, split):
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


def input_problem(spec: str | os.PathLike, split: str | None = None) -> str | None:
    """Why ``spec`` cannot be read, or None; reads no data (a directory listing at most)."""
    if is_datasets_source(spec):
        return datasets_problem(spec)
    try:
        p = resolve_input(spec)
        if p.is_dir() and not (p / "manifest.json").is_file():
            data_files(p, split)
    except DataError as e:
        return str(e)
    return None
