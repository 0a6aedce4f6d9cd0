"""Shape builders: a short architecture spec (a YAML mapping) -> a `ModelConfig`.

    arch = {"kind": "hourglass", "d_model": 2496, "n_layers": 12, "k": 4, "d_h": 2016,
            "d_attn": 1536, "n_heads": 16}
    cfg = build_model_config(arch)

Each kind is a function registered with the keys it accepts; an unknown key, a missing key or an
impossible shape is a `ConfigError` naming the key (prefixed by where the spec came from).
Every kind also takes `mixer` (attention | gated_attention | titans | hope_attention) and `gate`
(elementwise | headwise) for its attention layers, Titans' `titans_variant` (mac | mag | mal),
`memory_hidden`, `memory_chunk`, `window`, `persistent_tokens`, and for hope_attention the CMS keys (`cms_chunks`, `cms_lr`, `cms_momentum`,
`cms_decay`, `cms_tapered_level`; docs/SHAPES.md). Kinds: conventional, hourglass, explicit (one entry per layer), and the schedule kinds in
`shapelm.model.schedules` (tapered, blocks, lws, variable_width, head_schedule).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from shapelm.errors import ConfigError
from shapelm.model.config import (
    CMS_BASE_CHUNK, CMS_LR, GATES, MIXERS, NORM_PLACEMENTS, RESIZES, TITANS_DEFAULTS, TITANS_VARIANTS,
    AttentionShape, LayerShape, ModelConfig,
)

# Keys every kind accepts: global model settings.
COMMON_KEYS: dict[str, Any] = {
    "vocab_size": 100_352,  # dolma2's 100,278 tokens padded to a multiple of 128, as OLMo-2
    "max_seq_len": 4096,
    "rope_theta": 500_000.0,
    "rope_scaling": None,
    "norm_eps": 1e-6,
    "qk_norm": True,
    "norm_placement": "pre",
    "init_std": 0.02,
    "loops": 1,  # looped blocks (arXiv 2607.13491): rounds over the stored layers
}
ATTENTION_KEYS = ("n_heads", "n_kv_heads", "head_dim", "d_attn", "attention")
#: ModelConfig fields a kind may take as shape keys (only variable_width does): where the
#: embeddings sit, at d_model or at the first / last layer's width (arXiv 2606.18246).
EMBEDDING_WIDTH_KEYS = ("original_input_width", "original_output_width")
# Keys every kind accepts that set each attention layer's token mixer (LayerShape.mixer/gate).
HOPE_KEYS = ("cms_chunks", "cms_lr", "cms_momentum", "cms_decay", "cms_tapered_level")
MIXER_KEYS = ("mixer", "gate", *TITANS_DEFAULTS, *HOPE_KEYS)
#: Which CMS level of a Hope-attention layer takes the layer's (tapered) FFN width; the others
#: take the mean width over layers (the uniform width at the same total).
CMS_TAPERED_LEVELS = ("all", "fastest", "slowest")

Builder = Callable[["Spec"], list[LayerShape]]
_BUILDERS: dict[str, tuple[Builder, tuple[str, ...]]] = {}


class Spec:
    """Typed access to a spec mapping; errors name `where.key`."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        self.data = data
        self.where = where

    def name(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = ...) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is ...:
            raise ConfigError(f"{self.name(key)} is required")
        return default

    def int(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{self.name(key)} must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, key: str, default: Any = ..., positive: bool = True) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and value <= 0):
            raise ConfigError(f"{self.name(key)} must be a positive number, got {value!r}")
        return float(value)

    def flag(self, key: str, default: Any = ...) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.name(key)} must be true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, default)
        if value not in choices:
            raise ConfigError(f"{self.name(key)} must be one of {list(choices)}, got {value!r}")
        return value


def register(kind: str, keys: tuple[str, ...]) -> Callable[[Builder], Builder]:
    def wrap(fn: Builder) -> Builder:
        _BUILDERS[kind] = (fn, keys)
        return fn

    return wrap


def kinds() -> list[str]:
    _load_schedule_kinds()
    return sorted(_BUILDERS)


def kind_keys(kind: str) -> tuple[str, ...]:
    """The shape keys a kind's builder takes (besides `kind` and COMMON_KEYS); () if unknown."""
    _load_schedule_kinds()
    return _BUILDERS[kind][1] if kind in _BUILDERS else ()


def build_model_config(arch: dict[str, Any], where: str = "arch") -> ModelConfig:
    """Validate `arch` and return the resolved per-layer `ModelConfig`."""
    _load_schedule_kinds()
    spec = Spec(arch, where)
    kind = spec.get("kind")
    if kind not in _BUILDERS:
        raise ConfigError(f"{spec.name('kind')}: unknown kind {kind!r}; known: {sorted(_BUILDERS)}")
    builder, keys = _BUILDERS[kind]
    allowed = {"kind", *COMMON_KEYS, *MIXER_KEYS, *keys}
    unknown = sorted(set(arch) - allowed)
    misplaced = [key for key in unknown if key in EMBEDDING_WIDTH_KEYS]
    if misplaced:
        raise ConfigError(f"{spec.name(misplaced[0])} applies only to kind variable_width "
                          f"(the embeddings at a layer's own width), not to kind {kind!r}")
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for kind {kind!r}; allowed: {sorted(allowed)}"
        )
    layers = _with_mixer(builder(spec), spec)
    settings = {key: arch.get(key, default) for key, default in COMMON_KEYS.items()}
    if settings["norm_placement"] not in NORM_PLACEMENTS:
        raise ConfigError(
            f"{spec.name('norm_placement')} must be one of {list(NORM_PLACEMENTS)}, "
            f"got {settings['norm_placement']!r}"
        )
    settings["loops"] = spec.int("loops", 1)
    settings.update({key: spec.flag(key, True) for key in EMBEDDING_WIDTH_KEYS if key in keys})
    if "resize" in keys:  # the stream's widening between layers (variable_width)
        settings["resize"] = spec.choice("resize", RESIZES, "zero")
    try:
        return ModelConfig(d_model=spec.int("d_model"), layers=layers, **settings)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def _with_mixer(layers: list[LayerShape], spec: Spec) -> list[LayerShape]:
    """Every attention layer gets the spec's `mixer` (attention | gated_attention | titans |
    hope_attention), its `gate` (gated attention), Titans' fields or Hope-attention's CMS."""
    if not any(spec.has(key) for key in MIXER_KEYS):
        return layers
    mixer = spec.choice("mixer", tuple(m for m in MIXERS if m != "none"), "attention")
    if mixer != "attention" and not any(layer.attention for layer in layers):
        raise ConfigError(f"{spec.name('mixer')}: {mixer} is a token mixer of attention layers, and "
                          "this model has none (attention: false would train an FFN-only model)")
    gate = spec.choice("gate", GATES, "elementwise") if mixer == "gated_attention" else None
    if spec.has("gate") and gate is None:
        raise ConfigError(f"{spec.name('gate')} applies only to mixer: gated_attention")
    for key in HOPE_KEYS:
        if spec.has(key) and mixer != "hope_attention":
            raise ConfigError(f"{spec.name(key)} applies only to mixer: hope_attention")
    titans = {}
    for key in TITANS_DEFAULTS:
        if spec.has(key):
            if mixer != "titans":
                raise ConfigError(f"{spec.name(key)} applies only to mixer: titans")
            titans[key] = spec.choice(key, TITANS_VARIANTS, "mac") if key == "titans_variant" else spec.int(key)
    if mixer == "hope_attention":
        return _with_cms(layers, spec)
    return [dataclasses.replace(layer, mixer=mixer, gate=gate, **titans) if layer.attention else layer
            for layer in layers]


def _with_cms(layers: list[LayerShape], spec: Spec) -> list[LayerShape]:
    """Hope-attention: each layer's one FFN width becomes a chain of len(cms_chunks) CMS levels."""
    chunks = spec.get("cms_chunks", [CMS_BASE_CHUNK, 4 * CMS_BASE_CHUNK])
    if not isinstance(chunks, list) or not chunks or any(
        isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in chunks
    ):
        raise ConfigError(f"{spec.name('cms_chunks')} must be a non-empty list of integers >= 1, got {chunks!r}")
    lr = spec.number("cms_lr", CMS_LR)
    rule = {"cms_lr": lr}
    for key in ("cms_momentum", "cms_decay"):
        value = spec.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ConfigError(f"{spec.name(key)} must be a number in [0, 1), got {value!r}")
        rule[key] = float(value)
    tapered = spec.choice("cms_tapered_level", CMS_TAPERED_LEVELS, "all")
    if any(layer.attention is None or len(layer.ffn_widths) != 1 for layer in layers):
        raise ConfigError(
            f"{spec.where}: mixer hope_attention needs attention and one FFN width in every layer "
            "(the CMS chain is set by cms_chunks, not by k or per-layer lists)"
        )
    widths = [layer.ffn_widths[0] for layer in layers]
    mean = max(1, round(sum(widths) / len(widths)))
    tapered_at = {"fastest": chunks.index(min(chunks)), "slowest": chunks.index(max(chunks))}.get(tapered)
    out = []
    for layer, width in zip(layers, widths):
        levels = tuple(width if tapered_at in (None, j) else mean for j in range(len(chunks)))
        out.append(dataclasses.replace(
            layer, ffn_widths=levels, mixer="hope_attention", cms_chunks=tuple(chunks), **rule,
        ))
    return out


def attention_shape(spec: Spec, d_model: int | None = None) -> AttentionShape | None:
    """Read the attention keys: n_heads, optional n_kv_heads (GQA), d_attn or head_dim."""
    if spec.get("attention", True) is False:
        return None
    n_heads = spec.int("n_heads")
    n_kv_heads = spec.int("n_kv_heads", n_heads)
    if spec.has("head_dim"):
        head_dim = spec.int("head_dim")
        if spec.has("d_attn") and spec.int("d_attn") != n_heads * head_dim:
            raise ConfigError(
                f"{spec.name('d_attn')}={spec.get('d_attn')} != n_heads*head_dim={n_heads * head_dim}"
            )
    else:
        d_attn = spec.int("d_attn", d_model if d_model is not None else spec.int("d_model"))
        if d_attn % n_heads:
            raise ConfigError(f"{spec.name('n_heads')}={n_heads} does not divide d_attn={d_attn}")
        head_dim = d_attn // n_heads
    if n_heads % n_kv_heads:
        raise ConfigError(f"{spec.name('n_kv_heads')}={n_kv_heads} does not divide n_heads={n_heads}")
    return AttentionShape(n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim)


def _ffn_width(spec: Spec) -> int:
    if spec.has("d_h") and spec.has("ffn_ratio"):
        raise ConfigError(f"{spec.where}: give d_h or ffn_ratio, not both")
    if spec.has("ffn_ratio"):
        return max(1, round(spec.number("ffn_ratio") * spec.int("d_model")))
    return spec.int("d_h")


@register("conventional", ("d_model", "n_layers", "d_h", "ffn_ratio", *ATTENTION_KEYS))
def conventional(spec: Spec) -> list[LayerShape]:
    """One SwiGLU FFN of width d_h per layer; attention at d_attn (default d_model)."""
    attn = attention_shape(spec)
    layer = LayerShape(attention=attn, ffn_widths=(_ffn_width(spec),))
    return [layer] * spec.int("n_layers")


@register("hourglass", ("d_model", "n_layers", "k", "d_h", "ffn_ratio", *ATTENTION_KEYS))
def hourglass(spec: Spec) -> list[LayerShape]:
    """K residual wide-narrow-wide sub-MLPs of width d_h; attention narrowed to d_attn."""
    attn = attention_shape(spec)
    layer = LayerShape(attention=attn, ffn_widths=(_ffn_width(spec),) * spec.int("k"))
    return [layer] * spec.int("n_layers")


@register("explicit", ("d_model", "layers"))
def explicit(spec: Spec) -> list[LayerShape]:
    """Every layer spelled out: [{n_heads, n_kv_heads, head_dim | attention: false, ffn: [w, ...],
    d_model (optional: the layer's own residual width)}]."""
    entries = spec.get("layers")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{spec.name('layers')} must be a non-empty list")
    layers = []
    for i, entry in enumerate(entries):
        sub = Spec(entry, f"{spec.where}.layers[{i}]")
        unknown = sorted(set(entry) - {"ffn", "d_model", *ATTENTION_KEYS})
        if unknown:
            raise ConfigError(f"{sub.where}: unknown key(s) {unknown}")
        widths = sub.get("ffn", [])
        if not isinstance(widths, list):
            raise ConfigError(f"{sub.name('ffn')} must be a list of widths")
        # a layer's own residual width (variable width, docs/SHAPES.md); default the model's
        width = sub.int("d_model", spec.int("d_model"))
        attn = attention_shape(sub, d_model=width)
        layers.append(LayerShape(attention=attn, ffn_widths=tuple(int(w) for w in widths),
                                 d_model=None if width == spec.int("d_model") else width))
    return layers


def _load_schedule_kinds() -> None:
    # Imported lazily: schedules registers its kinds into this module's registry.
    from shapelm.model import schedules  # noqa: F401
