"""Observability: run manifest, metrics.jsonl, MFU peak table, memory."""

from __future__ import annotations

import platform
import resource
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from shapelm.shapes.accounting import PEAK_BF16_FLOPS, peak_flops_for  # noqa: F401 (the trainer's names)
from shapelm.files import open_log, write_text
from shapelm.records import metrics_line, read_metrics
from shapelm.train.tracking import open_tracker

def device_names(device: torch.device) -> list[str]:
    if device.type == "cuda":
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return [platform.processor() or platform.machine()]


def max_memory() -> dict[str, float | None]:
    gpu = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    rss = rss_kb / 2**20 if sys.platform != "darwin" else rss_kb / 2**30
    return {"max_mem_gb": gpu, "max_rss_gb": round(rss, 3)}


def git_commit() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def package_versions() -> dict[str, str | None]:
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "numpy", "shapelm", "safetensors"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    return out


class MetricsLog:
    """`DIR/metrics.jsonl`, one JSON object per logged step. On resume from step S, lines with
    step > S (logged after the checkpoint the run resumes from) are dropped first, so the file
    reads as one uninterrupted run."""

    def __init__(self, path: Path, resume_step: int, enabled: bool) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.tracker = None
        if not enabled:
            return
        # a line torn by a kill is dropped with the records past the resumed step
        kept = [rec for rec in read_metrics(self.path) if rec.get("step", 0) <= resume_step]
        write_text(self.path, "".join(metrics_line(rec) for rec in kept))
        self._f = open_log(self.path)
        # the same records to TensorBoard / wandb when SHAPELM_TRACKING asks for one (off by default)
        self.tracker = open_tracker(self.path.parent)

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            self._f.write(metrics_line(record))
            self._f.flush()
            if self.tracker is not None:
                self.tracker.log(record)

    def close(self) -> None:
        if self.enabled and not self._f.closed:
            self._f.close()
            if self.tracker is not None:
                self.tracker.close()
