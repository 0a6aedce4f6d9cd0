"""The shipped OLMo-2 stage-1 data config and OLMo's v3-small perplexity sets.

``load_olmo_config()`` reads ``olmo2_stage1.yaml`` shipped in this package (path list in the
official order, seed, instance length, tokenizer ids, validation URLs): nothing from ../shared is
needed at run time. ``fetch_validation`` turns validation sets into token directories.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from shapelm.files import open_temp, publish, write_json
from shapelm.errors import DataError
from shapelm.data.sources import is_url, stream_source
from shapelm.data.tokens import MANIFEST, make_manifest

CONFIG_PATH = Path(__file__).with_name("olmo2_stage1.yaml")
PAPER_VAL_SETS = ("dolma_common-crawl", "dolma_stack", "m2d2_s2orc", "wikitext_103")


@functools.lru_cache(maxsize=1)
def _load_config() -> dict:
    import yaml

    return yaml.safe_load(CONFIG_PATH.read_text())


def load_olmo_config() -> dict:
    """The shipped config as a dict (a fresh copy): keys seed, epoch, instance_len, vocab_size,
    embedding_size, eos_id, pad_id, budgets, validation{url_template, paper_sets, sets}, paths."""
    import copy

    return copy.deepcopy(_load_config())


def olmo_paths(root: str | None = None) -> list[str]:
    """The 1,122 stage-1 sources in config order (duplicates kept: OLMo lists some files twice).

    ``root`` (a local directory or URL prefix) replaces ``http://olmo-data.org`` so a local
    mirror with the same relative layout can be used.
    """
    paths = list(_load_config()["paths"])
    if root:
        base = "http://olmo-data.org"
        paths = [str(root).rstrip("/") + p[len(base) :] if p.startswith(base) else p for p in paths]
    return paths


def read_path_list(list_path: str, root: str | None = None) -> list[str]:
    """Sources of a path list (a local file or URL; one path/URL a line, ``#`` comments).

    With ``root``, the prefix ``http://olmo-data.org`` of each line is replaced by it (as for the
    shipped list) and a relative line is taken relative to it.
    """
    if is_url(list_path):
        text = b"".join(stream_source(list_path)).decode()
    else:
        try:
            text = Path(list_path).read_text()
        except FileNotFoundError:
            raise DataError(f"{list_path}: path list not found (--paths / data.olmo.paths)") from None
    lines = [s.strip() for s in text.splitlines() if s.strip() and not s.lstrip().startswith("#")]
    if not root:
        return lines
    base, root = "http://olmo-data.org", str(root).rstrip("/")
    out = []
    for line in lines:
        if line.startswith(base):
            line = root + line[len(base) :]
        elif not is_url(line) and not line.startswith("/"):
            line = f"{root}/{line}"
        out.append(line)
    return out


def resolve_sets(sets: str | Sequence[str] | None) -> list[str]:
    """``None``/"paper" -> the paper's four; "all" -> all eleven; "a,b" or a list -> those."""
    known = list(_load_config()["validation"]["sets"])
    if sets is None or sets == "paper":
        return list(PAPER_VAL_SETS)
    if sets == "all":
        return known
    if isinstance(sets, str):
        sets = [s for s in sets.split(",") if s]
    out = list(sets)
    return out


def validation_sources(
    sets: str | Sequence[str] | None = None,
    root_or_urls: str | os.PathLike | Mapping[str, str | Sequence[str]] | None = None,
) -> dict[str, list[str]]:
    """Map each set to its source files.

    ``root_or_urls``: ``None`` -> the official URLs; a string -> a local directory or URL prefix
    laid out as ``<root>/<set>/val/part-0-00000.npy``; a mapping -> explicit sources per set
    (then ``sets`` defaults to its keys).
    """
    if isinstance(root_or_urls, Mapping):
        chosen = list(root_or_urls) if sets is None else resolve_sets(sets)
        out = {}
        for s in chosen:
            if s not in root_or_urls:
                raise DataError(f"validation set {s!r}: no source given for it")
            v = root_or_urls[s]
            out[s] = [str(v)] if isinstance(v, (str, os.PathLike)) else [str(x) for x in v]
        return out
    chosen = resolve_sets(sets)
    known = set(_load_config()["validation"]["sets"])
    template = _load_config()["validation"]["url_template"]
    out = {}
    for s in chosen:
        if root_or_urls is None:
            if s not in known:
                raise DataError(f"validation set {s!r}: not one of {sorted(known)}")
            out[s] = [template.format(set=s)]
        else:
            root = str(root_or_urls).rstrip("/")
            sep = "/" if is_url(root) else os.sep
            out[s] = [sep.join([root, s, "val", "part-0-00000.npy"])]
    return out


def copy_tokens(
    srcs: Sequence[str],
    out_dir: str | os.PathLike,
    vocab_size: int,
    eos_id: int,
    extra: dict | None = None,
    chunk_bytes: int = 1 << 24,
) -> dict:
    """Stream raw uint32 sources into a token directory (one .u32 per source), checking that
    every size is a multiple of 4 and every id is < vocab_size; errors name the source."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, src in enumerate(srcs):
        name = f"part-{i:05d}.u32"
        tmp = out / f".{name}.tmp"
        h = hashlib.sha256()
        n_bytes, mx, carry = 0, 0, b""
        with open_temp(tmp) as f:
            for b in stream_source(src, chunk_bytes):
                f.write(b)
                h.update(b)
                data = carry + b
                cut = len(data) - len(data) % 4
                arr = np.frombuffer(data[:cut], dtype="<u4")
                carry = data[cut:]
                if arr.size:
                    m = int(arr.max())
                    if m >= vocab_size:
                        pos = n_bytes // 4 + int(np.argmax(arr >= vocab_size))
                        f.close()
                        tmp.unlink()
                        raise DataError(
                            f"{src}: token id {m} at position {pos} >= vocab_size {vocab_size} "
                            "(not uint32 dolma2 token data?)"
                        )
                    mx = max(mx, m)
                n_bytes += cut
            f.flush()
            os.fsync(f.fileno())
        if carry:
            tmp.unlink()
            raise DataError(
                f"{src}: {n_bytes + len(carry)} bytes is not a multiple of 4; not uint32 token data"
            )
        publish(tmp, out / name)
        files.append({"path": name, "n_tokens": n_bytes // 4, "sha256": h.hexdigest(), "max_id": mx})
    manifest = make_manifest(files, vocab_size, eos_id, {"sources": list(srcs), **(extra or {})})
    write_json(out / MANIFEST, manifest, indent=1)
    return manifest


def fetch_validation(
    sets: str | Sequence[str] | None = None,
    root_or_urls: str | os.PathLike | Mapping[str, str | Sequence[str]] | None = None,
    out_dir: str | os.PathLike = "data/validation",
    *,
    vocab_size: int | None = None,
    eos_id: int | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Convert each validation set into the token directory ``out_dir/<set>/``.

    Default sets: the paper's four (dolma_common-crawl, dolma_stack, m2d2_s2orc, wikitext_103).
    Sources per :func:`validation_sources`. A set whose manifest already exists is skipped
    unless ``overwrite``. Returns ``{set: token_dir}``. Each dir's manifest has
    ``seq_len: 4096`` (OLMo evaluates these in 4096-token instances).
    """
    cfg = _load_config()
    vocab_size = cfg["vocab_size"] if vocab_size is None else vocab_size
    eos_id = cfg["eos_id"] if eos_id is None else eos_id
    out = {}
    for name, srcs in validation_sources(sets, root_or_urls).items():
        d = Path(out_dir) / name
        if (d / MANIFEST).exists() and not overwrite:
            out[name] = d
            continue
        copy_tokens(
            srcs,
            d,
            vocab_size,
            eos_id,
            {"kind": "validation", "name": name, "seq_len": cfg["instance_len"]},
        )
        out[name] = d
    return out
