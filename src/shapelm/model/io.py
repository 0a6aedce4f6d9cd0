"""Saving and loading a trained model: safetensors weights beside the resolved ModelConfig."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

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
    tmp = out / (WEIGHTS + ".tmp")
    save_file(state, str(tmp), metadata={"format": "pt", "producer": "shapelm"})
    os.replace(tmp, out / WEIGHTS)
    tmp_cfg = out / (CONFIG + ".tmp")
    tmp_cfg.write_text(json.dumps(model.config.to_dict(), indent=2))
    os.replace(tmp_cfg, out / CONFIG)
    return out


def load_model_config(path: str | os.PathLike) -> ModelConfig:
    path = Path(path)
    cfg_file = path / CONFIG if path.is_dir() else path
    if not cfg_file.exists():
        raise ShapelmError(f"{cfg_file}: no model config (expected {CONFIG} beside the weights)")
    return ModelConfig.from_dict(json.loads(cfg_file.read_text()))


def load_pretrained(path: str | os.PathLike, device: str = "cpu", dtype=torch.float32) -> Transformer:
    """Load a model saved by `save_pretrained`; a shape mismatch names the tensor and both shapes."""
    path = Path(path)
    cfg = load_model_config(path)
    weights = path / WEIGHTS
    if not weights.exists():
        raise ShapelmError(f"{weights}: weights file missing")
    state = load_file(str(weights), device="cpu")
    model = build_model(cfg, "cpu")
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ShapelmError(
            f"{weights}: does not match {path / CONFIG}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ShapelmError(
                f"{weights}: tensor {name} has shape {tuple(tensor.shape)} but the config "
                f"implies {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype)
