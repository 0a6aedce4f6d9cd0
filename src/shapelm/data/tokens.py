"""Token directories: the data -> train/eval contract of docs/ARCHITECTURE.md.

A token directory holds ``manifest.json`` and one or more raw, headerless, little-endian
``uint32`` files (``*.u32``), exactly OLMo's on-disk format::

    {"format": "shapelm-tokens-v1", "dtype": "uint32", "vocab_size": 100278, "eos_id": 100257,
     "files": [{"path": "part-00000.u32", "n_tokens": 123, "sha256": "...", "max_id": 100257}],
     "n_tokens": 123, ...extra keys (sources, instance_ids, seq_len, ...)}

The stream (all files concatenated in manifest order) is already in training order.
:class:`TokenStore` memory-maps the files and validates them on open; nothing is loaded whole.

Every file entry records one checksum of its bytes, named by its key (:data:`CHECKSUMS`):
``sha256`` (:func:`write_token_dir`, retokenized directories, and OLMo slices written before the
slicer changed), or ``xxh3_128`` (OLMo slices: gigabytes written at the speed of a copy, which
sha256 at ~0.5 GB/s per core would halve; benchmarks/slice_throughput.py). xxh3-128 catches any
accidental change of the bytes (a torn write, bit rot, a truncated copy), not a deliberate forgery.
:meth:`TokenStore.verify_checksums` verifies either; :func:`file_checksum` is the one string per
file that identities (resume keys, provenance, a retokenized source) are made of.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shapelm.errors import DataError
from shapelm.files import write_bytes, write_json

FORMAT = "shapelm-tokens-v1"
MANIFEST = "manifest.json"
DTYPE = np.dtype("<u4")
#: tokens per chunk when scanning ids or hashing (64 MiB of uint32)
SCAN_CHUNK = 1 << 24


def digest_file(path: str | os.PathLike, *hashers, chunk_bytes: int = 1 << 24) -> None:
    """Feed every byte of a file to each of `hashers` (hashlib-like), in one read."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            for h in hashers:
                h.update(view[:n])


def sha256_file(path: str | os.PathLike, chunk_bytes: int = 1 << 24) -> str:
    """sha256 hex digest of a file, read in chunks."""
    h = hashlib.sha256()
    digest_file(path, h, chunk_bytes=chunk_bytes)
    return h.hexdigest()


def fast_hash():
    """The hash a token file is re-verified with at every start: xxh3-128 runs at the speed
    of reading the file (benchmarks/token_verify.py), sha256 at a third of it. Not a
    cryptographic hash: it is compared with the value computed in the same pass as the sha256
    that matched the manifest, to catch bytes that changed since (bit rot, an edit)."""
    import xxhash

    return xxhash.xxh3_128()


#: A file entry's checksum keys, each with its hash (hashlib-like); an entry records one of them.
CHECKSUMS = {"sha256": hashlib.sha256, "xxh3_128": fast_hash}


def checksum_algorithm(entry: dict, where: str | os.PathLike) -> str:
    """The key of :data:`CHECKSUMS` a manifest file entry records (sha256 when both are)."""
    for algorithm in CHECKSUMS:
        if isinstance(entry.get(algorithm), str):
            return algorithm
    raise DataError(f"{where}: no {' or '.join(CHECKSUMS)} in the manifest to verify against")


def file_checksum(entry: dict) -> str | None:
    """The checksum a manifest file entry records, as one string: the sha256 hex digest as it
    always was (so identities made of sha256 manifests keep their values), ``xxh3_128:<hex>``
    for an xxh3-128 entry (never equal to a sha256), None for an entry with neither."""
    if isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    if isinstance(entry.get("xxh3_128"), str):
        return f"xxh3_128:{entry['xxh3_128']}"
    return None


def as_token_array(arr: Any, vocab_size: int, name: str) -> np.ndarray:
    """Convert ``arr`` to a contiguous little-endian uint32 array, checking ids are valid."""
    a = np.asarray(arr)
    if a.dtype.kind not in "ui":
        raise DataError(f"{name}: token array has dtype {a.dtype}, expected an integer dtype")
    a = a.reshape(-1)
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0:
            pos = int(np.argmin(a))
            raise DataError(f"{name}: negative token id {lo} at position {pos}")
        if hi >= vocab_size:
            pos = int(np.argmax(a >= vocab_size))
            raise DataError(
                f"{name}: token id {int(a[pos])} at position {pos} >= vocab_size {vocab_size}"
            )
    return np.ascontiguousarray(a, dtype=DTYPE)


def write_token_dir(
    path: str | os.PathLike,
    arrays_or_iterable: Any,
    vocab_size: int,
    eos_id: int,
    extra_manifest: dict | None = None,
    *,
    overwrite: bool = True,
) -> dict:
    """Write a token directory and return its manifest.

    ``arrays_or_iterable`` is one integer array or an iterable of arrays; each array becomes one
    file ``part-XXXXX.u32`` (empty arrays are skipped). Every file is written to a temp file and
    renamed into place; ``manifest.json`` is written last (also atomically), so a directory
    without a manifest is incomplete. ``extra_manifest`` keys are merged into the manifest.
    """
    path = Path(path)
    if (path / MANIFEST).exists() and not overwrite:
        raise DataError(f"{path / MANIFEST}: token directory already exists")
    if not 0 <= eos_id < vocab_size:
        raise DataError(f"{path}: eos_id {eos_id} outside vocab_size {vocab_size}")
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(arrays_or_iterable, np.ndarray):
        arrays_or_iterable = [arrays_or_iterable]
    files = []
    for arr in arrays_or_iterable:
        name = f"part-{len(files):05d}.u32"
        a = as_token_array(arr, vocab_size, str(path / name))
        if a.size == 0:
            continue
        write_bytes(path / name, memoryview(a).cast("B"))
        files.append(
            {
                "path": name,
                "n_tokens": int(a.size),
                "sha256": hashlib.sha256(memoryview(a).cast("B")).hexdigest(),
                "max_id": int(a.max()),
            }
        )
    manifest = make_manifest(files, vocab_size, eos_id, extra_manifest)
    write_json(path / MANIFEST, manifest, indent=1)
    return manifest


def make_manifest(files: list[dict], vocab_size: int, eos_id: int, extra: dict | None) -> dict:
    manifest = {
        "format": FORMAT,
        "dtype": "uint32",
        "vocab_size": int(vocab_size),
        "eos_id": int(eos_id),
        "files": files,
        "n_tokens": int(sum(f["n_tokens"] for f in files)),
    }
    for k, v in (extra or {}).items():
        if k in manifest:
            raise DataError(f"extra_manifest key {k!r} would overwrite a core manifest key")
        manifest[k] = v
    return manifest


def read_manifest(path: str | os.PathLike) -> dict:
    mpath = Path(path) / MANIFEST
    if not mpath.is_file():
        raise DataError(f"{mpath}: missing (not a token directory, or an unfinished write)")
    try:
        return json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{mpath}: invalid JSON ({e})") from e


def confined_path(name: Any, manifest: Path) -> str:
    """A manifest's file path, refused unless it is a plain relative path inside the
    manifest's directory (no absolute path, no `..`): a manifest is data and must not make
    training read files elsewhere."""
    if not isinstance(name, str) or not name:
        raise DataError(f"{manifest}: file path {name!r} is not a non-empty string")
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts or "\0" in name:
        raise DataError(
            f"{manifest}: file path {name!r} points outside the manifest's directory; token "
            "files must lie in the directory (relative paths without '..')"
        )
    return name


def _whole(value: Any) -> bool:
    """An integer (not a bool, not a float, not a string of digits)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def validate_manifest(m: Any, directory: str | os.PathLike) -> list[tuple[dict, Path]]:
    """Every check of a token directory's manifest that needs no token file read, each failure
    one DataError line naming the manifest and the key: a JSON object of format and dtype this
    module writes; `vocab_size` a whole number > 0 and `eos_id` one in [0, vocab_size); `files`
    a list of objects, each with a plain relative `path` (no absolute path, no `..`) listed once,
    that is not a symlink leading out of the directory, a whole `n_tokens` >= 0 and (if given) a
    whole `max_id` < vocab_size; `n_tokens` their sum. Returns (entry, file path) per file."""
    directory = Path(directory)
    where = directory / MANIFEST
    if not isinstance(m, dict):
        raise DataError(f"{where}: a {type(m).__name__}, expected a JSON object")
    if m.get("format") != FORMAT:
        raise DataError(f"{where}: format {m.get('format')!r}, expected {FORMAT!r}")
    if m.get("dtype") != "uint32":
        raise DataError(
            f"{where}: dtype {m.get('dtype')!r}; only 'uint32' token files are supported "
            "(OLMo's memmap_dtype for dolma2 ids, which do not fit in uint16)"
        )
    for key in ("vocab_size", "eos_id", "files", "n_tokens"):
        if key not in m:
            raise DataError(f"{where}: missing key {key!r}")
    vocab = m["vocab_size"]
    if not _whole(vocab) or vocab <= 0:
        raise DataError(f"{where}: vocab_size {vocab!r} is not a whole number > 0")
    if not _whole(m["eos_id"]) or not 0 <= m["eos_id"] < vocab:
        raise DataError(f"{where}: eos_id {m['eos_id']!r} is not a token id in [0, {vocab})")
    if not isinstance(m["files"], list):
        raise DataError(f"{where}: files is a {type(m['files']).__name__}, expected a list")
    root = directory.resolve()
    entries, seen = [], {}
    for k, entry in enumerate(m["files"]):
        if not isinstance(entry, dict):
            raise DataError(f"{where}: files[{k}] is a {type(entry).__name__}, expected an object")
        name = confined_path(entry.get("path"), where)
        key = Path(os.path.normpath(name)).as_posix()
        if key in seen:
            raise DataError(f"{where}: files[{k}] {name!r} is listed already as files[{seen[key]}] "
                            f"(its tokens would be trained on twice)")
        seen[key] = k
        f = directory / name
        if root not in f.resolve().parents:
            raise DataError(f"{where}: files[{k}] {name!r} is a link to {f.resolve()}, outside "
                            f"the token directory")
        n = entry.get("n_tokens")
        if not _whole(n) or n < 0:
            raise DataError(f"{where}: files[{k}].n_tokens {n!r} is not a whole number >= 0")
        if "max_id" in entry and (not _whole(entry["max_id"]) or entry["max_id"] >= vocab):
            raise DataError(f"{f}: manifest max_id {entry['max_id']!r} is not a token id below "
                            f"vocab_size {vocab}")
        entries.append((entry, f))
    total = m["n_tokens"]
    if not _whole(total) or total != sum(e["n_tokens"] for e, _ in entries):
        raise DataError(f"{where}: n_tokens {total!r} != sum over files "
                        f"{sum(e['n_tokens'] for e, _ in entries)}")
    return entries


def _read_checksum_cache(path: str | os.PathLike) -> dict:
    try:
        cache = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # none yet, or unreadable: verify everything again
        return {}
    return cache if isinstance(cache, dict) else {}


class TokenStore:
    """Read-only, memory-mapped view of a token directory.

    Validation on open: format and dtype (must be ``uint32``), every file present with byte size
    ``n_tokens * 4`` (a size of ``n_tokens * 2`` is reported as probable uint16 data), manifest
    totals consistent, and (``check_ids=True``) every id ``< vocab_size``, scanned in chunks.
    ``verify=True`` also recomputes every file's checksum (sha256 or xxh3-128, as recorded).
    """

    def __init__(self, path: str | os.PathLike, *, verify: bool = False, check_ids: bool = True):
        self.path = Path(path)
        self.manifest = m = read_manifest(self.path)
        where = self.path / MANIFEST
        entries = validate_manifest(m, self.path)
        self.vocab_size = int(m["vocab_size"])
        self.eos_id = int(m["eos_id"])
        self.files: list[Path] = []
        sizes = []
        for entry, f in entries:
            n = entry["n_tokens"]
            if not f.is_file():
                raise DataError(f"{f}: token file listed in {where} is missing")
            nbytes = f.stat().st_size
            if nbytes != n * 4:
                hint = ""
                if nbytes == n * 2:
                    hint = " (the size of uint16 data: this file holds 2-byte ids, not uint32)"
                elif nbytes == n * 8:
                    hint = " (the size of 8-byte ids: int64/uint64 data, not uint32)"
                raise DataError(
                    f"{f}: {nbytes} bytes but the manifest says {n} uint32 tokens "
                    f"= {n * 4} bytes{hint}"
                )
            self.files.append(f)
            sizes.append(n)
        self.file_tokens = np.array(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.file_tokens)]).astype(np.int64)
        self.n_tokens = int(self.offsets[-1])
        self._maps: list[np.ndarray | None] = [None] * len(self.files)
        if verify:
            self.verify_checksums()
        if check_ids:
            self.check_ids()

    # -- validation -----------------------------------------------------------------------
    def verify_checksums(self, cache: str | os.PathLike | None = None) -> None:
        """Every file's checksum equals the manifest's (its sha256 or its xxh3-128).

        An xxh3-128 entry is verified by that hash alone, at about the cost of the read. For a
        sha256 entry, with `cache` (a small JSON file, e.g. in the run directory), the first
        verification also records each file's fast hash (`fast_hash`, in the same read); later
        ones re-read every file in full but compute only that hash (about the cost of the read),
        so a byte that changed since, whatever its size and mtime say, is caught at the next
        start. A file whose size or manifest sha256 changed is verified by sha256 again."""
        known = _read_checksum_cache(cache) if cache is not None else {}
        hashed = False
        for entry, f in zip(self.manifest["files"], self.files):
            if checksum_algorithm(entry, f) == "xxh3_128":
                fast = fast_hash()
                digest_file(f, fast)
                if (got := fast.hexdigest()) != entry["xxh3_128"]:
                    raise DataError(f"{f}: xxh3_128 mismatch (manifest {entry['xxh3_128']}, file {got})")
                continue
            want = entry["sha256"]
            key, size = str(f.resolve()), f.stat().st_size
            seen = known.get(key)
            if (isinstance(seen, dict) and seen.get("size") == size
                    and seen.get("sha256") == want and isinstance(seen.get("xxh3_128"), str)):
                fast = fast_hash()
                digest_file(f, fast)
                if fast.hexdigest() != seen["xxh3_128"]:
                    raise DataError(
                        f"{f}: contents changed since they matched the manifest's sha256 "
                        f"(xxh3-128 {fast.hexdigest()}, {cache} records {seen['xxh3_128']}): "
                        f"bit rot or an edit")
                continue
            sha, fast = hashlib.sha256(), fast_hash()
            digest_file(f, sha, fast)
            if sha.hexdigest() != want:
                raise DataError(f"{f}: sha256 mismatch (manifest {want}, file {sha.hexdigest()})")
            known[key] = {"size": size, "sha256": want, "xxh3_128": fast.hexdigest()}
            hashed = True
        if cache is not None and hashed:
            write_json(cache, known, indent=1)

    def check_ids(self) -> None:
        """Scan every file in chunks; raise naming file, position and value of a bad id."""
        for i, f in enumerate(self.files):
            mm = self._map(i)
            for start in range(0, mm.size, SCAN_CHUNK):
                chunk = mm[start : start + SCAN_CHUNK]
                if int(chunk.max()) >= self.vocab_size:
                    pos = start + int(np.argmax(chunk >= self.vocab_size))
                    raise DataError(
                        f"{f}: token id {int(mm[pos])} at position {pos} >= vocab_size "
                        f"{self.vocab_size} (wrong dtype or tokenizer?)"
                    )

    # -- access -------------------------------------------------------------------------------
    def _map(self, i: int) -> np.ndarray:
        mm = self._maps[i]
        if mm is None:
            if self.file_tokens[i] == 0:
                mm = np.zeros(0, dtype=DTYPE)
            else:
                mm = np.memmap(self.files[i], dtype=DTYPE, mode="r")
            self._maps[i] = mm
        return mm

    def __len__(self) -> int:
        return self.n_tokens

    def read_checked(self, start: int, length: int) -> np.ndarray:
        """`read`, and every id ``< vocab_size`` (one `max` over what was read: the ids of a
        whole stream are not scanned at open, so a stale manifest is caught here, naming the
        file and position, rather than as an IndexError inside the model)."""
        out = self.read(start, length)
        if out.size and int(out.max()) >= self.vocab_size:
            bad = start + int(np.argmax(out >= self.vocab_size))
            f, pos = self.locate(bad)
            raise DataError(
                f"{f}: token id {int(out[bad - start])} at position {pos} >= vocab_size "
                f"{self.vocab_size} of {self.path / MANIFEST} (stale manifest, wrong dtype or "
                "tokenizer?)"
            )
        return out

    def locate(self, position: int) -> tuple[Path, int]:
        """(file, position in that file) of stream position `position`."""
        i = int(np.searchsorted(self.offsets, position, side="right")) - 1
        return self.files[i], position - int(self.offsets[i])

    def read(self, start: int, length: int) -> np.ndarray:
        """Tokens ``[start, start + length)`` of the concatenated stream (a new uint32 array)."""
        if start < 0 or length < 0 or start + length > self.n_tokens:
            raise DataError(
                f"{self.path}: read [{start}, {start + length}) outside [0, {self.n_tokens})"
            )
        out = np.empty(length, dtype=np.uint32)
        i = int(np.searchsorted(self.offsets, start, side="right")) - 1
        done = 0
        while done < length:
            lo = start + done - int(self.offsets[i])
            take = min(length - done, int(self.file_tokens[i]) - lo)
            if take > 0:
                out[done : done + take] = self._map(i)[lo : lo + take]
                done += take
            i += 1
        return out

    def n_instances(self, seq_len: int) -> int:
        """Number of non-overlapping ``seq_len`` windows (the remainder is dropped)."""
        if seq_len <= 0:
            raise DataError(f"seq_len must be positive, got {seq_len}")
        return self.n_tokens // seq_len

    def instance(self, i: int, seq_len: int) -> np.ndarray:
        """Window ``i``: tokens ``[i * seq_len, (i + 1) * seq_len)`` of the stream."""
        n = self.n_instances(seq_len)
        if not 0 <= i < n:
            raise DataError(f"{self.path}: instance {i} outside [0, {n}) for seq_len {seq_len}")
        return self.read(i * seq_len, seq_len)

    def instances(self, seq_len: int) -> Iterator[np.ndarray]:
        """All windows in stream (= training) order."""
        for i in range(self.n_instances(seq_len)):
            yield self.instance(i, seq_len)

    def summary(self) -> str:
        m = self.manifest
        lines = [
            f"token dir  {self.path}",
            f"format     {m['format']}  dtype {m['dtype']}",
            f"tokens     {self.n_tokens:,} in {len(self.files)} file(s)",
            f"vocab      {self.vocab_size}  eos {self.eos_id}",
        ]
        for key in ("seq_len", "instance_len", "seed", "kind", "name"):
            if key in m:
                lines.append(f"{key:<10} {m[key]}")
        if "sources" in m:
            lines.append(f"sources    {len(m['sources'])}")
        ids = m.get("instance_ids")
        if isinstance(ids, list):
            lines.append(f"instances  {len(ids):,} (ids inline)")
        elif isinstance(ids, dict):
            lines.append(f"instances  {ids.get('count', '?'):,} (ids in {ids.get('file')})")
        return "\n".join(lines)


def iter_chunks(arrays: Iterable[np.ndarray], chunk_tokens: int) -> Iterator[np.ndarray]:
    """Re-cut a stream of arrays into arrays of exactly ``chunk_tokens`` (last may be shorter)."""
    buf: list[np.ndarray] = []
    have = 0
    for a in arrays:
        a = np.asarray(a).reshape(-1)
        while a.size:
            take = min(a.size, chunk_tokens - have)
            buf.append(a[:take])
            have += take
            a = a[take:]
            if have == chunk_tokens:
                yield np.concatenate(buf)
                buf, have = [], 0
    if have:
        yield np.concatenate(buf)
