"""OLMo-2 stage-1 data in its exact training order, and slicing its first N tokens.

The algorithm (allenai/OLMo ``olmo/data/memmap_dataset.py`` and
``olmo/data/iterable_dataset.py::_build_global_indices``, config
``configs/official-0425/OLMo2-1B-stage1.yaml``):

1. Every source file is a raw headerless little-endian uint32 array. File ``f`` holds
   ``floor(bytes_f / 4 / 4096)`` instances of 4096 tokens; its remainder is dropped.
2. An instance's *global id* counts across files in list order: file 0's instances first.
3. ``indices = np.arange(N, dtype=np.uint32)``;
   ``np.random.Generator(np.random.PCG64(seed=6198 + epoch)).shuffle(indices)``, epoch 0.
   Training step ``k`` takes ``indices[512k : 512(k + 1)]``.
4. "The first N tokens" are the first ``ceil(N / 4096)`` entries of that order: 610,352 /
   1,708,985 / 4,394,532 / 14,648,438 / 39,062,500 instances for 2.5B / 7B / 18B / 60B / 160B.

:func:`slice_olmo` writes those instances, in training order, as a token directory
(docs/ARCHITECTURE.md). Computing the order needs every file's byte size (``os.stat`` or an
HTTP ``HEAD``, cached in JSON); only the selected 16 KiB instances are read (local files through
read-only memory maps, one vectorised copy per file and chunk; URLs by HTTP ``Range`` requests,
adjacent instances coalesced, several files in parallel).

**Shorter sequences (the 113M run's 2048 tokens).** The stream written is the concatenation of
the selected 4096-token instances in training order. A consumer with ``seq_len=2048`` cuts it into
non-overlapping windows, so each 4096-token instance becomes two consecutive 2048-token
sequences, first half then second half, and the token stream (and the tokens seen after any
number of tokens) is identical for every sequence length that divides 4096. ``seq_len_out`` is
recorded in the manifest as the intended window; it must divide 4096 (or be a multiple of it).

Resumability: the output is written in numbered parts ``part-XXXXX.u32``, each renamed into place
atomically and then recorded in ``progress.json`` (also atomic). A rerun with the same plan skips
committed parts; ``manifest.json`` is written last, so its presence means the slice is complete.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from shapelm.data.sources import RangeReader, is_url, source_sizes
from shapelm.data.tokens import (
    CHECKSUMS,
    DTYPE,
    MANIFEST,
    make_manifest,
)
from shapelm.errors import DataError
from shapelm.files import open_temp, publish, write_bytes, write_json

INSTANCE_LEN = 4096
#: The checksum every part records (shapelm.data.tokens.CHECKSUMS): xxh3-128 hashes at several
#: GB/s, so a slice keeps pace with a plain copy of its bytes even with no idle core; sha256
#: (0.5-1.4 GB/s per core) held it to 0.35-0.67x (benchmarks/slice_throughput.py --busy).
PART_CHECKSUM = "xxh3_128"
SEED = 6198
VOCAB_SIZE = 100278
EOS_ID = 100257
#: instance ids are stored inline in manifest.json up to this many, else in instance_ids.npy
INLINE_IDS_MAX = 1 << 20
PAPER_BUDGETS = {
    "2.5B": 2_500_000_000,
    "7B": 7_000_000_000,
    "18B": 18_000_000_000,
    "60B": 60_000_000_000,
    "160B": 160_000_000_000,
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("SHAPELM_CACHE_DIR", Path.home() / ".cache" / "shapelm"))


def parse_tokens(spec: int | str) -> int:
    """``2500000000``, ``"2.5B"``, ``"160B"``, ``"300M"``, ``"1e9"`` -> an int token count."""
    if isinstance(spec, (int, np.integer)):
        return int(spec)
    s = str(spec).strip().replace("_", "").replace(",", "")
    m = re.fullmatch(r"([0-9.eE+]+)\s*([kKmMbBtT]?)", s)
    if not m:
        raise DataError(f"token count {spec!r}: expected e.g. 2500000000, 2.5B, 300M")
    mult = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}[m.group(2).lower()]
    try:
        value = float(m.group(1)) * mult
    except ValueError as e:
        raise DataError(f"token count {spec!r}: not a number") from e
    return int(round(value))


def n_instances_for_tokens(n_tokens: int, instance_len: int = INSTANCE_LEN) -> int:
    """Instances that make up "the first ``n_tokens`` tokens": ``ceil(n_tokens / instance_len)``."""
    return -(-int(n_tokens) // instance_len)


def instances_per_file(
    sizes: Sequence[int], sources: Sequence[str] | None = None, instance_len: int = INSTANCE_LEN
) -> np.ndarray:
    """``floor(bytes / 4 / instance_len)`` per file; a size not a multiple of 4 is an error."""
    counts = np.empty(len(sizes), dtype=np.int64)
    for i, n in enumerate(sizes):
        if n % 4:
            name = sources[i] if sources is not None else f"source #{i}"
            raise DataError(f"{name}: {n} bytes is not a multiple of 4; not uint32 token data")
        counts[i] = n // 4 // instance_len
    return counts


def global_order(n_total: int, seed: int = SEED, epoch: int = 0) -> np.ndarray:
    """OLMo's global instance order: a PCG64(seed + epoch) shuffle of ``arange(n_total)``."""
    if n_total >= 2**32:
        raise DataError(f"{n_total} instances do not fit OLMo's uint32 indices")
    indices = np.arange(n_total, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed=seed + epoch)).shuffle(indices)
    return indices


def order_prefix(
    counts: np.ndarray,
    n_select: int,
    seed: int = SEED,
    epoch: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> np.ndarray:
    """First ``n_select`` entries of :func:`global_order`, cached as .npy under ``cache_dir``.

    The cache key hashes the per-file instance counts, seed and epoch; a cached prefix at least
    as long as needed is reused, so the full shuffle (4 GB for OLMo-2's ~1e9 instances) runs once.
    """
    n_total = int(np.sum(counts))
    if n_select > n_total:
        raise DataError(
            f"requested {n_select:,} instances but the sources hold only {n_total:,} instances"
        )
    key = hashlib.sha256(
        json.dumps([seed, epoch, [int(c) for c in counts]]).encode()
    ).hexdigest()[:16]
    cdir = Path(cache_dir) if cache_dir is not None else None
    if cdir is not None and cdir.is_dir():
        for f in sorted(cdir.glob(f"olmo-order-{key}-*.npy")):
            m = re.fullmatch(rf"olmo-order-{key}-(\d+)\.npy", f.name)
            if m and int(m.group(1)) >= n_select:
                arr = np.load(f, mmap_mode="r")
                return np.array(arr[:n_select], dtype=np.uint32)
    prefix = global_order(n_total, seed, epoch)[:n_select].copy()
    if cdir is not None:
        cdir.mkdir(parents=True, exist_ok=True)
        import io

        bio = io.BytesIO()
        np.save(bio, prefix)
        write_bytes(cdir / f"olmo-order-{key}-{n_select}.npy", bio.getbuffer())
    return prefix


def locate(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global instance ids -> (file index, instance index within that file)."""
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    file_idx = np.searchsorted(starts, ids, side="right") - 1
    return file_idx, ids - starts[file_idx]


def plan_slice(
    sources: Sequence[str],
    n_tokens: int | str,
    seed: int = SEED,
    epoch: int = 0,
    instance_len: int = INSTANCE_LEN,
    cache_dir: str | os.PathLike | None = None,
) -> dict:
    """Sizes, per-file instance counts and the selected global ids (training order)."""
    sources = [str(s) for s in sources]
    n_tok = parse_tokens(n_tokens)
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sizes = source_sizes(sources, cache_path=cdir / "source_sizes.json")
    counts = instances_per_file(sizes, sources, instance_len)
    n_select = n_instances_for_tokens(n_tok, instance_len)
    ids = order_prefix(counts, n_select, seed, epoch, cache_dir=cdir)
    return {
        "sources": sources,
        "sizes": [int(s) for s in sizes],
        "counts": counts,
        "n_total": int(counts.sum()),
        "requested_tokens": n_tok,
        "ids": ids,
    }


class _LocalMaps:
    """Read-only 2-D memmaps ``(instances, instance_len)`` of local sources, LRU-capped."""

    def __init__(self, sources: Sequence[str], counts: np.ndarray, instance_len: int,
                 max_open: int = 512):
        self.sources, self.counts, self.instance_len = sources, counts, instance_len
        self.max_open = max_open
        self.maps: OrderedDict[int, np.ndarray] = OrderedDict()

    def get(self, i: int) -> np.ndarray:
        mm = self.maps.get(i)
        if mm is not None:
            self.maps.move_to_end(i)
            return mm
        n = int(self.counts[i]) * self.instance_len
        try:
            mm = np.memmap(self.sources[i], dtype=DTYPE, mode="r", shape=(n,))
        except FileNotFoundError as e:
            raise DataError(f"{self.sources[i]}: source file not found") from e
        except (OSError, ValueError) as e:
            raise DataError(f"{self.sources[i]}: cannot map {n * 4} bytes ({e})") from e
        mm = mm.reshape(-1, self.instance_len)
        self.maps[i] = mm
        if len(self.maps) > self.max_open:
            self.maps.popitem(last=False)
        return mm


def _gather(
    buf: np.ndarray,
    file_idx: np.ndarray,
    local_idx: np.ndarray,
    sources: Sequence[str],
    instance_len: int,
    pool: ThreadPoolExecutor | None,
    maps: _LocalMaps | None = None,
    max_run: int = 64,
) -> None:
    """Fill row ``r`` of ``buf`` with instance ``local_idx[r]`` of file ``file_idx[r]``.

    Rows are grouped per file. Local files (with ``maps``) are copied with one vectorised
    fancy-index per file from a memory map, which touches only the selected instances' pages.
    URLs: positions are sorted and runs of adjacent instances become one HTTP Range request
    scattered into their rows of ``buf``; files are fetched concurrently on ``pool``.
    """
    inst_bytes = instance_len * 4
    order = np.lexsort((local_idx, file_idx))
    f_sorted = file_idx[order]
    l_sorted = local_idx[order]
    bounds = np.flatnonzero(np.diff(f_sorted)) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), order.size]
    rows = memoryview(buf).cast("B")

    def do_file(a: int, b: int) -> None:
        src = sources[int(f_sorted[a])]
        loc = l_sorted[a:b].tolist()
        slots = order[a:b].tolist()
        with RangeReader(src) as rd:
            j, n = 0, len(loc)
            while j < n:  # a run of adjacent instances (at most max_run) = one scatter read
                e = j + 1
                while e < n and e - j < max_run and loc[e] == loc[e - 1] + 1:
                    e += 1
                views = [rows[s * inst_bytes : (s + 1) * inst_bytes] for s in slots[j:e]]
                rd.readinto(loc[j] * inst_bytes, views)
                j = e

    remote = []
    for a, b in zip(starts, ends):
        if b <= a:
            continue
        fi = int(f_sorted[a])
        if maps is not None and not is_url(sources[fi]):
            buf[order[a:b]] = maps.get(fi)[l_sorted[a:b]]
        else:
            remote.append((a, b))
    if pool is None:
        for a, b in remote:
            do_file(a, b)
    else:
        for fut in [pool.submit(do_file, a, b) for a, b in remote]:
            fut.result()


def _check_part(
    buf: np.ndarray, file_idx: np.ndarray, local_idx: np.ndarray, sources, vocab_size: int
) -> int:
    mx = int(buf.max()) if buf.size else 0
    if mx >= vocab_size:
        row = int(np.argmax((buf >= vocab_size).any(axis=1)))
        col = int(np.argmax(buf[row] >= vocab_size))
        src = sources[int(file_idx[row])]
        inst_len = buf.shape[1]
        pos = int(local_idx[row]) * inst_len + col
        raise DataError(
            f"{src}: token id {int(buf[row, col])} at token position {pos} >= vocab_size "
            f"{vocab_size} (is this file really uint32 dolma2 token data?)"
        )
    return mx


def slice_olmo(
    paths: Sequence[str],
    n_tokens: int | str,
    out_dir: str | os.PathLike,
    seed: int = SEED,
    seq_len_out: int = INSTANCE_LEN,
    *,
    epoch: int = 0,
    instance_len: int = INSTANCE_LEN,
    vocab_size: int = VOCAB_SIZE,
    eos_id: int = EOS_ID,
    cache_dir: str | os.PathLike | None = None,
    part_instances: int = 8192,
    chunk_instances: int = 512,
    workers: int = 8,
    progress: bool = True,
    on_part_done: Callable[[int], None] | None = None,
) -> dict:
    """Write the first ``n_tokens`` tokens of the OLMo order over ``paths`` to ``out_dir``.

    ``paths``: local files or http(s) URLs, in the config's order. ``n_tokens``: an int or a
    string like ``"2.5B"``; ``ceil(n_tokens / instance_len)`` instances are written. The result is
    a token directory (docs/ARCHITECTURE.md) in training order; the manifest records the sources,
    their sizes, the instance ids, seed, token count and each part's checksum
    (:data:`PART_CHECKSUM`; parts a resumed slice kept from an older version record sha256).
    ``seq_len_out`` is the window the consumer will use (2048 for the 113M run: each instance
    becomes two consecutive sequences). Resumable (see module docstring); ``on_part_done(i)`` is called after part ``i`` is
    committed. Each part is gathered ``chunk_instances`` at a time into one reused buffer, whose
    ids are checked, then written and hashed; ``workers`` threads read URLs concurrently.
    Returns the manifest.
    """
    if not (instance_len % seq_len_out == 0 or seq_len_out % instance_len == 0):
        raise DataError(
            f"seq_len_out {seq_len_out} must divide the instance length {instance_len} "
            "(or be a multiple of it)"
        )
    out = Path(out_dir)
    if (out / MANIFEST).exists():
        raise DataError(f"{out / MANIFEST}: slice already complete (remove the directory to redo)")
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_slice(paths, n_tokens, seed, epoch, instance_len, cache_dir)
    sources, ids, counts = plan["sources"], plan["ids"], plan["counts"]
    n_sel = int(ids.size)
    plan_key = {
        "sources": sources,
        "sizes": plan["sizes"],
        "seed": seed,
        "epoch": epoch,
        "instance_len": instance_len,
        "n_instances": n_sel,
        "part_instances": part_instances,
        "vocab_size": vocab_size,
        "ids_sha256": hashlib.sha256(ids.tobytes()).hexdigest(),
    }
    prog_path = out / "progress.json"
    done: dict[str, dict] = {}
    if prog_path.exists():
        prog = json.loads(prog_path.read_text())
        if prog.get("plan") != plan_key:
            diff = [k for k in plan_key if prog.get("plan", {}).get(k) != plan_key[k]]
            raise DataError(
                f"{prog_path}: an unfinished slice with a different plan is here "
                f"(differs in {', '.join(diff)}); use another directory or delete this one"
            )
        for k, e in prog.get("parts", {}).items():
            f = out / e["path"]
            if f.is_file() and f.stat().st_size == e["n_tokens"] * 4:
                done[k] = e
    n_parts = max(1, math.ceil(n_sel / part_instances))

    from tqdm import tqdm

    bar = tqdm(
        total=n_sel * instance_len * 4,
        unit="B",
        unit_scale=True,
        desc=f"slice {out.name}",
        disable=not progress,
    )
    chunk = max(1, min(chunk_instances, part_instances))
    # One reused gather buffer, checked, written and hashed in this thread. The checksum runs at
    # several GB/s, so there is little to overlap; handing chunks to writer and hasher threads
    # made every chunk wait on them whenever other work held the cores (side by side on 2 busy
    # shared cores: 0.3-1.3 GB/s, a median of 0.75, against a median of 1.0 in one thread).
    buf = np.empty((chunk, instance_len), dtype=DTYPE)
    read_pool = ThreadPoolExecutor(workers) if workers > 1 else None
    maps = _LocalMaps(sources, counts, instance_len)

    try:
        for i in range(n_parts):
            lo, hi = i * part_instances, min(n_sel, (i + 1) * part_instances)
            if str(i) in done:
                bar.update((hi - lo) * instance_len * 4)
                continue
            name = f"part-{i:05d}.u32"
            tmp = out / f".{name}.tmp"
            h = CHECKSUMS[PART_CHECKSUM]()
            part_max = 0
            with open_temp(tmp) as fh:
                try:
                    for c_lo in range(lo, hi, chunk):
                        c_hi = min(hi, c_lo + chunk)
                        view = buf[: c_hi - c_lo]
                        f_idx, l_idx = locate(ids[c_lo:c_hi], counts)
                        _gather(view, f_idx, l_idx, sources, instance_len, read_pool, maps)
                        # ids checked before a byte is written: the error names file and position
                        chunk_max = _check_part(view, f_idx, l_idx, sources, vocab_size)
                        part_max = max(part_max, chunk_max)
                        raw = memoryview(view).cast("B")
                        fh.write(raw)
                        h.update(raw)
                        bar.update(view.nbytes)
                except BaseException:
                    fh.close()
                    tmp.unlink(missing_ok=True)
                    raise
            publish(tmp, out / name)  # fsynced, renamed, the rename flushed
            done[str(i)] = {
                "path": name,
                "n_tokens": (hi - lo) * instance_len,
                PART_CHECKSUM: h.hexdigest(),
                "max_id": part_max,
            }
            write_json(prog_path, {"plan": plan_key, "parts": done}, indent=1)
            if on_part_done is not None:
                on_part_done(i)
    finally:
        if read_pool is not None:
            read_pool.shutdown(wait=True)
        bar.close()

    files = [done[str(i)] for i in range(n_parts)]
    extra = {
        "kind": "olmo-slice",
        "seed": seed,
        "epoch": epoch,
        "instance_len": instance_len,
        "seq_len": seq_len_out,
        "requested_tokens": plan["requested_tokens"],
        "n_instances": n_sel,
        "cut_rule": (
            f"stream = selected {instance_len}-token instances in OLMo training order; "
            f"windows of seq_len are cut consecutively (seq_len 2048: first half, then second "
            f"half of each instance)"
        ),
        "sources": sources,
        "source_sizes": plan["sizes"],
    }
    if n_sel <= INLINE_IDS_MAX:
        extra["instance_ids"] = [int(x) for x in ids]
    else:
        import io

        bio = io.BytesIO()
        np.save(bio, ids)
        write_bytes(out / "instance_ids.npy", bio.getbuffer())
        extra["instance_ids"] = {
            "file": "instance_ids.npy",
            "count": n_sel,
            "ids_sha256": plan_key["ids_sha256"],
        }
    manifest = make_manifest(files, vocab_size, eos_id, extra)
    write_json(out / MANIFEST, manifest, indent=1)
    return manifest
