"""The plan as a file: `work/EXP/plan.json`, and its one reader.

`shapelm.plan.build` writes it (the `experiment_plan` rule) from the loaded experiment; this
module reads it and imports the standard library only, so `shapelm.results` builds every table
and figure from the plan document and the per-run result files without importing config, model
or accounting code. The document holds, per run (every seed instance): the resolved run config,
its accounting row (parameters, FLOPs, KV bytes, recipe), its per-layer widths as built and,
for a tapered run, its schedule's raw and integer widths; per scale: the merged training recipe
and the configured GPU peak; the decode pairs and baselines; which runs each table lists; the
experiment's folders; the training recipe (paper text or released code) the experiment and each
run follow.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapelm.errors import ConfigError

#: Raised whenever the document's layout changes; a reader refuses any other version.
PLAN_VERSION = 2
PLAN_FILE = "plan.json"
REBUILD = "rebuild it: `snakemake --forcerun experiment_plan` (or delete it and rerun)"


class _Malformed(Exception):
    """A key of the plan document is missing or of the wrong type (the message names it)."""


def _shaped(data: Any, key: str, kind: type) -> Any:
    """data[key], which must be a `kind`; otherwise a _Malformed naming the key."""
    if not isinstance(data, dict) or key not in data:
        raise _Malformed(f"missing key {key!r}")
    if not isinstance(data[key], kind):
        raise _Malformed(f"key {key!r} should be a JSON {_JSON_NAMES.get(kind, kind.__name__)}, "
                         f"not {type(data[key]).__name__}")
    return data[key]


_JSON_NAMES = {dict: "object", list: "array", str: "string"}


@dataclass(frozen=True, eq=False)
class Plan:
    """One experiment's plan document, typed. `runs`: the resolved run configs by name;
    `recipe`: the experiment's training recipe, `run_recipes`: the one each run follows."""

    name: str
    runs: dict[str, dict[str, Any]]
    accounting: dict[str, dict[str, Any]]
    layers: dict[str, dict[str, Any]]
    tapered_schedules: dict[str, dict[str, Any]]
    scale_recipes: dict[str, dict[str, Any] | None]
    scale_peak_flops: dict[str, float | None]
    device_peak_flops: list[tuple[str, float]]
    decode_pairs: dict[str, tuple[str, str]]
    decode_baselines: dict[str, str]
    tables: dict[str, list[str]]
    paths: dict[str, str]
    recipe: str
    run_recipes: dict[str, str]
    _instances: dict[str, list[str]]
    _primary: frozenset[str]

    @classmethod
    def from_document(cls, doc: dict[str, Any], where: str = PLAN_FILE) -> "Plan":
        version = doc.get("version") if isinstance(doc, dict) else None
        if version != PLAN_VERSION:
            raise ConfigError(f"{where}: plan version {version!r}, this shapelm reads version {PLAN_VERSION}; "
                              f"{REBUILD}")
        field = "runs"
        try:
            runs = _shaped(doc, "runs", dict)
            for run_name, run in runs.items():
                field = f"runs.{run_name}"
                _shaped({field: run}, field, dict)
                for key in ("config", "accounting", "layers", "recipe", "instances", "primary"):
                    field = f"runs.{run_name}.{key}"
                    if key not in run:
                        raise KeyError(key)
            field = "tables"
            tables = {t: list(_shaped({f"tables.{t}": names}, f"tables.{t}", list))
                      for t, names in _shaped(doc, "tables", dict).items()}
            field = "decode"
            decode = _shaped(doc, "decode", dict)
            field = "decode.pairs"
            pairs = {s: (p[0], p[1]) for s, p in _shaped(decode, "pairs", dict).items()}
            field = "decode.baselines"
            baselines = dict(_shaped(decode, "baselines", dict))
            field = "device_peak_flops"
            device_peak = [(str(k), float(v)) for k, v in _shaped(doc, "device_peak_flops", list)]
            field = "runs"
            return cls(
                name=_shaped(doc, "name", str),
                runs={n: r["config"] for n, r in runs.items()},
                accounting={n: r["accounting"] for n, r in runs.items()},
                layers={n: r["layers"] for n, r in runs.items()},
                tapered_schedules={n: r["tapered_schedules"] for n, r in runs.items() if r.get("tapered_schedules")},
                scale_recipes=_shaped(doc, "scale_recipes", dict),
                scale_peak_flops=_shaped(doc, "scale_peak_flops", dict),
                device_peak_flops=device_peak,
                decode_pairs=pairs,
                decode_baselines=baselines,
                tables=tables,
                paths=dict(_shaped(doc, "paths", dict)),
                recipe=_shaped(doc, "recipe", str),
                run_recipes={n: r["recipe"] for n, r in runs.items()},
                _instances={n: list(r["instances"]) for n, r in runs.items()},
                _primary=frozenset(n for n, r in runs.items() if r["primary"]),
            )
        except _Malformed as err:
            raise ConfigError(f"{where}: {err}; {REBUILD}") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            missing = f"missing key {err.args[0]!r} in" if isinstance(err, KeyError) and err.args else "malformed"
            raise ConfigError(f"{where}: {missing} {field!r}; {REBUILD}") from None

    def instances(self, name: str) -> list[str]:
        """The seed instances of a run (`seeds:`), first seed first; [name] for any other run."""
        return list(self._instances.get(name, [name]))

    def is_primary(self, name: str) -> bool:
        """False for the instances of a run's seeds after its first (they are not rows of their own)."""
        return name in self._primary

    def runs_for_table(self, table: str) -> list[str]:
        """The runs listing `table` in `tables:`, seed instances after the first left out."""
        return list(self.tables.get(table, []))

    def peak_flops(self, run: str, device_name: str) -> float | None:
        """The peak FLOP/s a CUDA run's MFU is measured against: the device's bf16 peak by name
        (the trainer's table, as written in the plan), else the scale's `resources.gpu_peak_tflops`."""
        for key, value in self.device_peak_flops:
            if key.lower() in device_name.lower():
                return value
        return self.scale_peak_flops.get(self.runs[run]["scale"])


def read_plan(path: str | os.PathLike) -> Plan:
    """The plan document at `path`; one clear line when it is missing, unreadable or of another version."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: plan not found; {REBUILD}") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: a directory where the plan file should be; {REBUILD}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: unreadable plan (not UTF-8 text, byte {err.start}); {REBUILD}") from None
    except RecursionError:
        raise ConfigError(f"{p}: unreadable plan (JSON nested too deeply); {REBUILD}") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{p}: unreadable plan ({err}); {REBUILD}") from None
    return Plan.from_document(doc, str(p))


def is_plan_document(path: str | os.PathLike) -> bool:
    """Whether `path` is a plan document (a JSON object with a `version` key, which no experiment
    config may have) rather than an experiment config."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(doc, dict) and "version" in doc
