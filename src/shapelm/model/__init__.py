"""The shapelm decoder, its per-layer shape config and its builders.

Shape configs and builders need no torch; the module names that do are imported on first use,
so planning the workflow (which only counts shapes) never pays torch's import time.
"""

from shapelm.model.config import AttentionShape, LayerShape, ModelConfig

_LAZY = {
    "ModelOutput": "shapelm.model.transformer",
    "Transformer": "shapelm.model.transformer",
    "build_model": "shapelm.model.transformer",
    "load_model_config": "shapelm.model.io",
    "load_pretrained": "shapelm.model.io",
    "save_pretrained": "shapelm.model.io",
}

__all__ = ["AttentionShape", "LayerShape", "ModelConfig", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shapelm.model' has no attribute {name!r}")
