"""The one way to express an architecture: a `ModelConfig` holding one `LayerShape` per layer.

Every shape in the papers (conventional, hourglass, tapered, three-block, layer-wise scaled,
no-attention) is a list of per-layer shapes; builders in `shapelm.model.builders` produce them
from short specs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from shapelm.errors import ConfigError

NORM_PLACEMENTS = ("pre", "reordered")
# How a variable-width residual stream widens (ModelConfig.resize, shapelm.model.layers.resize).
RESIZES = ("zero", "move_up")
#: A layer's token mixer. "gated_attention" is Qiu et al. 2025 (arXiv 2505.06708): softmax
#: attention whose SDPA output is multiplied by sigmoid(x W_gate) before the output projection.
#: "titans" is Behrouz et al. 2024 (arXiv 2501.00663): the neural long-term memory
#: (shapelm.model.titans) beside sliding-window softmax attention, wired as `titans_variant`.
#: "hope_attention" is Behrouz et al. 2025c's Hope in its attention variant: softmax attention,
#: and the layer's FFN levels become a continuum memory system (shapelm.model.hope).
MIXERS = ("attention", "gated_attention", "titans", "hope_attention", "none")
#: The gate's granularity: one sigmoid per attention channel (the paper's best) or per head.
GATES = ("elementwise", "headwise")
#: Titans layer fields and their defaults (memory_hidden's None: 2 x the attention's head_dim).
#: The variant: "mac" (memory as context, Titans Section 4.1), "mag" (memory as a gate, 4.2) or
#: "mal" (memory as a layer, 4.3);
#: persistent_tokens: learned input-independent tokens every query attends to (Section 3.3).
TITANS_DEFAULTS = {"titans_variant": "mac", "memory_hidden": None, "memory_chunk": 64, "window": 512,
                   "persistent_tokens": 4}
TITANS_VARIANTS = ("mac", "mag", "mal")
#: Width of Titans' causal depthwise convolution after the memory's q, k and v projections
#: (Titans Section 4.4, "Convolution", following Mamba-2 and gated DeltaNet, which use 4).
TITANS_CONV_KERNEL = 4
#: Hope-attention defaults (docs/SHAPES.md): level j updates every 16 * 4**j tokens, by one SGD
#: step of this learning rate on its chunk's associative-memory loss, no momentum, no decay.
CMS_BASE_CHUNK = 16
CMS_LR = 1.0


@dataclass(frozen=True)
class AttentionShape:
    """Multi-head (or grouped-query) attention projecting d_model -> d_attn = n_heads * head_dim."""

    n_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def d_attn(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads


CMS_KEYS = ("cms_chunks", "cms_lr", "cms_momentum", "cms_decay")


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer: a token mixer, then residual SwiGLU sub-MLPs of the given widths.

    `ffn_widths == (d_h,)` is the conventional FFN; `(d_h,) * K` is the hourglass FFN.
    `mixer` defaults to "attention" when the layer has an attention shape and "none" when it
    has not; `gate` (gated attention only) defaults to "elementwise". Titans layers carry their
    variant (`titans_variant`, default "mac"), the memory MLP's hidden width per head
    (`memory_hidden`, default 2 x head_dim), its chunk size (`memory_chunk`, default 64), the
    attention's sliding window (`window`, default 512; MAG and MAL only: MAC attends within its
    memory_chunk-token segment) and its persistent tokens
    (`persistent_tokens`, default 4); the memory has the attention's heads and head_dim. Defaults are left out of
    `ModelConfig.to_dict`, so configs written before mixers existed keep their fingerprints.
    """

    attention: AttentionShape | None
    ffn_widths: tuple[int, ...]
    mixer: str | None = None
    gate: str | None = None
    titans_variant: str | None = None
    memory_hidden: int | None = None
    memory_chunk: int | None = None
    window: int | None = None
    persistent_tokens: int | None = None
    # Hope-attention only: ffn_widths[j] is CMS level j, its fast weights updated every
    # cms_chunks[j] tokens: W <- (1 - cms_decay) W - cms_lr * M, M <- cms_momentum M + grad.
    cms_chunks: tuple[int, ...] | None = None
    cms_lr: float | None = None
    cms_momentum: float | None = None
    cms_decay: float | None = None
    # Variable residual width (arXiv 2606.18246): this layer's residual width, None = the model's
    # d_model. The stream is resized to it before the layer and, after the last layer and the
    # final norm, to the unembedding's width (`ModelConfig.output_width`).
    d_model: int | None = None

    def __post_init__(self) -> None:
        if self.mixer is None:
            object.__setattr__(self, "mixer", "none" if self.attention is None else "attention")
        if self.gate is None and self.mixer == "gated_attention":
            object.__setattr__(self, "gate", "elementwise")
        if self.mixer == "titans" and self.attention is not None:
            for key, default in TITANS_DEFAULTS.items():
                if getattr(self, key) is None:
                    value = 2 * self.attention.head_dim if key == "memory_hidden" else default
                    object.__setattr__(self, key, value)
        if self.hope:
            defaults = {
                "cms_chunks": tuple(CMS_BASE_CHUNK * 4**j for j in range(len(self.ffn_widths))),
                "cms_lr": CMS_LR, "cms_momentum": 0.0, "cms_decay": 0.0,
            }
            for key, default in defaults.items():
                if getattr(self, key) is None:
                    object.__setattr__(self, key, default)
            object.__setattr__(self, "cms_chunks", tuple(self.cms_chunks))

    @property
    def gated(self) -> bool:
        return self.mixer == "gated_attention"

    @property
    def hope(self) -> bool:
        return self.mixer == "hope_attention"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attention": dataclasses.asdict(self.attention) if self.attention else None,
            "ffn_widths": list(self.ffn_widths),
        }
        if self.mixer != ("none" if self.attention is None else "attention"):
            out["mixer"] = self.mixer
        if self.gated:
            out["gate"] = self.gate
        for key in TITANS_DEFAULTS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.hope:
            out.update({key: getattr(self, key) for key in CMS_KEYS})
            out["cms_chunks"] = list(self.cms_chunks)
        if self.d_model is not None:
            out["d_model"] = self.d_model
        return out


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int
    layers: list[LayerShape]
    max_seq_len: int = 4096
    rope_theta: float = 500_000.0
    # YaRN: {"type": "yarn", "factor": s, "original_max_position_embeddings": L0} or None.
    rope_scaling: dict[str, Any] | None = None
    norm_eps: float = 1e-6
    qk_norm: bool = True
    # "pre": x + f(Norm(x)) (LLaMA, the papers' models); "reordered": x + Norm(f(x)) (OLMo-2).
    norm_placement: str = "pre"
    init_std: float = 0.02
    tie_embeddings: bool = False
    # Looped blocks (arXiv 2607.13491): the stored layers applied `loops` rounds in order, so the
    # unrolled depth is loops * n_layers with the parameters of n_layers.
    loops: int = 1
    # Variable residual width (arXiv 2606.18246, its `original_input_width` / `original_output_width`):
    # true keeps the input embedding (the unembedding) at d_model, false puts it
    # at the first (last) layer's own width, so no resize is needed at that end.
    original_input_width: bool = True
    original_output_width: bool = True
    # How the stream widens between layers of other widths (arXiv 2606.18246's `expand_method`,
    # `shapelm.model.layers.resize`): "zero" pads with zeros, "move_up" (their dense configs')
    # takes each added channel from the newest earlier state of the stream that has it.
    resize: str = "zero"

    def __post_init__(self) -> None:
        self.layers = [_coerce_layer(layer) for layer in self.layers]
        self.validate()

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def validate(self) -> None:
        if self.vocab_size <= 0:
            raise ConfigError(f"vocab_size must be positive, got {self.vocab_size}")
        if self.d_model <= 0:
            raise ConfigError(f"d_model must be positive, got {self.d_model}")
        if not self.layers:
            raise ConfigError("layers: a model needs at least one layer")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ConfigError(
                f"norm_placement must be one of {NORM_PLACEMENTS}, got {self.norm_placement!r}"
            )
        if self.tie_embeddings:
            raise ConfigError("tie_embeddings: the papers' models use untied embeddings")
        if isinstance(self.loops, bool) or not isinstance(self.loops, int) or self.loops < 1:
            raise ConfigError(f"loops must be an integer >= 1, got {self.loops!r}")
        for key in ("original_input_width", "original_output_width"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{key} must be true or false, got {getattr(self, key)!r}")
        if self.resize not in RESIZES:
            raise ConfigError(f"resize must be one of {list(RESIZES)}, got {self.resize!r}")
        if self.loops > 1 and self.has_recurrent_state:
            raise ConfigError("loops: a layer with a recurrent state (titans, hope_attention) cannot be looped")
        for key in ("rope_theta", "norm_eps", "init_std"):  # a checkpoint's config, not only the schema's
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value > 0):
                raise ConfigError(f"{key} must be a finite number > 0, got {value!r}")
        for i, layer in enumerate(self.layers):
            attn = layer.attention
            _validate_mixer(i, layer)
            if layer.d_model is not None and (
                    isinstance(layer.d_model, bool) or not isinstance(layer.d_model, int) or layer.d_model <= 0):
                raise ConfigError(f"layers[{i}].d_model must be a positive integer, got {layer.d_model!r}")
            if attn is not None:
                for key in ("n_heads", "n_kv_heads", "head_dim"):
                    if getattr(attn, key) <= 0:
                        raise ConfigError(f"layers[{i}].attention.{key} must be positive")
                if attn.n_heads % attn.n_kv_heads:
                    raise ConfigError(
                        f"layers[{i}].attention: n_heads={attn.n_heads} is not a multiple of "
                        f"n_kv_heads={attn.n_kv_heads}"
                    )
                if attn.head_dim % 2:
                    raise ConfigError(f"layers[{i}].attention.head_dim must be even for RoPE")
            if not layer.ffn_widths and attn is None:
                raise ConfigError(f"layers[{i}]: a layer needs attention or at least one FFN block")
            for j, width in enumerate(layer.ffn_widths):
                if width <= 0:
                    raise ConfigError(f"layers[{i}].ffn_widths[{j}] must be positive, got {width}")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("type")
            if kind != "yarn":
                raise ConfigError(f"rope_scaling.type must be 'yarn', got {kind!r}")
            for key in ("factor", "original_max_position_embeddings"):
                if key not in self.rope_scaling:
                    raise ConfigError(f"rope_scaling.{key} is required for YaRN")
            factor = self.rope_scaling["factor"]
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (
                    math.isfinite(factor) and factor >= 1):
                raise ConfigError(f"rope_scaling.factor must be a finite number >= 1, got {factor!r}")

    def width(self, i: int) -> int:
        """Layer i's residual width (its own `d_model`, else the model's)."""
        return self.layers[i].d_model or self.d_model

    @property
    def input_width(self) -> int:
        """The input embedding's width: d_model, or the first layer's with `original_input_width` false."""
        return self.d_model if self.original_input_width else self.width(0)

    @property
    def output_width(self) -> int:
        """The unembedding's width: d_model, or the last layer's with `original_output_width` false."""
        return self.d_model if self.original_output_width else self.width(self.n_layers - 1)

    @property
    def final_norm_width(self) -> int:
        """The final norm's width: the last layer's. It normalises the stream as the last layer
        leaves it; the stream is resized to `output_width` after it (arXiv 2606.18246's code)."""
        return self.width(self.n_layers - 1)

    @property
    def variable_width(self) -> bool:
        return any(layer.d_model not in (None, self.d_model) for layer in self.layers)

    @property
    def has_attention(self) -> bool:
        return any(layer.attention is not None for layer in self.layers)

    @property
    def has_recurrent_state(self) -> bool:
        """Whether decoding carries a state beside the KV cache (Titans' memories, Hope-attention's
        fast weights): such a state has no key mask, so a shifted prompt would read its padding."""
        return any(layer.mixer == "titans" or (layer.hope and layer.ffn_widths) for layer in self.layers)

    def uniform(self, attr: str) -> Any:
        """A per-layer attribute when every layer agrees, else None (for summary tables)."""
        values = {_layer_attr(layer, attr) for layer in self.layers}
        return values.pop() if len(values) == 1 else None

    @property
    def unrolled_layers(self) -> list[LayerShape]:
        """The layers in the order they run: every stored layer once per loop round."""
        return self.layers * self.loops

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["layers"] = [layer.to_dict() for layer in self.layers]
        if self.loops == 1:  # configs written before loops existed keep their fingerprints
            del out["loops"]
        for key in ("original_input_width", "original_output_width"):
            if out[key]:  # the default (embeddings at d_model): older configs keep their fingerprints
                del out[key]
        if out["resize"] == "zero":
            del out["resize"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown model config key(s): {', '.join(unknown)}")
        return cls(**data)

    def fingerprint(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _validate_mixer(i: int, layer: LayerShape) -> None:
    if layer.mixer not in MIXERS:
        raise ConfigError(f"layers[{i}].mixer must be one of {MIXERS}, got {layer.mixer!r}")
    if (layer.mixer == "none") != (layer.attention is None):
        raise ConfigError(
            f"layers[{i}]: mixer {layer.mixer!r} "
            + ("needs an attention shape" if layer.attention is None else "takes no attention shape")
        )
    if layer.gated:
        if layer.gate not in GATES:
            raise ConfigError(f"layers[{i}].gate must be one of {GATES}, got {layer.gate!r}")
    elif layer.gate is not None:
        raise ConfigError(f"layers[{i}].gate applies only to mixer 'gated_attention', not {layer.mixer!r}")
    for key in TITANS_DEFAULTS:
        value = getattr(layer, key)
        if layer.mixer != "titans" and value is not None:
            raise ConfigError(f"layers[{i}].{key} applies only to mixer 'titans', not {layer.mixer!r}")
        if layer.mixer != "titans":
            continue
        if key == "titans_variant":
            if value not in TITANS_VARIANTS:
                raise ConfigError(f"layers[{i}].titans_variant must be one of {TITANS_VARIANTS}, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"layers[{i}].{key} must be a positive integer, got {value!r}")
    if not layer.hope:
        for key in CMS_KEYS:
            if getattr(layer, key) is not None:
                raise ConfigError(f"layers[{i}].{key} applies only to mixer 'hope_attention', not {layer.mixer!r}")
        return
    if not layer.ffn_widths:
        raise ConfigError(f"layers[{i}]: mixer 'hope_attention' needs at least one CMS level (ffn_widths)")
    if len(layer.cms_chunks) != len(layer.ffn_widths):
        raise ConfigError(
            f"layers[{i}].cms_chunks: one chunk size per CMS level, got {len(layer.cms_chunks)} "
            f"for {len(layer.ffn_widths)} levels"
        )
    for j, chunk in enumerate(layer.cms_chunks):
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ConfigError(f"layers[{i}].cms_chunks[{j}] must be an integer >= 1, got {chunk!r}")
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if not (number(layer.cms_lr) and layer.cms_lr > 0):
        raise ConfigError(f"layers[{i}].cms_lr must be positive, got {layer.cms_lr!r}")
    for key in ("cms_momentum", "cms_decay"):
        if not (number(getattr(layer, key)) and 0 <= getattr(layer, key) < 1):
            raise ConfigError(f"layers[{i}].{key} must be in [0, 1), got {getattr(layer, key)!r}")


def _layer_attr(layer: LayerShape, attr: str) -> Any:
    attn = layer.attention
    if attr == "d_attn":
        return attn.d_attn if attn else 0
    if attr == "ffn_k":
        return len(layer.ffn_widths)
    if attr == "ffn_d_h":
        widths = set(layer.ffn_widths)
        return widths.pop() if len(widths) == 1 else None
    if attr in ("n_heads", "n_kv_heads", "head_dim"):
        return getattr(attn, attr) if attn else 0
    raise KeyError(attr)


def _coerce_layer(layer: Any) -> LayerShape:
    if isinstance(layer, LayerShape):
        return layer
    if not isinstance(layer, dict):
        raise ConfigError(f"a layer must be a mapping, got {type(layer).__name__}")
    unknown = sorted(set(layer) - {"attention", "ffn_widths", "mixer", "gate", "d_model", *TITANS_DEFAULTS, *CMS_KEYS})
    if unknown:
        raise ConfigError(f"unknown layer key(s): {', '.join(unknown)}")
    attn = layer.get("attention")
    if isinstance(attn, dict):
        bad = sorted(set(attn) - {"n_heads", "n_kv_heads", "head_dim"})
        if bad:
            raise ConfigError(f"unknown attention key(s): {', '.join(bad)}")
        attn = AttentionShape(**attn)
    return LayerShape(
        attention=attn,
        ffn_widths=tuple(int(w) for w in layer.get("ffn_widths", ())),
        mixer=layer.get("mixer"),
        gate=layer.get("gate"),
        **{key: layer.get(key) for key in TITANS_DEFAULTS},
        cms_chunks=tuple(layer["cms_chunks"]) if layer.get("cms_chunks") is not None else None,
        **{key: layer.get(key) for key in ("cms_lr", "cms_momentum", "cms_decay")},
        d_model=layer.get("d_model"),
    )


def run_model_config(run: dict[str, Any]) -> ModelConfig:
    """A resolved run config's model config (its `model` key, as `ModelConfig.to_dict` wrote it)."""
    return ModelConfig.from_dict(run["model"])
