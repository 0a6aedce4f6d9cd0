"""Optional experiment tracking fed the same records as ``metrics.jsonl`` (off by default).

``SHAPELM_TRACKING`` chooses the writer (the environment, so a job script or a Snakemake
profile turns it on without touching configs, and a run's outputs do not depend on it):

* unset / ``none``: nothing (the default);
* ``tensorboard``: TensorBoard event files in ``<run dir>/tensorboard/`` (the ``tracking``
  extra: ``pip install shapelm[tracking]``); ``tensorboard --logdir work/EXP/runs``;
* ``wandb``: Weights & Biases (``pip install wandb``; ``WANDB_PROJECT``, ``WANDB_MODE=offline``
  and the rest as wandb reads them), one wandb run per shapelm run, named after its directory.

Every numeric field of a record is logged at the record's ``step`` (nested dicts as
``outer/inner``; ``step`` itself, strings, booleans, None and non-finite values are skipped).
A finished run can be replayed from its file: ``python -m shapelm.train.tracking RUN_DIR
[--kind tensorboard]`` (:func:`replay`), so tracking can be added after the fact too.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from shapelm.errors import ConfigError
from shapelm.records import read_metrics

ENV = "SHAPELM_TRACKING"
KINDS = ("none", "tensorboard", "wandb")


class Tracker(Protocol):
    def log(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(record: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(name, value) of every finite number in a metrics record, nested dicts flattened."""
    for key, value in record.items():
        if not prefix and key == "step":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from scalars(value, name + "/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield name, float(value)


class TensorBoardTracker:
    def __init__(self, log_dir: str | os.PathLike) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ConfigError(f"{ENV}=tensorboard needs the tensorboard package "
                              "(pip install 'shapelm[tracking]')") from e
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        for name, value in scalars(record):
            self._writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


class WandbTracker:
    def __init__(self, run_dir: str | os.PathLike) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(f"{ENV}=wandb needs the wandb package (pip install wandb)") from e
        run_dir = Path(run_dir)
        self._run = wandb.init(name=run_dir.name, dir=str(run_dir), reinit="finish_previous")

    def log(self, record: dict[str, Any]) -> None:
        self._run.log(dict(scalars(record)), step=record.get("step"))

    def close(self) -> None:
        self._run.finish()


def tracking_kind(kind: str | None = None) -> str:
    """The writer asked for (argument, else ``$SHAPELM_TRACKING``, else none), checked."""
    chosen = (kind if kind is not None else os.environ.get(ENV, "none")).strip().lower() or "none"
    if chosen not in KINDS:
        raise ConfigError(f"{ENV}={chosen!r}: expected one of {', '.join(KINDS)}")
    return chosen


def open_tracker(run_dir: str | os.PathLike, kind: str | None = None) -> Tracker | None:
    """The tracker for the run writing ``run_dir/metrics.jsonl``, or None when tracking is off."""
    chosen = tracking_kind(kind)
    if chosen == "tensorboard":
        return TensorBoardTracker(Path(run_dir) / "tensorboard")
    if chosen == "wandb":
        return WandbTracker(run_dir)
    return None


def replay(metrics_file: str | os.PathLike, tracker: Tracker) -> int:
    """Feed every record of a ``metrics.jsonl`` to ``tracker`` (a torn last line is skipped, as
    the training loop's reader does); the number of records."""
    n = 0
    for record in read_metrics(metrics_file):
        tracker.log(record)
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shapelm.train.tracking",
                                description="replay a run's metrics.jsonl into TensorBoard / wandb")
    p.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    p.add_argument("--kind", default="tensorboard", choices=KINDS[1:])
    args = p.parse_args(argv)
    metrics = Path(args.run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        print(f"error: {metrics}: no such file", file=sys.stderr)
        return 2
    try:
        tracker = open_tracker(args.run_dir, args.kind)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = replay(metrics, tracker)
    tracker.close()
    print(f"{n} records of {metrics} -> {args.kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
