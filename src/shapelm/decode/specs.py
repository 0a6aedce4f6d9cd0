"""Architecture specs for the decode benchmark: named presets, inline specs, files, run configs.

A SPEC is one of
- a preset name: `906m_conv`, `906m_hg`, `3b_conv`, `3b_hg`, `8b_conv`, `8b_hg` (arXiv 2602.06471 Table 2
  shapes, as in `reference/paper_values.yaml`), `cpu_conv`, `cpu_hg` (the scaled-down CPU pair);
- an inline builder spec, JSON or YAML: '{"kind": "hourglass", "d_model": 384, ...}';
- a file: a builder spec (has `kind`), a resolved run config (has `model`), or a
  `model_config.json` (has `layers`).
Runs of an experiment arrive resolved (`resolve_runs`): `shapelm.commands.bench` looks them up in the plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from shapelm.config import StrictLoader
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config
from shapelm.model.config import ModelConfig

PRESETS: dict[str, dict[str, Any]] = {
    # arXiv 2602.06471 Table 2 / Table 12 (906M: d_attn 1536 in both arms, 16 heads)
    "906m_conv": {"kind": "conventional", "d_model": 1536, "n_layers": 24, "d_h": 6144, "n_heads": 16},
    "906m_hg": {"kind": "hourglass", "d_model": 2496, "n_layers": 12, "k": 4, "d_h": 2016, "d_attn": 1536,
                "n_heads": 16},
    "3b_conv": {"kind": "conventional", "d_model": 3072, "n_layers": 28, "d_h": 8192, "n_heads": 24},
    "3b_hg": {"kind": "hourglass", "d_model": 3696, "n_layers": 18, "k": 4, "d_h": 2944, "d_attn": 3072,
              "n_heads": 24},
    "8b_conv": {"kind": "conventional", "d_model": 4096, "n_layers": 32, "d_h": 14336, "n_heads": 32},
    "8b_hg": {"kind": "hourglass", "d_model": 4992, "n_layers": 22, "k": 4, "d_h": 4544, "d_attn": 4096,
              "n_heads": 32},
    # Scaled-down CPU pair: L 8 vs 4 at the same d_attn 256 (4 heads x 64), a small vocabulary so
    # that the KV cache, not the weights, dominates the bytes a decode step reads at long context.
    # qk_norm off so the conventional arm exports to LLaMA for the transformers peer.
    "cpu_conv": {"kind": "conventional", "d_model": 256, "n_layers": 8, "d_h": 1024, "n_heads": 4,
                 "vocab_size": 2048, "qk_norm": False},
    "cpu_hg": {"kind": "hourglass", "d_model": 384, "n_layers": 4, "k": 4, "d_h": 256, "d_attn": 256,
               "n_heads": 4, "vocab_size": 2048, "qk_norm": False},
}

PAIRS = {name: (f"{name}_conv", f"{name}_hg") for name in ("906m", "3b", "8b", "cpu")}

# Paper values to print beside measurements (reference/paper_values.yaml: hourglass_table12 and
# hourglass_table2's 64k decode latency).
PAPER_SPEEDUP_906M = {
    "mha": {32768: 1.93, 65536: 1.96, 131072: 1.98},
    "gqa": {32768: 1.87, 65536: 1.93, 131072: 1.97},
    "mla": {32768: 1.87, 65536: 1.94, 131072: 1.97},
}
PAPER_RELATIVE_LATENCY_64K = {"906m": 0.52, "3b": 0.66, "8b": 0.70}


def resolve_spec(spec: str, vocab_size: int | None = None) -> tuple[str, ModelConfig]:
    """(name, ModelConfig) for a SPEC string; `vocab_size` overrides the spec's."""
    if spec in PRESETS:
        arch = dict(PRESETS[spec])
        name = spec
    else:
        path = Path(spec)
        if not spec.lstrip().startswith("{") and path.exists():
            text, name = path.read_text(), path.stem
        else:
            text, name = spec, "arch"
        try:
            data = json.loads(text) if text.lstrip().startswith("{") else yaml.load(text, Loader=StrictLoader)
        except (json.JSONDecodeError, yaml.YAMLError) as err:
            raise ConfigError(f"{spec!r}: not a preset ({', '.join(PRESETS)}), a file or a JSON/YAML spec: {err}")
        if not isinstance(data, dict):
            raise ConfigError(f"{spec!r}: not a preset ({', '.join(PRESETS)}), a file or a JSON/YAML spec")
        if "model" in data and isinstance(data["model"], dict):  # a resolved run config
            name = data.get("name", name)
            cfg = ModelConfig.from_dict(data["model"])
            return name, _with_vocab(cfg, vocab_size)
        if "layers" in data and "kind" not in data:  # a ModelConfig dict
            return name, _with_vocab(ModelConfig.from_dict(data), vocab_size)
        arch = data
        name = arch.pop("name", name) if "name" in arch else name
    if vocab_size:
        arch["vocab_size"] = vocab_size
    return name, build_model_config(arch, where=name)


def _with_vocab(cfg: ModelConfig, vocab_size: int | None) -> ModelConfig:
    if vocab_size:
        cfg.vocab_size = vocab_size
        cfg.validate()
    return cfg


def resolve_runs(runs: list[tuple[str, dict[str, Any]]], vocab_size: int | None = None) -> list[tuple[str, ModelConfig]]:
    """Arms from resolved run configs, (name, run config) each: the caller (a front end reading
    the plan) resolves the runs; this stage loads no experiment."""
    from shapelm.model.config import run_model_config

    return [(name, _with_vocab(run_model_config(run), vocab_size)) for name, run in runs]
