"""The CPU thread count of a training process, set from an explicit setting.

Float32 reductions on CPU are split over threads, so the bits of a run depend on the thread
count: a resumed run equals an uninterrupted one bitwise only at the same count. torch's own
default is the number of cores it sees, which differs between machines and between a SLURM
allocation and a login node; so the count is taken, in this order, from `--threads N`
(`train(threads=N)`), `SHAPELM_THREADS`, `OMP_NUM_THREADS` (applied by torch at start-up),
and only then torch's default (or what the calling program set).
The value and where it came from are recorded in the run manifest and in every checkpoint.
"""

from __future__ import annotations

import os

import torch

from shapelm.errors import ConfigError


def resolve_threads(explicit: int | None = None, environ=None) -> tuple[int | None, str]:
    """(thread count to set, or None to keep torch's current one; where it came from).

    `OMP_NUM_THREADS` needs no setting here: torch applies it when it starts."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        source, raw = "--threads", str(explicit)
    elif env.get("SHAPELM_THREADS", "").strip():
        source, raw = "SHAPELM_THREADS", env["SHAPELM_THREADS"]
    elif env.get("OMP_NUM_THREADS", "").strip():
        return None, "OMP_NUM_THREADS"
    else:
        return None, "torch default"
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{source}={raw!r}: the thread count must be a positive integer")
    return n, source


def set_threads(explicit: int | None = None) -> dict:
    """Apply the resolved thread count; returns {"threads", "source"} for the manifest."""
    n, source = resolve_threads(explicit)
    if n is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return {"threads": torch.get_num_threads(), "source": source}
