"""Slicing throughput vs a plain copy of the same bytes.

Generates a synthetic OLMo-like source (raw uint32 files, a few hundred MB) in a temp dir, then
in the same run and on the same (warm) page cache measures:

* ``slice``: :func:`shapelm.data.olmo_order.slice_olmo` of the first N tokens (order planning,
  gather, id check, sha256, atomic part writes);
* ``plain``: the same selected 16 KiB instance ranges, in the same order, read with
  ``f.seek`` + ``f.readinto`` and written to one output file (no checks, no hashing);
* ``copyfile``: ``shutil.copyfile`` of every source file (sequential bytes, the upper bound);
* ``sha256``: ``hashlib.file_digest`` of the plain copy's output (warm), the one piece of work the
  slice does that the plain copy does not (every part's sha256 goes into the manifest). With no
  idle core it runs in series with the copy, so slice / plain is at most
  1 / (1 + plain / sha256): the row says how much of a low ratio the hash explains.

Prints GB/s for each and the ratio slice / plain (goal >= 0.8). The ratios come from one run, so a
machine that other work loads slows every row alike; say how loaded it was when quoting them.

    .venv/bin/python benchmarks/slice_throughput.py [--mb 320] [--files 16] [--workers 2]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.data.olmo_order import INSTANCE_LEN, locate, slice_olmo  # noqa: E402
from shapelm.data.sources import source_sizes  # noqa: E402
from shapelm.data.olmo_order import instances_per_file, order_prefix  # noqa: E402


def make_source(d: Path, total_mb: int, n_files: int) -> list[str]:
    rng = np.random.default_rng(0)
    per = total_mb * (1 << 20) // 4 // n_files
    paths = []
    for i in range(n_files):
        n = per + int(rng.integers(0, INSTANCE_LEN))  # remainders, like real files
        p = d / f"part-{i:03d}-00000.npy"
        rng.integers(0, 100278, n, dtype=np.uint32).tofile(p)
        paths.append(str(p))
    return paths


def plain_copy(paths, ids, counts, out: Path) -> None:
    f_idx, l_idx = locate(ids, counts)
    nb = INSTANCE_LEN * 4
    buf = bytearray(nb)
    files = [open(p, "rb", buffering=0) for p in paths]
    with open(out, "wb") as w:
        for fi, li in zip(f_idx.tolist(), l_idx.tolist()):
            f = files[fi]
            f.seek(li * nb)
            f.readinto(buf)
            w.write(buf)
        w.flush()
        os.fsync(w.fileno())
    for f in files:
        f.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=320, help="source size in MiB")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--fraction", type=float, default=0.75, help="share of instances sliced")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slice-bench-") as tmp:
        tmp = Path(tmp)
        src = tmp / "src"
        src.mkdir()
        paths = make_source(src, args.mb, args.files)
        sizes = source_sizes(paths)
        counts = instances_per_file(sizes, paths)
        n_sel = int(counts.sum() * args.fraction)
        n_tokens = n_sel * INSTANCE_LEN
        nbytes = n_tokens * 4
        ids = order_prefix(counts, n_sel, cache_dir=tmp / "cache")  # warm the order cache
        for p in paths:  # warm the page cache
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
        print(f"source {sum(sizes) / 1e6:.0f} MB in {len(paths)} files; slicing {n_sel:,} "
              f"instances = {nbytes / 1e6:.0f} MB; python {sys.version.split()[0]}, "
              f"{os.cpu_count()} cpus")
        best = {"slice": 0.0, "plain": 0.0, "copyfile": 0.0, "sha256": 0.0}
        for r in range(args.repeat):
            out = tmp / f"slice{r}"
            t = time.perf_counter()
            slice_olmo(paths, n_tokens, out, cache_dir=tmp / "cache", workers=args.workers,
                       progress=False)
            best["slice"] = max(best["slice"], nbytes / (time.perf_counter() - t) / 1e9)
            shutil.rmtree(out)

            out = tmp / f"plain{r}.u32"
            t = time.perf_counter()
            plain_copy(paths, ids, counts, out)
            best["plain"] = max(best["plain"], nbytes / (time.perf_counter() - t) / 1e9)
            t = time.perf_counter()
            with open(out, "rb") as f:
                hashlib.file_digest(f, "sha256")
            best["sha256"] = max(best["sha256"], nbytes / (time.perf_counter() - t) / 1e9)
            out.unlink()

            cp = tmp / f"copy{r}"
            cp.mkdir()
            t = time.perf_counter()
            for p in paths:
                shutil.copyfile(p, cp / Path(p).name)
            best["copyfile"] = max(
                best["copyfile"], sum(sizes) / (time.perf_counter() - t) / 1e9
            )
            shutil.rmtree(cp)
        for k, v in best.items():
            print(f"{k:<9} {v:6.2f} GB/s (best of {args.repeat})")
        print(f"ratio slice/plain    {best['slice'] / best['plain']:.2f}x (goal >= 0.8)")
        print(f"ratio slice/copyfile {best['slice'] / best['copyfile']:.2f}x")
        print(f"bound with no idle core, 1 / (1 + plain/sha256): {1 / (1 + best['plain'] / best['sha256']):.2f}x")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")


if __name__ == "__main__":
    main()
