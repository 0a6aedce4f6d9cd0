"""What verifying a token file at every start costs, against a plain read of the same bytes.

    .venv/bin/python benchmarks/token_verify.py [--mib 512] [--repeats 3]

Writes a token file of random ids (a token directory, shapelm.data.tokens.write_token_dir), then
times, best of --repeats, each reading every byte with the same 16 MiB buffer
(shapelm.data.tokens.digest_file):

* ``read``: no hash (the floor: what the disk and page cache allow);
* ``xxh3_128``: what a restart costs (TokenStore.verify_checksums with the run's
  token-checksums.json: the fast hash recorded at the first start);
* ``sha256``: what a first start costs for the manifest check (it computes both, one read).

Prints the seconds, GB/s and the ratio to ``read``. The file is in the page cache after the
first pass, so this is the CPU cost of the hash (a cold read from a network file system adds the
same I/O time to every line). Not a test: wall-clock times on a shared machine.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    import numpy as np

    from shapelm.data.tokens import digest_file, fast_hash, write_token_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=512, help="size of the token file (MiB)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    n = args.mib * (1 << 20) // 4
    ids = np.random.default_rng(0).integers(0, 100_278, size=n, dtype=np.uint32)
    kinds = {"read": lambda: [], "xxh3_128": lambda: [fast_hash()],
             "sha256": lambda: [hashlib.sha256()],
             "sha256+xxh3_128": lambda: [hashlib.sha256(), fast_hash()]}
    with tempfile.TemporaryDirectory() as tmp:
        write_token_dir(Path(tmp), ids, vocab_size=100_278, eos_id=100_257)
        del ids
        f = next(Path(tmp).glob("*.u32"))
        digest_file(f)  # into the page cache
        best = {}
        for _ in range(args.repeats):
            for kind, hashers in kinds.items():
                t = time.perf_counter()
                digest_file(f, *hashers())
                best[kind] = min(best.get(kind, float("inf")), time.perf_counter() - t)
    size = n * 4
    print(f"{args.mib} MiB token file, best of {args.repeats}")
    print(f"{'kind':>16} {'seconds':>8} {'GB/s':>6} {'x read':>7}")
    for kind, s in best.items():
        print(f"{kind:>16} {s:8.3f} {size / s / 1e9:6.2f} {s / best['read']:7.2f}")


if __name__ == "__main__":
    main()
