"""Slicing throughput vs a plain copy of the same bytes.

Generates a synthetic OLMo-like source (raw uint32 files, a few hundred MB) in a temp dir, then
in the same run and on the same (warm) page cache measures:

* ``slice``: :func:`shapelm.data.olmo_order.slice_olmo` of the first N tokens (order planning,
  gather, id check, each part's checksum, atomic part writes);
* ``plain``: the same selected 16 KiB instance ranges, in the same order, read with
  ``f.seek`` + ``f.readinto`` and written to one output file (no checks, no hashing);
* ``copyfile``: ``shutil.copyfile`` of every source file (sequential bytes, the upper bound);
* ``xxh3_128`` (the slicer's part checksum, ``PART_CHECKSUM``) and ``sha256`` (what parts
  recorded before): each hash of the plain copy's output (warm). The checksum is the one piece of
  work the slice does that the plain copy does not (it goes into the manifest). With no idle core
  it runs in series with the copy, so a slice that copies no faster than the plain copy is held
  to 1 / (1 + plain / hash): the ``bound`` lines say how much of a low ratio each hash explains
  (the slice's gather, one vectorised copy per file and chunk, can beat the plain copy's loop).

Prints GB/s for each and the ratio slice / plain (goal >= 0.8). The ratios come from one run, so a
machine that other work loads slows every row alike; say how loaded it was when quoting them.
``--busy`` keeps one core busy for the whole run (a process spinning in a loop, stopped at the
end): the slice then has no idle core for its hasher and writer threads, the case the goal is
set for.

    .venv/bin/python benchmarks/slice_throughput.py [--mb 320] [--files 16] [--workers 2] [--busy]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shapelm.data.olmo_order import INSTANCE_LEN, PART_CHECKSUM, locate, slice_olmo  # noqa: E402
from shapelm.data.olmo_order import instances_per_file, order_prefix  # noqa: E402
from shapelm.data.sources import source_sizes  # noqa: E402
from shapelm.data.tokens import CHECKSUMS, digest_file  # noqa: E402



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


def spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def one_core_busy(busy: bool):
    """With `busy`, a process spinning on one core until the block ends (another user's job).
    Yields a function giving the share of a core the spinner has had so far (None without one,
    or where /proc is missing): the load the run really had, which the 1-minute load average,
    smoothed over a minute, shows only in part for a run of seconds."""
    if not busy:
        yield lambda: None
        return
    spinner = multiprocessing.get_context("spawn").Process(target=spin, daemon=True)
    spinner.start()
    started = time.perf_counter()

    def core_share() -> float | None:
        try:  # utime and stime, fields 14 and 15 of /proc/PID/stat, after the command's ")"
            fields = Path(f"/proc/{spinner.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return cpu_s / (time.perf_counter() - started)

    try:
        yield core_share
    finally:
        spinner.terminate()
        spinner.join()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=320, help="source size in MiB")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--fraction", type=float, default=0.75, help="share of instances sliced")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--busy", action="store_true", help="keep one core busy while measuring")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slice-bench-") as tmp, \
            one_core_busy(args.busy) as spinner_share:
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
        # the source was just written: flushed now, its writeback does not land in whichever
        # row happens to run (or fsync) while the kernel writes it out
        os.sync()
        print(f"source {sum(sizes) / 1e6:.0f} MB in {len(paths)} files; slicing {n_sel:,} "
              f"instances = {nbytes / 1e6:.0f} MB; python {sys.version.split()[0]}, "
              f"{os.cpu_count()} cpus; one core kept busy: {'yes' if args.busy else 'no'}")
        hashes = list(dict.fromkeys([PART_CHECKSUM, *CHECKSUMS]))
        best = {"slice": 0.0, "plain": 0.0, "copyfile": 0.0, **{h: 0.0 for h in hashes}}
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
            for h in hashes:
                t = time.perf_counter()
                digest_file(out, CHECKSUMS[h]())
                best[h] = max(best[h], nbytes / (time.perf_counter() - t) / 1e9)
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
        for h in hashes:
            used = "the slicer's" if h == PART_CHECKSUM else "not used"
            print(f"bound with no idle core, 1 / (1 + plain/{h}): "
                  f"{1 / (1 + best['plain'] / best[h]):.2f}x ({used})")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average at the end (1, 5, 15 min): {load} on {os.cpu_count()} cpus")
        share = spinner_share()
        if share is not None:
            print(f"the busy loop had {share:.2f} of a core over the run")


if __name__ == "__main__":
    main()
