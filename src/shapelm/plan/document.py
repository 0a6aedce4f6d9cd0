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
        runs = doc["runs"]
        return cls(
            name=doc["name"],
            runs={n: r["config"] for n, r in runs.items()},
            accounting={n: r["accounting"] for n, r in runs.items()},
            layers={n: r["layers"] for n, r in runs.items()},
            tapered_schedules={n: r["tapered_schedules"] for n, r in runs.items() if r.get("tapered_schedules")},
            scale_recipes=doc["scale_recipes"],
            scale_peak_flops=doc["scale_peak_flops"],
            device_peak_flops=[(str(k), float(v)) for k, v in doc["device_peak_flops"]],
            decode_pairs={s: (p[0], p[1]) for s, p in doc["decode"]["pairs"].items()},
            decode_baselines=dict(doc["decode"]["baselines"]),
            tables={t: list(names) for t, names in doc["tables"].items()},
            paths=dict(doc["paths"]),
            recipe=doc["recipe"],
            run_recipes={n: r["recipe"] for n, r in runs.items()},
            _instances={n: list(r["instances"]) for n, r in runs.items()},
            _primary=frozenset(n for n, r in runs.items() if r["primary"]),
        )

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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and "version" in doc
