"""The shapelm decoder, its per-layer shape config and its builders."""

from shapelm.model.config import AttentionShape, LayerShape, ModelConfig
from shapelm.model.io import load_model_config, load_pretrained, save_pretrained
from shapelm.model.transformer import ModelOutput, Transformer, build_model

__all__ = [
    "AttentionShape",
    "LayerShape",
    "ModelConfig",
    "ModelOutput",
    "Transformer",
    "build_model",
    "load_model_config",
    "load_pretrained",
    "save_pretrained",
]
