"""Saving and loading a trained model: safetensors weights beside the resolved ModelConfig."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from shapelm import files
from shapelm.errors import ShapelmError
from shapelm.model.config import ModelConfig
from shapelm.model.transformer import Transformer, build_model

WEIGHTS = "model.safetensors"
CONFIG = "model_config.json"


def save_pretrained(model: Transformer, out_dir: str | os.PathLike) -> Path:
    """Write weights and config atomically: a killed writer never leaves a half file behind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    with files.atomic_path(out / WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt", "producer": "shapelm"})
    files.write_json(out / CONFIG, model.config.to_dict(), newline=False)
    return out


def load_model_config(path: str | os.PathLike) -> ModelConfig:
    path = Path(path)
    cfg_file = path / CONFIG if path.is_dir() else path
    if not cfg_file.exists():
        raise ShapelmError(f"{cfg_file}: no model config (expected {CONFIG} beside the weights)")
    return ModelConfig.from_dict(json.loads(cfg_file.read_text()))


def load_pretrained(path: str | os.PathLike, device: str = "cpu", dtype=torch.float32) -> Transformer:
    """Load a model saved by `save_pretrained`; a shape mismatch names the tensor and both shapes.

    The module is built on meta and each tensor goes from the (memory-mapped) safetensors file
    straight to `device` in `dtype`: no random float32 CPU model first, so the peak is the
    model in `dtype` plus one tensor (8B in bf16: 16 GB on the GPU, not 72 GB of host memory)."""
    path = Path(path)
    cfg = load_model_config(path)
    weights = path / WEIGHTS
    if not weights.exists():
        raise ShapelmError(f"{weights}: weights file missing")
    model = build_model(cfg, "meta")
    expected = {name: t.shape for name, t in model.state_dict().items()}
    with safe_open(str(weights), framework="pt", device=str(device)) as f:
        names = set(f.keys())
        missing = sorted(set(expected) - names)
        unexpected = sorted(names - set(expected))
        if missing or unexpected:
            raise ShapelmError(
                f"{weights}: does not match {path / CONFIG}: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        for name in sorted(names):
            shape = tuple(f.get_slice(name).get_shape())
            if shape != tuple(expected[name]):
                raise ShapelmError(
                    f"{weights}: tensor {name} has shape {shape} but the config "
                    f"implies {tuple(expected[name])}"
                )
        state = {name: f.get_tensor(name).to(dtype) for name in names}
    model.load_state_dict(state, assign=True)
    return model
