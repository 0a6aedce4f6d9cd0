"""YaRN settings for context extension.

The frequencies themselves live in :func:`shapelm.model.rope.rope_inv_freq` (checked against
transformers' ``_compute_yarn_parameters`` in tests/longctx/test_longctx_yarn.py). Here: the scaling
dict the model config carries, and how to apply it to a loaded model.
"""

from __future__ import annotations

import math

from typing import Any

from shapelm.errors import ConfigError

#: Peng et al.: 4096 -> 65,536 with s = 16.
DEFAULT_ORIGINAL = 4096
DEFAULT_TARGET = 65_536


def yarn_scaling(
    factor: float | None = None,
    original_max_position_embeddings: int = DEFAULT_ORIGINAL,
    target_length: int | None = None,
) -> dict[str, Any]:
    """The ``rope_scaling`` dict: ``{"type": "yarn", "factor": s, "original_max_position_embeddings": L0}``.

    Give ``factor`` or ``target_length`` (then s = target / L0); with neither, s = 16.
    """
    original = int(original_max_position_embeddings)
    if original <= 0:
        raise ConfigError(f"original_max_position_embeddings must be positive, got {original}")
    if factor is None:
        factor = (target_length / original) if target_length else DEFAULT_TARGET / DEFAULT_ORIGINAL
    factor = float(factor)
    if not math.isfinite(factor) or factor < 1.0:
        raise ConfigError(f"YaRN factor must be >= 1, got {factor}")
    return {"type": "yarn", "factor": factor, "original_max_position_embeddings": original}


def apply_yarn(model, scaling: dict[str, Any] | None) -> None:
    """Switch a loaded model to YaRN RoPE and raise max_seq_len to s * L0 (weights unchanged)."""
    model.set_rope_scaling(scaling)
    if scaling:
        target = int(round(scaling["factor"] * scaling["original_max_position_embeddings"]))
        model.config.max_seq_len = max(int(model.config.max_seq_len), target)


def yarn_model_config(cfg, scaling: dict[str, Any] | None):
    """A copy of ``cfg`` (a ModelConfig) with YaRN RoPE and max_seq_len raised to s * L0, for
    building the extended model directly (e.g. on meta, to shard it)."""
    import dataclasses

    out = dataclasses.replace(cfg, rope_scaling=scaling)
    if scaling:
        target = int(round(scaling["factor"] * scaling["original_max_position_embeddings"]))
        out = dataclasses.replace(out, max_seq_len=max(int(cfg.max_seq_len), target))
    out.validate()
    return out
