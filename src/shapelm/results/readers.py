"""The results' view of the per-run result files, read through `shapelm.records`.

    results/EXP/runs/RUN/ppl.json         records.PplRecord         -> PPL
    results/EXP/runs/RUN/downstream.json  records.DownstreamRecord  -> Downstream
    results/EXP/runs/RUN/proofpile.json   records.ProofpileRecord   -> {length: PPL}
    results/EXP/runs/RUN/ruler.json       records.RulerRecord       -> {length: mean score}
    results/EXP/decode/decode.json        records.DecodeRecord      -> latency rows
    work/EXP/runs/RUN/metrics.jsonl       records.read_metrics      -> step and val records

`shapelm.records` defines what each file holds, for its writer and for these readers alike; a
file that lacks a key is an error naming the file and the key (`records.RecordError`), a missing
file is simply `None` (pending), a path that is not a file (a directory) an error naming it.
Non-finite numbers read as None; the tables and figures say "diverged at step N" for them
(`Context.divergence`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from shapelm import records
from shapelm.records import (  # noqa: F401 (HELDOUT_SPLIT re-exported)
    HELDOUT_SPLIT, DepthRecord, NoveltyRecord, RecordError, RunManifestRecord, load_json,
)


class ResultsError(RecordError):
    """A results file is unreadable or the results command was misused; the message names it."""


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, str):
        try:
            v = float(x)
        except ValueError:
            return None
        return v if math.isfinite(v) else None
    return None


# --------------------------------------------------------------------------- held-out PPL


def norm_name(name: str) -> str:
    return str(name).lower().replace("-", "_").replace("/", "_").replace(" ", "_")


@dataclass
class PPL:
    val_loss: float | None
    val_ppl: float | None  # arithmetic mean of per-set PPLs (Tables 5-11)
    exp_mean_loss: float | None  # exp(mean loss) (what Table 1 prints)
    sets: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> {"loss", "ppl"}

    def set_value(self, candidates: Iterable[str], key: str) -> float | None:
        """A per-set loss/ppl by fuzzy set name (directory names vary: dolma_common-crawl, ...)."""
        normed = {norm_name(k): v for k, v in self.sets.items()}
        cands = [norm_name(c) for c in candidates]
        for c in cands:
            if c in normed:
                return normed[c].get(key)
        for c in cands:
            for name, v in normed.items():
                if c in name:
                    return v.get(key)
        return None


def read_ppl(path: str | os.PathLike) -> PPL | None:
    rec = records.PplRecord.read(path)
    if rec is None:
        return None
    sets = {str(name): {"loss": _num(s["loss"]), "ppl": _num(s["ppl"])} for name, s in rec.sets.items()}
    agg = rec.aggregate
    return PPL(_num(agg["val_loss"]), _num(agg["val_ppl"]), _num(agg["exp_mean_loss"]), sets)


# --------------------------------------------------------------------------- downstream


@dataclass
class Downstream:
    tasks: dict[str, float]
    avg_acc: float | None
    avg_ppl: float | None


def read_downstream(path: str | os.PathLike) -> Downstream | None:
    rec = records.DownstreamRecord.read(path)
    if rec is None:
        return None
    tasks = {str(k): v for k, v in ((k, _num(v)) for k, v in rec.metrics.items()) if v is not None}
    return Downstream(tasks, _num(rec.avg_acc), _num(rec.avg_ppl))


# --------------------------------------------------------------------------- long context


def read_proofpile(path: str | os.PathLike) -> dict[int, float] | None:
    """Length -> Proof-pile PPL (exp of the mean per-token NLL over documents)."""
    rec = records.ProofpileRecord.read(path)
    return None if rec is None else rec.by_length()


def read_ruler(path: str | os.PathLike) -> dict[int, float] | None:
    """Length -> RULER mean score (0-100) over the tasks."""
    rec = records.RulerRecord.read(path)
    return None if rec is None else rec.by_length()


# --------------------------------------------------------------------------- decode


def read_decode(path: str | os.PathLike) -> list[dict[str, Any]] | None:
    """The latency rows of decode.json (every pair's, merged)."""
    rec = records.DecodeRecord.read(path)
    return None if rec is None else rec.rows


def decode_row(rows: list[dict[str, Any]], run: str, mixer: str, length: int) -> dict[str, Any] | None:
    """The benchmark row of one run, mixer and context length."""
    return next((r for r in rows if r["run"] == run and r["mixer"].lower() == mixer and int(r["length"]) == length),
                None)


def decode_latency(rows: list[dict[str, Any]], run: str, mixer: str, length: int) -> float | None:
    r = decode_row(rows, run, mixer, length)
    return _num(r.get("latency_ms_median")) if r else None


def decode_quartiles(rows: list[dict[str, Any]], run: str, mixer: str, length: int) -> tuple[float, float] | None:
    """(first, third) quartile of one run's decode latency in ms, as the benchmark recorded them;
    None where the row or either quartile is missing."""
    r = decode_row(rows, run, mixer, length)
    q1, q3 = (_num(r.get("latency_ms_q1")), _num(r.get("latency_ms_q3"))) if r else (None, None)
    return (q1, q3) if q1 and q3 else None


# --------------------------------------------------------------------------- training curves


def read_metrics_jsonl(path: str | os.PathLike) -> list[dict[str, Any]] | None:
    """Logged training records (torn last lines from a kill are skipped); None: no file yet."""
    return list(records.read_metrics(path)) if os.path.exists(path) else None


def file_has_non_finite(path: str | os.PathLike) -> bool:
    """Whether a result file holds a NaN or infinity anywhere: read as raw JSON, since a diverged
    run's file is what a record's strict reader would refuse."""
    return has_non_finite(load_json(path))


def has_non_finite(x: Any) -> bool:
    """A NaN or infinity anywhere in a JSON value (per-instance lists included)."""
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, dict):
        return any(has_non_finite(v) for v in x.values())
    if isinstance(x, list):
        return any(has_non_finite(v) for v in x)
    return False


def first_non_finite_step(recs: list[dict[str, Any]]) -> int | None:
    """The first step whose training loss or validation record holds a NaN or infinity."""
    for rec in recs:
        values = [rec.get("loss")] if rec.get("kind") != "val" else [rec.get(k) for k in ("train_heldout", "aggregate")]
        if any(has_non_finite(v) for v in values) and isinstance(rec.get("step"), int):
            return rec["step"]
    return None


def last_step(recs: list[dict[str, Any]]) -> int | None:
    steps = [r["step"] for r in recs if isinstance(r.get("step"), int) and not isinstance(r.get("step"), bool)]
    return max(steps) if steps else None


def loss_curve(recs: list[dict[str, Any]], batch_tokens: int) -> tuple[list[float], list[float]]:
    """(tokens seen, training loss) from metrics.jsonl records; tokens = step x batch if absent."""
    return _step_curve(recs, "loss", batch_tokens)


def _step_curve(recs: list[dict[str, Any]], key: str, batch_tokens: int) -> tuple[list[float], list[float]]:
    """(tokens seen, `key`) over the step records (not the val records) that hold it."""
    xs, ys = [], []
    for rec in recs:
        if records.is_val(rec):
            continue
        value = _num(rec.get(key))
        tokens = _num(rec.get("tokens"))
        step = _num(rec.get("step"))
        if tokens is None and step is not None:
            tokens = step * batch_tokens
        if value is not None and tokens is not None:
            xs.append(tokens)
            ys.append(value)
    return xs, ys


# --------------------------------------------------------------------------- throughput


def run_hardware(path: str | os.PathLike) -> dict[str, Any]:
    """The hardware of a run's manifest.json (device type, names, world size); {} without one."""
    record = RunManifestRecord.read(path)
    return record.hardware if record is not None else {}


def read_novelty(path: str | os.PathLike) -> dict[str, Any] | None:
    """A novelty.json (ours or a cached Hugging Face model's) as the figure reads it; None
    where the analysis has not run."""
    record = NoveltyRecord.read(path)
    return record.to_dict() if record is not None else None


def read_depth(path: str | os.PathLike) -> DepthRecord | None:
    """A run's depth.json (`shapelm analyze depth`); None where the analysis has not run."""
    return DepthRecord.read(path)


def throughput(recs: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """Training throughput from metrics.jsonl: the median over logged recs of tokens/s (all
    ranks together) and of the logged MFU (absent where the trainer knew no peak FLOP/s: CPU).

    The first record is left out when there are others: it is the first step after a start or a
    resume and holds compilation and warm-up. The median, not the mean, so that a step slowed
    by a checkpoint or a neighbour's job does not move the figure."""
    rows = [r for r in recs if _num(r.get("tokens_per_s")) is not None]
    if len(rows) > 1:
        rows = rows[1:]
    if not rows:
        return None
    tps = sorted(_num(r["tokens_per_s"]) for r in rows)
    mfus = sorted(v for v in (_num(r.get("mfu")) for r in rows) if v is not None)
    return {"tokens_per_s": _median(tps), "mfu": _median(mfus) if mfus else None, "recs": len(rows)}


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2


def val_records(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluations during training ("val" recs), in step order, one per step (the last
    written wins)."""
    by_step: dict[float, dict[str, Any]] = {}
    for rec in recs:
        step = _num(rec.get("step"))
        if records.is_val(rec) and step is not None:
            by_step[step] = rec
    return [by_step[s] for s in sorted(by_step)]


def val_value(rec: dict[str, Any], which: str = HELDOUT_SPLIT, key: str = "ppl") -> float | None:
    """One number of a val record: `which` = the held-out split of the training stream, or
    "aggregate" (the held-out sets: key val_ppl / val_loss), or a set's name."""
    if which == "aggregate":
        part = rec.get("aggregate")
    elif which == HELDOUT_SPLIT:
        part = rec.get(HELDOUT_SPLIT)
    else:
        part = (rec.get("sets") or {}).get(which)
    return _num(part.get(key)) if isinstance(part, dict) else None


def val_curve(recs: list[dict[str, Any]], which: str = HELDOUT_SPLIT, key: str = "ppl",
              batch_tokens: int | None = None) -> tuple[list[float], list[float]]:
    """(tokens seen, value) over the val recs that hold the value."""
    xs, ys = [], []
    for rec in val_records(recs):
        v = val_value(rec, which, key)
        tokens = _num(rec.get("tokens"))
        if tokens is None and batch_tokens:
            tokens = _num(rec.get("step")) * batch_tokens
        if v is not None and tokens is not None:
            xs.append(tokens)
            ys.append(v)
    return xs, ys


def ce_curve(recs: list[dict[str, Any]], batch_tokens: int) -> tuple[list[float], list[float]]:
    """(tokens seen, training cross-entropy without the z-loss term)."""
    return _step_curve(recs, "ce_loss", batch_tokens)
