"""Rotary position embeddings, with YaRN scaling for context extension.

YaRN follows transformers' `_compute_yarn_parameters` (beta_fast 32, beta_slow 1, truncated
correction range, attention factor 0.1 ln s + 1) and always uses the model's own rope theta:
the YaRN reference Llama code silently uses 10000, which is wrong for OLMo-2's 500000.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_length: int) -> float:
    return (dim * math.log(original_length / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def rope_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None = None
) -> tuple[torch.Tensor, float]:
    """Return (inv_freq of shape [head_dim // 2], attention factor multiplying cos and sin)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    inv_freq_extrap = 1.0 / (theta**exponents)
    if not scaling:
        return inv_freq_extrap, 1.0
    factor = float(scaling["factor"])
    original = int(scaling["original_max_position_embeddings"])
    beta_fast = float(scaling.get("beta_fast", 32.0))
    beta_slow = float(scaling.get("beta_slow", 1.0))
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    inv_freq_interp = 1.0 / (factor * theta**exponents)
    low = math.floor(yarn_correction_dim(beta_fast, head_dim, theta, original))
    high = math.ceil(yarn_correction_dim(beta_slow, head_dim, theta, original))
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero division in the ramp, as the reference does
    ramp = (torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)
    extrap_weight = 1.0 - ramp.clamp(0.0, 1.0)
    inv_freq = inv_freq_interp * (1 - extrap_weight) + inv_freq_extrap * extrap_weight
    return inv_freq, float(attention_factor)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape [seq, head_dim] (the half-rotation layout of LLaMA/OLMo)."""
    freqs = torch.outer(positions.to(torch.float32), inv_freq.to(positions.device))
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [batch, heads, seq, head_dim]; cos/sin: [seq, head_dim]."""
    return x * cos + rotate_half(x) * sin
