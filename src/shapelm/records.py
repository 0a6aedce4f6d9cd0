"""The per-run result records: what each result file holds, written and read through one class.

    results/EXP/runs/RUN/ppl.json         PplRecord         `shapelm eval ppl`
    results/EXP/runs/RUN/downstream.json  DownstreamRecord  `shapelm eval downstream`
    results/EXP/runs/RUN/proofpile.json   ProofpileRecord   `shapelm longctx proofpile`
    results/EXP/runs/RUN/ruler.json       RulerRecord       `shapelm longctx ruler`
    results/EXP/decode/decode.json        DecodeRecord      `shapelm bench decode` / its merge
    results/EXP/runs/RUN/provenance.json  ProvenanceRecord  the training loop, copied by `shapelm train provenance`
    results/EXP/runs/RUN/novelty.json     NoveltyRecord     `shapelm analyze novelty` (also results/EXP/analysis/novelty/)
    results/EXP/runs/RUN/depth.json       DepthRecord       `shapelm analyze depth`
    work/EXP/runs/RUN/manifest.json       RunManifestRecord the training loop (what ran, on which hardware)
    work/EXP/runs/RUN/metrics.jsonl       read_metrics / metrics_line   the training loop (MetricsLog)

The writers build a record and call its `write`; `shapelm.results` and every other reader call
its `read`. A record holds the keys its readers need as fields and every other key the writer
emits (model, timings, details, per-instance losses, ...) in `extra`, verbatim, so that a file
read and written again is the same file. A record's reader is strict: a file that is not JSON,
or lacks a key the record needs, or holds the wrong type there, is a `RecordError` naming the
file and the key. A missing file is `None` (the stage has not run yet).

This module is a utility: the standard library, `shapelm.errors` and `shapelm.files` only.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

from shapelm import files
from shapelm.errors import ShapelmError


class RecordError(ShapelmError):
    """A result file is unreadable or lacks a key its record needs; the message names both."""


def load_json(path: str | os.PathLike) -> Any | None:
    """A JSON file's content; None where the file does not exist; an error naming a path that
    exists but is not a file (a directory where a result should be)."""
    path = Path(path)
    if not path.is_file():
        _not_a_file(path)
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise RecordError(f"{path}: not UTF-8 text (byte {err.start}); rerun the stage that writes it") from None
    except RecursionError:
        raise RecordError(f"{path}: not valid JSON (nested too deeply); rerun the stage that writes it") from None
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not valid JSON ({err}); rerun the stage that writes it") from None
    except OSError as err:
        raise RecordError(f"{path}: cannot read it ({err.strerror or err}); rerun the stage that writes it") from None


def _not_a_file(path: Path) -> None:
    if path.exists():
        raise RecordError(f"{path}: not a file (a directory or a special file where a result file should be); "
                          "remove it and rerun the stage that writes it")


def _where(source: str | os.PathLike | None) -> str:
    return str(source) if source is not None else "record"


def _need(data: Any, key: str, kind: type | tuple[type, ...], source, what: str = "") -> Any:
    """data[key], which must be of type `kind` (None is accepted only where `kind` includes it);
    `what`: where `data` sits in the file ("aggregate", "sets.NAME"), for the message."""
    where, name = _where(source), f"{what}.{key}" if what else key
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected a JSON object{' at ' + repr(what) if what else ''}")
    if key not in data:
        raise RecordError(f"{where}: missing key {name!r}")
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = "/".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise RecordError(f"{where}: key {name!r} should be {names}, not {type(value).__name__}")
    return value


NUMBER = (int, float)
OPT_NUMBER = (int, float, type(None))


@dataclass
class _Record:
    """Fields: the keys the readers need; `extra`: every other key, verbatim and in order."""

    #: The order of the keys on disk: the record's fields and the writer's known extras; other
    #: extras follow in the order they came.
    LAYOUT: ClassVar[tuple[str, ...]] = ()
    #: JSON field name -> dataclass attribute, where they differ ("Avg Acc" -> avg_acc).
    FIELDS: ClassVar[dict[str, str]] = {}
    #: `shapelm.files.write_json` keyword arguments (the writer's existing format).
    WRITE: ClassVar[dict[str, Any]] = {}

    def _fields(self) -> dict[str, Any]:
        return {key: getattr(self, attr) for key, attr in self.FIELDS.items()}

    def to_dict(self) -> dict[str, Any]:
        own = self._fields()
        extra = getattr(self, "extra")
        out: dict[str, Any] = {}
        for key in self.LAYOUT:
            if key in own:
                out[key] = own[key]
            elif key in extra:
                out[key] = extra[key]
        for key, value in (*own.items(), *extra.items()):
            out.setdefault(key, value)
        return out

    @classmethod
    def _extra(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in data.items() if k not in cls.FIELDS}

    @classmethod
    def from_dict(cls, data: Any, source: str | os.PathLike | None = None):
        raise NotImplementedError

    @classmethod
    def read(cls, path: str | os.PathLike):
        """The record in `path`; None where the file does not exist."""
        data = load_json(path)
        return None if data is None else cls.from_dict(data, path)

    def write(self, path: str | os.PathLike) -> Path:
        return files.write_json(path, self.to_dict(), **self.WRITE)


# --------------------------------------------------------------------------- held-out PPL


@dataclass
class PplRecord(_Record):
    """ppl.json: per held-out set {"loss", "ppl", "n_tokens", ...} and the paper's aggregate
    {"val_loss": mean loss, "val_ppl": mean of the sets' PPLs, "exp_mean_loss", "n_sets"}."""

    sets: dict[str, dict[str, Any]]
    aggregate: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # model, dtype, seq_len, max_instances, seconds

    LAYOUT = ("model", "dtype", "seq_len", "max_instances", "sets", "aggregate", "seconds")
    FIELDS = {"sets": "sets", "aggregate": "aggregate"}
    SET_KEYS = ("loss", "ppl")
    AGGREGATE_KEYS = ("val_loss", "val_ppl", "exp_mean_loss")

    @classmethod
    def from_dict(cls, data: Any, source=None) -> PplRecord:
        sets = _need(data, "sets", dict, source)
        for name, s in sets.items():
            for key in cls.SET_KEYS:
                _need(s, key, NUMBER, source, f"sets.{name}")
        aggregate = _need(data, "aggregate", dict, source)
        for key in cls.AGGREGATE_KEYS:
            _need(aggregate, key, NUMBER, source, "aggregate")
        return cls(sets, aggregate, cls._extra(data))


# --------------------------------------------------------------------------- downstream


@dataclass
class DownstreamRecord(_Record):
    """downstream.json: each task's primary metric, the averages over the accuracy tasks ("Avg
    Acc") and over the CE tasks ("Avg PPL"; null where there are none), lm-eval's details."""

    metrics: dict[str, float]
    avg_acc: float | None
    avg_ppl: float | None
    extra: dict[str, Any] = field(default_factory=dict)  # model, tasks, acc_tasks, ce_tasks, details, ...

    LAYOUT = ("model", "tokenizer", "tasks", "task_data", "standin_tasks", "lm_eval_output", "metrics",
              "Avg Acc", "Avg PPL", "acc_tasks", "ce_tasks", "details", "seconds")
    FIELDS = {"metrics": "metrics", "Avg Acc": "avg_acc", "Avg PPL": "avg_ppl"}

    @classmethod
    def from_dict(cls, data: Any, source=None) -> DownstreamRecord:
        metrics = _need(data, "metrics", dict, source)
        for task in metrics:
            _need(metrics, task, NUMBER, source, "metrics")
        return cls(metrics, _need(data, "Avg Acc", OPT_NUMBER, source), _need(data, "Avg PPL", OPT_NUMBER, source),
                   cls._extra(data))


# --------------------------------------------------------------------------- provenance


@dataclass
class ProvenanceRecord(_Record):
    """provenance.json: what one run's numbers came from. `code` (the package sources' sha256,
    the git commit), `data` (sha256 of the training token files, the tokenizer's and the
    corpus's where known), `init_weights_sha256` (the weights before the first update),
    `environment` (Python, torch, BLAS, the CPU kernel settings, threads, the lock's sha256),
    `first_losses` (the first logged training losses, as logged)."""

    code: dict[str, Any]
    data: dict[str, Any]
    init_weights_sha256: str | None
    environment: dict[str, Any]
    first_losses: list[float]
    extra: dict[str, Any] = field(default_factory=dict)  # format, run

    LAYOUT = ("format", "run", "code", "data", "init_weights_sha256", "environment", "first_losses")
    FIELDS = {"code": "code", "data": "data", "init_weights_sha256": "init_weights_sha256",
              "environment": "environment", "first_losses": "first_losses"}
    WRITE = {"indent": 1}
    #: What a difference in provenance means for the numbers, in the order the causes are named.
    CAUSES = (("data", "data"), ("initial weights", "init_weights_sha256"),
              ("numerics", "environment"), ("code", "code"))

    @classmethod
    def from_dict(cls, data: Any, source=None) -> ProvenanceRecord:
        losses = _need(data, "first_losses", list, source)
        if not all(isinstance(x, NUMBER) and not isinstance(x, bool) for x in losses):
            raise RecordError(f"{_where(source)}: key 'first_losses' should be a list of numbers")
        return cls(_need(data, "code", dict, source), _need(data, "data", dict, source),
                   _need(data, "init_weights_sha256", (str, type(None)), source),
                   _need(data, "environment", dict, source), losses, cls._extra(data))

    def identity(self) -> dict[str, Any]:
        """What must be equal for two runs to compute the same bits: the code's sources, the
        data, the initial weights and the environment (no commit, host or time)."""
        return {"data": self.data, "init_weights_sha256": self.init_weights_sha256,
                "environment": self.environment, "code": {"source_sha256": self.code.get("source_sha256")}}

    def first_difference(self, other: ProvenanceRecord) -> str | None:
        """The first of data, initial weights, numerics and code that differs, with the key; None
        when the identities agree."""
        mine, theirs = self.identity(), other.identity()
        for cause, key in self.CAUSES:
            if mine[key] != theirs[key]:
                a, b = mine[key], theirs[key]
                if isinstance(a, dict) and isinstance(b, dict):
                    k = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
                    return f"{cause} ({key}.{k}: {a.get(k)} vs {b.get(k)})"
                return f"{cause} ({key}: {a} vs {b})"
        return None


# --------------------------------------------------------------------------- long context


def _per_length(data: Any, what: str, source) -> tuple[list[int], dict[str, Any]]:
    """The `lengths` list and the table `what` keyed by str(length) of a long-context record."""
    lengths = _need(data, "lengths", list, source)
    table = _need(data, what, dict, source)
    for key in table:
        try:
            int(key)
        except ValueError:
            raise RecordError(f"{_where(source)}: key {what}.{key!r} is not a context length") from None
    return lengths, table


def _finite_by_length(table: dict[str, Any], value) -> dict[int, float]:
    """Length -> value(entry), the finite ones."""
    out = {int(k): float(value(v)) for k, v in table.items()}
    return {k: v for k, v in out.items() if math.isfinite(v)}


@dataclass
class ProofpileRecord(_Record):
    """proofpile.json: the context lengths and, keyed by str(length), the PPL (exp of the mean
    per-document NLL); the NLLs, per-document values and the run's settings in `extra`."""

    lengths: list[int]
    ppl: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)

    LAYOUT = ("lengths", "ppl", "nll", "mean_doc_ppl", "per_document_nll", "kind", "run", "model")
    FIELDS = {"lengths": "lengths", "ppl": "ppl"}
    WRITE = {"indent": 1}

    @classmethod
    def from_dict(cls, data: Any, source=None) -> ProofpileRecord:
        lengths, ppl = _per_length(data, "ppl", source)
        for key in ppl:
            _need(ppl, key, NUMBER, source, "ppl")
        return cls(lengths, ppl, cls._extra(data))

    def by_length(self) -> dict[int, float]:
        """Length -> PPL, the finite ones."""
        return _finite_by_length(self.ppl, float)


@dataclass
class RulerRecord(_Record):
    """ruler.json: the context lengths, the tasks and, keyed by str(length), each task's score
    (0-100) and their "mean"; empty predictions ("nulls") and the run's settings in `extra`."""

    lengths: list[int]
    scores: dict[str, dict[str, float]]
    extra: dict[str, Any] = field(default_factory=dict)

    LAYOUT = ("lengths", "tasks", "scores", "nulls", "data", "complete", "kind", "run", "model")
    FIELDS = {"lengths": "lengths", "scores": "scores"}
    WRITE = {"indent": 1}

    @classmethod
    def from_dict(cls, data: Any, source=None) -> RulerRecord:
        lengths, scores = _per_length(data, "scores", source)
        for key in scores:
            _need(_need(scores, key, dict, source, "scores"), "mean", NUMBER, source, f"scores.{key}")
        return cls(lengths, scores, cls._extra(data))

    def by_length(self) -> dict[int, float]:
        """Length -> the mean score over the tasks."""
        return _finite_by_length(self.scores, lambda entry: entry["mean"])


# --------------------------------------------------------------------------- decode


@dataclass
class DecodeRecord(_Record):
    """decode.json (and each pair's file it merges): latency rows ({"run", "mixer", "length",
    "latency_ms_median", "kv_bytes", ...}) and the pairs' comparisons; the benchmark's settings
    ("meta"; "sources" once merged) and the peer check in `extra`."""

    rows: list[dict[str, Any]]
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = {"rows": "rows", "comparisons": "comparisons"}
    WRITE = {"sort_keys": True, "default": str, "newline": False}
    ROW_KEYS = ("run", "mixer", "length")

    @classmethod
    def from_dict(cls, data: Any, source=None) -> DecodeRecord:
        rows = _need(data, "rows", list, source)
        for i, row in enumerate(rows):
            for key in cls.ROW_KEYS:
                _need(row, key, int if key == "length" else str, source, f"rows[{i}]")
        return cls(rows, _need(data, "comparisons", list, source), cls._extra(data))


# --------------------------------------------------------------------------- analyses and manifests


@dataclass
class NoveltyRecord(_Record):
    """novelty.json (`shapelm analyze novelty`): layer-wise novelty of one model, rho^MLP and
    rho^block per layer; the Pearson r with layer index, the layers it spans, the model and the
    text in `extra`."""

    rho_mlp: list[Any]
    rho_block: list[Any]
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = {"rho_mlp": "rho_mlp", "rho_block": "rho_block"}

    @classmethod
    def from_dict(cls, data: Any, source=None) -> NoveltyRecord:
        return cls(_need(data, "rho_mlp", list, source), _need(data, "rho_block", list, source), cls._extra(data))


@dataclass
class DepthRecord(_Record):
    """depth.json (`shapelm analyze depth`): the intact model's held-out `loss`; per applied block
    (the unrolled depth: a looped model's stored layers once per round) its `residual_norm` and
    `write_ratio` in `applied`; per stored layer its `skip_loss` and `skip_delta` in `layers`;
    `embedding_norm`, the text, the tokens and the definitions in `extra`."""

    loss: float
    applied: list[dict[str, Any]]
    layers: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = {"loss": "loss", "applied": "applied", "layers": "layers"}
    LAYOUT = ("model", "text", "device", "loss", "embedding_norm", "applied", "layers")

    @classmethod
    def from_dict(cls, data: Any, source=None) -> DepthRecord:
        applied = _need(data, "applied", list, source)
        layers = _need(data, "layers", list, source)
        for i, row in enumerate(applied):
            for key in ("depth", "layer"):
                _need(row, key, int, source, f"applied[{i}]")
            for key in ("residual_norm", "write_ratio"):
                _need(row, key, NUMBER, source, f"applied[{i}]")
        for i, row in enumerate(layers):
            _need(row, "layer", int, source, f"layers[{i}]")
            for key in ("skip_loss", "skip_delta"):
                _need(row, key, NUMBER, source, f"layers[{i}]")
        return cls(_need(data, "loss", NUMBER, source), applied, layers, cls._extra(data))


@dataclass
class RunManifestRecord(_Record):
    """A run's manifest.json (shapelm.train.loop): the resolved run config, the recipe and its
    hash, the data and the `hardware` it ran on (device type, names, world size), which the
    throughput table reads; a manifest written before hardware was recorded has none."""

    hardware: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = {"hardware": "hardware"}

    @classmethod
    def from_dict(cls, data: Any, source=None) -> RunManifestRecord:
        if not isinstance(data, dict):
            raise RecordError(f"{_where(source)}: expected a JSON object")
        hardware = _need(data, "hardware", (dict, type(None)), source) if "hardware" in data else None
        return cls(hardware or {}, cls._extra(data))

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer the run names (its own ``tokenizer``, else its config's ``data.tokenizer``)."""
        config = self.extra.get("config")
        named = self.extra.get("tokenizer") or (
            (config.get("data") or {}).get("tokenizer") if isinstance(config, dict) else None)
        return named if isinstance(named, str) else None

    @property
    def token_dir(self) -> str | None:
        """The token directory the run trained on (``data.dir``)."""
        data = self.extra.get("data")
        tokens = data.get("dir") if isinstance(data, dict) else None
        return tokens if isinstance(tokens, str) else None


# --------------------------------------------------------------------------- metrics.jsonl

#: The "kind" of an evaluation-during-training record (shapelm.train.evaluator); step records
#: have no "kind".
VAL_KIND = "val"
#: The held-out split of the training stream in val records (shapelm.train.evaluator.HELDOUT_SPLIT).
HELDOUT_SPLIT = "train_heldout"


def metrics_line(record: dict[str, Any]) -> str:
    """One metrics.jsonl line: a step record ({"step", "loss", "tokens", "tokens_per_s", ...}) or
    a val record ({"kind": "val", "step", "tokens", "train_heldout": {"loss", "ppl"}, "sets",
    "aggregate"})."""
    if "step" not in record:
        raise RecordError(f"metrics.jsonl record without a 'step': {sorted(record)}")
    return json.dumps(record, sort_keys=False) + "\n"


def read_metrics(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The records of a metrics.jsonl, in order (none where the file does not exist). Lines that
    are not a JSON object (a line torn by a kill) are skipped. A path that is not a file is an
    error naming it."""
    path = Path(path)
    if not path.is_file():
        _not_a_file(path)
        return
    try:
        f = open(path, "rb")
    except OSError as err:
        raise RecordError(f"{path}: cannot read it ({err.strerror or err})") from None
    with f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                raise RecordError(f"{path}: line {number} is not UTF-8 text (byte {err.start}); "
                                  "the training log is damaged") from None
            if not line:
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                yield rec


def is_val(record: dict[str, Any]) -> bool:
    return record.get("kind") == VAL_KIND
