"""Experiment and run configs: the one way to name a run and resolve what it trains.

An experiment config (`configs/*.yaml`) holds scale recipes (seed 000 Table 4), stage settings
and named runs; each run names its scale, so it inherits that scale's recipe, and gives its
architecture as a builder spec. `resolve_run` turns one run into a self-contained *run config*
(a plain dict, saved as JSON by the workflow) that every stage consumes:

    {"name": ..., "scale": ..., "arch": {...}, "model": ModelConfig.to_dict(),
     "train": TrainRecipe fields, "data": {...}, "eval": {...}, "experiment": ..., "hash": ...}

Validation happens on load against `schemas/config.schema.yaml` (unknown keys and bad values are
errors naming the key) and then by building every run's model config, before any job runs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config
from shapelm.model.config import RECOMPUTE_MODES, ModelConfig

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"


@dataclass
class TrainRecipe:
    """The pretraining recipe (seed 000 A.1.4, Table 4; OLMo-2 defaults)."""

    lr: float = 3e-4
    final_lr_ratio: float = 0.1  # OLMo decays the cosine to 0.1 x peak
    warmup_tokens: int = 0
    total_tokens: int = 0
    batch_tokens: int = 0  # global tokens per optimizer step
    seq_len: int = 4096
    micro_batch_size: int = 1  # sequences per device per forward pass
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    z_loss: float = 1e-5
    seed: int = 6198
    frozen_lm_head: bool = False
    precision: str = "auto"  # auto: bf16 autocast on GPU, float32 on CPU
    compile: bool | str = "auto"  # auto: compiled blocks on CUDA, eager elsewhere
    distributed: str = "ddp"  # ddp | fsdp | hsdp (shard within a node, replicate across nodes)
    activation_checkpointing: str = "none"  # none | selective | ffn | full (shapelm.model.transformer)
    fp8: bool = False  # torchao float8 training of the blocks' Linear layers (CUDA, SM89+)
    checkpoint_every: int = 1000  # optimizer steps
    keep_last: int = 2
    log_every: int = 10
    loss_chunk_tokens: int = 0  # 0: plain loss; >0: vocabulary loss in token chunks
    repetition_filter: bool = True  # OLMo's instance filter: period <= 13 repeated >= 32 times

    @property
    def batch_sequences(self) -> int:
        return self.batch_tokens // self.seq_len

    @property
    def total_steps(self) -> int:
        return self.total_tokens // self.batch_tokens

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup_tokens / self.batch_tokens)

    def validate(self, where: str = "train") -> None:
        if self.seq_len <= 0:
            raise ConfigError(f"{where}.seq_len must be positive, got {self.seq_len}")
        if self.batch_tokens <= 0 or self.batch_tokens % self.seq_len:
            raise ConfigError(
                f"{where}.batch_tokens={self.batch_tokens} must be a positive multiple of "
                f"seq_len={self.seq_len}"
            )
        if self.total_tokens < self.batch_tokens:
            raise ConfigError(
                f"{where}.total_tokens={self.total_tokens} is less than one step of "
                f"batch_tokens={self.batch_tokens}"
            )
        if self.lr <= 0:
            raise ConfigError(f"{where}.lr must be positive, got {self.lr}")
        if self.precision not in ("auto", "float32", "bf16"):
            raise ConfigError(f"{where}.precision must be auto, float32 or bf16, got {self.precision!r}")
        if self.distributed not in ("ddp", "fsdp", "hsdp"):
            raise ConfigError(f"{where}.distributed must be ddp, fsdp or hsdp, got {self.distributed!r}")
        if self.compile not in (True, False, "auto"):
            raise ConfigError(f"{where}.compile must be true, false or auto, got {self.compile!r}")
        if self.activation_checkpointing not in RECOMPUTE_MODES:
            raise ConfigError(f"{where}.activation_checkpointing must be one of {RECOMPUTE_MODES}, "
                              f"got {self.activation_checkpointing!r}")
        if self.micro_batch_size <= 0 or self.batch_sequences % self.micro_batch_size:
            raise ConfigError(
                f"{where}.micro_batch_size={self.micro_batch_size} must divide the "
                f"{self.batch_sequences} sequences of a step"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "train") -> "TrainRecipe":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
        data = dict(data)
        for key in ("warmup_tokens", "total_tokens", "batch_tokens"):
            if key in data:
                data[key] = int(float(data[key]))  # YAML writes 18e9 as a string or a float
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        recipe = cls(**data)
        recipe.validate(where)
        return recipe

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out


@dataclass
class Experiment:
    name: str
    path: Path | None
    raw: dict[str, Any]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # resolved run configs

    def run(self, name: str) -> dict[str, Any]:
        if name not in self.runs:
            raise ConfigError(f"unknown run {name!r}; this experiment has {len(self.runs)} runs")
        return self.runs[name]

    def runs_for(self, *, scale: str | None = None, table: str | None = None) -> list[str]:
        return [
            name
            for name, run in self.runs.items()
            if (scale is None or run["scale"] == scale) and (table is None or table in run["tables"])
        ]

    def section(self, key: str) -> dict[str, Any]:
        return copy.deepcopy(self.raw.get(key, {}))


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        # JSON through the JSON parser: YAML 1.1 reads "1e-08" (no dot) as a string.
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def validate_schema(data: dict[str, Any], where: str = "config") -> None:
    """Check `data` against the JSON schema; the error names the key path and the problem."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ConfigError(f"{where}: {key}: {err.message}")


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; override wins; lists are replaced, not concatenated."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_experiment(path_or_data: str | os.PathLike | dict[str, Any], overrides: dict | None = None) -> Experiment:
    """Load, validate and resolve every run of an experiment config."""
    if isinstance(path_or_data, dict):
        data, path, where = copy.deepcopy(path_or_data), None, "config"
    else:
        path = Path(path_or_data)
        data, where = load_yaml(path), str(path_or_data)
    if overrides:
        data = merge(data, overrides)
    if isinstance(data.get("cluster"), dict):
        data["cluster"] = _numbers_from_cli(data["cluster"])
    validate_schema(data, where)
    exp = Experiment(name=data.get("name", path.stem if path else "experiment"), path=path, raw=data)
    for run_name in data["runs"]:
        exp.runs[run_name] = resolve_run(data, run_name, where)
    return exp


def _numbers_from_cli(section: Any) -> Any:
    """`--config cluster={max_runtime_min: 2880}` arrives with string values: numbers back."""
    if isinstance(section, dict):
        return {k: _numbers_from_cli(v) for k, v in section.items()}
    if isinstance(section, str):
        for parse in (int, float):
            try:
                return parse(section)
            except ValueError:
                pass
    return section


def resolve_run(data: dict[str, Any], run_name: str, where: str = "config") -> dict[str, Any]:
    run = data["runs"][run_name]
    scale = run["scale"]
    if scale not in data.get("scales", {}):
        raise ConfigError(f"{where}: runs.{run_name}.scale: unknown scale {scale!r}")
    scale_cfg = data["scales"][scale]
    # The run's recipe (shapelm.recipes): `official` overrides with the released code's values.
    from shapelm.recipes import recipe_overrides

    recipe_train, recipe_arch, recipe_record = recipe_overrides(data, run_name, where)
    arch = merge(merge(data.get("model_defaults", {}), recipe_arch), run["arch"])
    if "n_heads" not in arch and arch.get("attention", True) and arch.get("kind") != "explicit":
        if "n_heads" in scale_cfg:
            arch["n_heads"] = scale_cfg["n_heads"]  # Table 4 gives attention heads per scale
    train_dict = merge(merge(data.get("train_defaults", {}), scale_cfg.get("train", {})), recipe_train)
    train_dict = merge(train_dict, run.get("train", {}))
    recipe = TrainRecipe.from_dict(train_dict, f"{where}: runs.{run_name}.train")
    arch.setdefault("max_seq_len", recipe.seq_len)
    model = build_model_config(arch, f"{where}: runs.{run_name}.arch")
    resolved = {
        "name": run_name,
        "experiment": data.get("name", "experiment"),
        "scale": scale,
        "tables": list(run.get("tables", [])),
        "label": run.get("label", run_name),
        "arch": arch,
        "model": json.loads(json.dumps(model.to_dict())),  # tuples -> lists, as on disk
        "train": recipe.to_dict(),
        "data": merge(data.get("data", {}), scale_cfg.get("data", {})),
        "eval": merge(data.get("eval", {}), run.get("eval", {})),
        "longctx": bool(run.get("longctx", False)),
    }
    if recipe_record:  # only `official`: the paper recipe leaves run configs (and hashes) as they were
        resolved["recipe"] = recipe_record
    resolved["hash"] = config_hash(resolved)
    return resolved


def config_hash(run: dict[str, Any]) -> str:
    blob = json.dumps({k: v for k, v in run.items() if k != "hash"}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_model_config(run: dict[str, Any]) -> ModelConfig:
    return ModelConfig.from_dict(run["model"])


def run_recipe(run: dict[str, Any]) -> TrainRecipe:
    return TrainRecipe.from_dict(run["train"])


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def load_run_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: run config not found")
    if path.suffix in (".yaml", ".yml"):
        run = load_yaml(path)
    else:
        try:
            run = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON: {err}") from None
    for key in ("name", "model", "train"):
        if key not in run:
            raise ConfigError(f"{path}: run config lacks key {key!r}")
    ModelConfig.from_dict(run["model"])
    TrainRecipe.from_dict(run["train"], f"{path}: train")
    return run
