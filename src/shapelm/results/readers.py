"""Tolerant readers of the per-run metric files the pipeline writes.

Canonical files (the Snakefile produces exactly these; a missing file means "pending"):

    results/EXP/runs/RUN/ppl.json         `shapelm eval ppl`:  {"sets": {NAME: {"loss", "ppl", ...}},
                                          "aggregate": {"val_loss", "val_ppl", "exp_mean_loss"}}
    results/EXP/runs/RUN/downstream.json  `shapelm eval downstream`: {"metrics": {TASK: primary},
                                          "Avg Acc", "Avg PPL", "details": ...}
    results/EXP/runs/RUN/proofpile.json   {"lengths", "ppl": {"4096": ...}, "nll": ...}
    results/EXP/runs/RUN/ruler.json       {"lengths", "tasks", "scores": {"4096": {TASK: 0-100, "mean"}}}
    results/EXP/decode/decode.json        {"rows": [{"run", "mixer", "length", "latency_ms_median",
                                          "kv_bytes", "n_attention_layers", ...}], "comparisons": [...]}
    work/EXP/runs/RUN/metrics.jsonl       one JSON object per logged step ({"step", "loss", ...}),
                                          and per evaluation during training ({"kind": "val",
                                          "step", "tokens", "train_heldout": {"loss", "ppl"},
                                          "sets": {NAME: ...}, "aggregate": {"val_ppl", ...}})

Formats that are not settled yet are read tolerantly: flat variants ({"val_loss": ..}), results
nested one level down ({"result": {...}}), alternative key spellings ("avg_acc" / "Avg Acc"), and
for decode.json any nesting that holds "rows" lists. A file that exists but is not JSON is a
`ResultsError` naming it; a missing file is simply `None` (pending).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from shapelm.errors import ShapelmError


class ResultsError(ShapelmError):
    """A results file is unreadable or the results command was misused; the message names it."""


def load_json(path: str | os.PathLike) -> Any | None:
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path}: not valid JSON ({err}); rerun the stage that writes it") from None


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


def _unwrap(data: Any, keys: Iterable[str]) -> Any:
    """Results nested one level down under a wrapper key ("result", "results", ...)."""
    if not isinstance(data, dict):
        return data
    for k in ("result", "results", "metrics_summary"):
        if isinstance(data.get(k), dict) and not any(key in data for key in keys):
            return data[k]
    return data


def _first(d: dict, *keys: str) -> float | None:
    for k in keys:
        if k in d:
            v = _num(d[k])
            if v is not None:
                return v
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
    data = load_json(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    data = _unwrap(data, ("sets", "aggregate", "val_loss"))
    sets: dict[str, dict[str, float]] = {}
    for name, s in (data.get("sets") or {}).items():
        if isinstance(s, dict):
            loss, ppl = _first(s, "loss", "val_loss", "ce_loss"), _first(s, "ppl", "val_ppl")
            if ppl is None and loss is not None:
                ppl = math.exp(loss)
            if loss is None and ppl is not None and ppl > 0:
                loss = math.log(ppl)
            sets[str(name)] = {"loss": loss, "ppl": ppl}
    agg = data.get("aggregate") if isinstance(data.get("aggregate"), dict) else data
    val_loss = _first(agg, "val_loss", "loss")
    val_ppl = _first(agg, "val_ppl", "ppl")
    exp_mean = _first(agg, "exp_mean_loss")
    losses = [s["loss"] for s in sets.values() if s.get("loss") is not None]
    ppls = [s["ppl"] for s in sets.values() if s.get("ppl") is not None]
    if val_loss is None and losses:
        val_loss = sum(losses) / len(losses)
    if val_ppl is None and ppls:
        val_ppl = sum(ppls) / len(ppls)
    if exp_mean is None and val_loss is not None:
        exp_mean = math.exp(val_loss)
    return PPL(val_loss, val_ppl, exp_mean, sets)


# --------------------------------------------------------------------------- downstream


@dataclass
class Downstream:
    tasks: dict[str, float]
    avg_acc: float | None
    avg_ppl: float | None


def read_downstream(path: str | os.PathLike) -> Downstream | None:
    data = load_json(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    data = _unwrap(data, ("metrics", "Avg Acc", "avg_acc"))
    tasks: dict[str, float] = {}
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else None
    if metrics is None:  # flat: {"arc_easy": 0.5, ..., "avg_acc": ...}
        metrics = {k: v for k, v in data.items() if _num(v) is not None}
    for k, v in metrics.items():
        if isinstance(v, dict):  # {"arc_easy": {"acc": ..}} -> its primary
            v = v.get(v.get("primary", "")) if v.get("primary") else _first(v, "acc", "len_norm", "ce_loss")
        num = _num(v)
        if num is not None:
            tasks[str(k)] = num
    avg_acc = _first(data, "Avg Acc", "avg_acc", "Avg_Acc")
    avg_ppl = _first(data, "Avg PPL", "avg_ppl", "Avg_PPL")
    for key in ("avg_acc", "avg_ppl", "Avg Acc", "Avg PPL", "seconds"):
        tasks.pop(key, None)
    return Downstream(tasks, avg_acc, avg_ppl)


# --------------------------------------------------------------------------- long context


def _by_length(d: Any) -> dict[int, float]:
    out: dict[int, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            try:
                length = int(k)
            except (TypeError, ValueError):
                continue
            if isinstance(v, dict):
                v = v.get("mean")
            num = _num(v)
            if num is not None:
                out[length] = num
    elif isinstance(d, list):  # [{"length": .., "ppl": ..}]
        for item in d:
            if isinstance(item, dict) and "length" in item:
                num = _first(item, "ppl", "score", "mean")
                if num is not None:
                    out[int(item["length"])] = num
    return out


def read_proofpile(path: str | os.PathLike) -> dict[int, float] | None:
    """Length -> Proof-pile PPL (exp of the mean per-token NLL over documents)."""
    data = load_json(path)
    if data is None:
        return None
    data = _unwrap(data, ("ppl", "nll"))
    if isinstance(data, dict) and "ppl" in data:
        return _by_length(data["ppl"])
    if isinstance(data, dict) and "nll" in data:
        return {k: math.exp(v) for k, v in _by_length(data["nll"]).items()}
    return _by_length(data)


def read_ruler(path: str | os.PathLike) -> dict[int, float] | None:
    """Length -> RULER mean score (0-100) over the tasks."""
    data = load_json(path)
    if data is None:
        return None
    data = _unwrap(data, ("scores",))
    if isinstance(data, dict) and "scores" in data:
        return _by_length(data["scores"])
    return _by_length(data)


# --------------------------------------------------------------------------- decode


def read_decode(path: str | os.PathLike) -> list[dict[str, Any]] | None:
    """Every latency row in decode.json, wherever it is nested (one file, several pairs)."""
    data = load_json(path)
    if data is None:
        return None
    rows: list[dict[str, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("rows"), list):
                rows.extend(r for r in x["rows"] if isinstance(r, dict) and "run" in r and "length" in r)
            for k, v in x.items():
                if k != "rows":
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(data)
    return rows


def decode_row(rows: list[dict[str, Any]], run: str, mixer: str, length: int) -> dict[str, Any] | None:
    """The benchmark row of one run, mixer and context length."""
    return next((r for r in rows if r.get("run") == run and str(r.get("mixer", "mha")).lower() == mixer
                 and int(r["length"]) == length), None)


def decode_latency(rows: list[dict[str, Any]], run: str, mixer: str, length: int) -> float | None:
    r = decode_row(rows, run, mixer, length)
    return _first(r, "latency_ms_median", "latency_ms", "latency_ms_mean") if r else None


# --------------------------------------------------------------------------- training curves

LOSS_KEYS = ("loss", "train_loss", "ce_loss", "train/ce_loss", "train/CrossEntropyLoss", "train/loss")


def read_metrics_jsonl(path: str | os.PathLike) -> list[dict[str, Any]] | None:
    """Logged training records (torn last lines from a kill are skipped)."""
    path = Path(path)
    if not path.is_file():
        return None
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def loss_curve(records: list[dict[str, Any]], batch_tokens: int) -> tuple[list[float], list[float]]:
    """(tokens seen, training loss) from metrics.jsonl records; tokens = step x batch if absent."""
    xs, ys = [], []
    for rec in records:
        if rec.get("kind") == "val":
            continue
        loss = _first(rec, *LOSS_KEYS)
        step = _num(rec.get("step"))
        tokens = _first(rec, "tokens", "tokens_seen", "train/tokens")
        if tokens is None and step is not None:
            tokens = step * batch_tokens
        if loss is not None and tokens is not None:
            xs.append(tokens)
            ys.append(loss)
    return xs, ys


# --------------------------------------------------------------------------- throughput


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
    """A run's manifest.json (shapelm.train.loop): its hardware (device type, names, world size)."""
    data = load_json(path)
    return data if isinstance(data, dict) else None


def throughput(records: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """Training throughput from metrics.jsonl: the median over logged records of tokens/s (all
    ranks together) and of the logged MFU (absent where the trainer knew no peak FLOP/s: CPU).

    The first record is left out when there are others: it is the first step after a start or a
    resume and holds compilation and warm-up. The median, not the mean, so that a step slowed
    by a checkpoint or a neighbour's job does not move the figure."""
    rows = [r for r in records if _num(r.get("tokens_per_s")) is not None]
    if len(rows) > 1:
        rows = rows[1:]
    if not rows:
        return None
    tps = sorted(_num(r["tokens_per_s"]) for r in rows)
    mfus = sorted(v for v in (_num(r.get("mfu")) for r in rows) if v is not None)
    return {"tokens_per_s": _median(tps), "mfu": _median(mfus) if mfus else None, "records": len(rows)}


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2
#: The held-out split of the training stream in val records (shapelm.train.evaluator.HELDOUT_SPLIT).
HELDOUT_SPLIT = "train_heldout"


def val_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluations during training ("val" records), in step order, one per step (the last
    written wins)."""
    by_step: dict[float, dict[str, Any]] = {}
    for rec in records:
        step = _num(rec.get("step"))
        if rec.get("kind") == "val" and step is not None:
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
    return _first(part, key) if isinstance(part, dict) else None


def val_curve(records: list[dict[str, Any]], which: str = HELDOUT_SPLIT, key: str = "ppl",
              batch_tokens: int | None = None) -> tuple[list[float], list[float]]:
    """(tokens seen, value) over the val records that hold the value."""
    xs, ys = [], []
    for rec in val_records(records):
        v = val_value(rec, which, key)
        tokens = _num(rec.get("tokens"))
        if tokens is None and batch_tokens:
            tokens = _num(rec.get("step")) * batch_tokens
        if v is not None and tokens is not None:
            xs.append(tokens)
            ys.append(v)
    return xs, ys


def ce_curve(records: list[dict[str, Any]], batch_tokens: int) -> tuple[list[float], list[float]]:
    """(tokens seen, training cross-entropy without the z-loss term)."""
    xs, ys = [], []
    for rec in records:
        if rec.get("kind") == "val":
            continue
        ce = _first(rec, "ce_loss", "train/ce_loss", "train/CrossEntropyLoss")
        tokens = _first(rec, "tokens")
        if tokens is None and _num(rec.get("step")) is not None:
            tokens = _num(rec.get("step")) * batch_tokens
        if ce is not None and tokens is not None:
            xs.append(tokens)
            ys.append(ce)
    return xs, ys
