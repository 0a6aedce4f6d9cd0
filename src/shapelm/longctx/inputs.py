"""Where the long-context inputs live: local paths, or dataset repos in the local HF hub cache.

An input spec (config ``longctx.pg19`` ..., or ``--data`` / ``--docs`` / ``--essays`` ...) is

* a local path: a file, or a directory of data files (see :func:`data_files`);
* ``hf:OWNER/NAME[/SUBDIR]``: the dataset repo OWNER/NAME as the workflow's ``fetch`` job (or
  ``hf download --repo-type dataset OWNER/NAME``) leaves it in the local hub cache (``$HF_HUB_CACHE``,
  ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``: ``datasets--OWNER--NAME/snapshots/<rev>/``,
  the revision ``refs/main`` names, else the newest snapshot), SUBDIR a folder inside the
  snapshot. Nothing is downloaded here (jobs run with no network; HF_HUB_OFFLINE=1): the
  ``fetch`` jobs (shapelm.commands.fetch) download on the host running Snakemake.

The real inputs, their layouts and the spec to give (docs/LONG_CONTEXT.md):

* pg19: HF ``emozilla/pg19``, ``data/{train,validation,test}-*.parquet`` with a ``text`` column
  (one book a row): ``hf:emozilla/pg19/data``; or deepmind's ``gs://deepmind-gutenberg`` copy
  (``train/<id>.txt``, one book a file): the folder holding ``train/``.
* proofpile: HF ``hoskinson-center/proof-pile``, ``test/proofpile_test.jsonl.gz`` (``{"text",
  "meta"}`` a line): ``hf:hoskinson-center/proof-pile``.
* essays: RULER's ``PaulGrahamEssays.json`` (``{"text": all essays}``): its path.
* squad: SQuAD v2 dev ``dev-v2.0.json`` (RULER saves it as ``squad.json``): its path; or HF
  ``rajpurkar/squad_v2`` rows (``squad_v2/validation-*.parquet``): ``hf:rajpurkar/squad_v2/squad_v2``.
* hotpotqa: ``hotpot_dev_distractor_v1.json`` (RULER: ``hotpotqa.json``): its path; or HF
  ``hotpotqa/hotpot_qa`` rows (``distractor/validation-*.parquet``):
  ``hf:hotpotqa/hotpot_qa/distractor``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from shapelm.errors import DataError

HUB_PREFIX = "hf:"

#: The split each input is read from when a directory holds several (PG19 trains on `train`,
#: Proof-pile is evaluated on `test`, RULER's QA uses the dev sets).
INPUT_SPLITS: dict[str, str | None] = {
    "pg19": "train",
    "proofpile": "test",
    "essays": None,
    "squad": "validation",
    "hotpotqa": "validation",
    "words": None,
}

#: Data file suffixes a directory source may hold (lower case).
DATA_SUFFIXES = (".txt", ".json", ".jsonl", ".jsonl.gz", ".parquet")
_SPLIT_NAME = re.compile(r"^(train|validation|valid|val|dev|test)(?=[-_.])", re.IGNORECASE)
_SPLIT_ALIASES = {"valid": "validation", "val": "validation", "dev": "validation"}


def hub_cache_dirs() -> list[Path]:
    """The hub caches searched, in order (the same as for tokenizers)."""
    from shapelm.data.tokenizer import _hf_cache_dirs

    return _hf_cache_dirs()


def parse_hub(spec: str | os.PathLike) -> tuple[str, str] | None:
    """``"hf:OWNER/NAME/SUB/DIR"`` -> ``("OWNER/NAME", "SUB/DIR")``; None for a local path."""
    s = str(spec)
    if not s.startswith(HUB_PREFIX):
        return None
    parts = [p for p in s[len(HUB_PREFIX):].split("/") if p]
    if len(parts) < 2:
        raise DataError(f"{s!r}: a hub input is hf:OWNER/NAME[/SUBDIR]")
    return "/".join(parts[:2]), "/".join(parts[2:])


def hub_snapshot(repo: str) -> Path | None:
    """The cached snapshot of dataset repo ``repo`` (refs/main's, else the newest), or None; read
    with ``huggingface_hub.scan_cache_dir`` (its own reading of the cache layout, no network)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    name = "datasets--" + repo.replace("/", "--")
    for cache in hub_cache_dirs():
        if not (cache / name / "snapshots").is_dir():
            continue  # the scan below reads the whole cache: only where this repo is
        try:
            info = scan_cache_dir(cache)
        except CacheNotFound:
            continue
        for cached in info.repos:
            if cached.repo_type == "dataset" and cached.repo_id == repo and cached.revisions:
                best = max(cached.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
                return Path(best.snapshot_path)
    return None


def resolve_input(spec: str | os.PathLike) -> Path:
    """The local file or directory a spec names; a hub repo missing from the cache is an error
    naming the caches searched."""
    hub = parse_hub(spec)
    if hub is None:
        p = Path(spec).expanduser()
        if not p.exists():
            raise DataError(f"{p}: no such file or directory")
        return p
    repo, sub = hub
    snap = hub_snapshot(repo)
    if snap is None:
        searched = ", ".join(str(c / ("datasets--" + repo.replace("/", "--"))) for c in hub_cache_dirs())
        raise DataError(
            f"{spec}: dataset {repo} is not in the local HF cache (searched {searched}); "
            f"the workflow's fetch job downloads it (or: hf download --repo-type dataset {repo})"
        )
    p = snap / sub if sub else snap
    if not p.exists():
        raise DataError(f"{spec}: {sub!r} is not in the cached snapshot {snap}")
    return p


def split_of(name: str) -> str | None:
    """The split a file name announces (``train-00001-of-00023.parquet`` -> ``train``)."""
    m = _SPLIT_NAME.match(name)
    if not m:
        return None
    s = m.group(1).lower()
    return _SPLIT_ALIASES.get(s, s)


def is_data_file(p: Path) -> bool:
    return p.is_file() and not p.name.startswith(".") and p.name.lower().endswith(DATA_SUFFIXES)


def data_files(directory: str | os.PathLike, split: str | None = None) -> list[Path]:
    """The data files a directory source stands for, sorted by name.

    With a ``split``: a ``<split>/`` subdirectory is used if there is one (deepmind's PG19
    ``train/``, Proof-pile's ``test/``); among files whose names start with a split
    (``train-*.parquet``, ``test.jsonl``) only that split's are kept.
    """
    d = Path(directory)
    want = _SPLIT_ALIASES.get(split, split) if split else None
    if split and (d / split).is_dir():
        d = d / split
    files = sorted(p for p in d.iterdir() if is_data_file(p))
    if not files:
        subdirs = sorted(p.name + "/" for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        wanted = f" and no {split!r} subdirectory" if split else ""
        raise DataError(f"{d}: no data files ({', '.join(DATA_SUFFIXES)}){wanted} here"
                        + (f" (it holds {', '.join(subdirs[:6])})" if subdirs else ""))
    named = [f for f in files if split_of(f.name)]
    if want and named:
        files = [f for f in named if split_of(f.name) == want]
        if not files:
            raise DataError(f"{d}: no {split!r} files among {[f.name for f in named][:6]}")
    return files
