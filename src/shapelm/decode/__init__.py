"""KV-cache decode path and the decode-latency benchmark (arXiv 2602.06471 4.7, B.1; docs/DECODE.md)."""

from shapelm.model.cache import MLASpec, StaticKVCache
from shapelm.decode.mla import MLAAttention, MLAShape
from shapelm.decode.model import (
    MIXERS,
    build_decode_model,
    make_cache,
    mixer_config,
    predicted_kv_bytes,
)

__all__ = [
    "MIXERS",
    "MLAAttention",
    "MLAShape",
    "MLASpec",
    "StaticKVCache",
    "build_decode_model",
    "make_cache",
    "mixer_config",
    "predicted_kv_bytes",
]
