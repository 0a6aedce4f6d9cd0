"""Per-layer width schedules: tapered (002), three-block (002 Figure 2), layer-wise scaling (003).

Registered into `shapelm.model.builders` as kinds "tapered", "blocks" and "lws". The width rules
are also exported as pure functions (`tapered_widths`, `block_widths`, `lws_layer_multipliers`,
`make_divisible`, `lws_layers`) so that tests, the solver and the docs can call them directly.
docs/SHAPES.md describes every kind with a YAML example.

Rounding rules, in one place:

* tapered: the first and last layer are exactly d_start and d_end. The interior targets are the
  raw schedule values (shifted by one constant, clamped to [d_end, d_start], only when they do not
  already sum to what the interior needs -- never for start + end = 2, where every schedule's mean
  is exactly d_ff), each rounded to the nearest multiple of `multiple` (ties upward). If the
  rounded total still differs from L*d_ff, single `multiple` steps are applied one at a time: a
  step *up* goes to the interior layer furthest below its target (lowest index on ties) among
  those that stay <= their predecessor; a step *down* goes to the interior layer furthest above
  its target (highest index on ties) among those that stay >= their successor (largest-remainder
  apportionment). It always succeeds when an exact monotone allocation exists, else ConfigError.
* blocks: round(ratio * d_ff / multiple) * multiple per block (ties upward).
* lws: OpenELM's rule (apple/corenet general_gpt.py + utils/math_utils.py `make_divisible`) as run
  by the 003 authors (baroian/OLMo-custom olmo_core/nn/transformer/model.py); see `lws_layers`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from shapelm.errors import ConfigError
from shapelm.model.builders import (
    ATTENTION_KEYS, COMMON_KEYS, EMBEDDING_WIDTH_KEYS, Spec, _ffn_width, attention_shape, register,
)
from shapelm.model.config import AttentionShape, LayerShape
from shapelm.model.variable_width import FFN_RATIO, solve_widths
from shapelm.model.variable_width import SCHEDULES as WIDTH_SCHEDULES

__all__ = [
    "LWS_VARIANTS",
    "SCHEDULES",
    "block_sizes",
    "block_widths",
    "lws_layer_multipliers",
    "lws_layers",
    "lws_variant",
    "make_divisible",
    "tapered_raw",
    "tapered_widths",
]

SCHEDULES = ("linear", "cosine", "sigmoid")

Namer = Callable[[str], str]


def _plain(key: str) -> str:
    return key


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _exact_multiple(value: float, multiple: int, key: str, name: Namer, what: str) -> int:
    """`value` as an int, which must be (within float noise) an integer multiple of `multiple`."""
    as_int = _round_half_up(value)
    if abs(value - as_int) > 1e-6 or as_int % multiple:
        raise ConfigError(
            f"{name(key)}: {what} = {value:g} is not a multiple of {multiple}; the exact-total "
            f"constraint needs whole multiples (choose d_ff/{key} so that it is)"
        )
    return as_int


# --------------------------------------------------------------------------------------------
# Tapered (arXiv 2606.23670, Section 2.3; docs/PAPER_NOTES.md protocol 3)
# --------------------------------------------------------------------------------------------


def tapered_raw(d_start: float, d_end: float, n_layers: int, schedule: str, k: float = 10.0) -> list[float]:
    """The unrounded schedule values d_ff(l), l = 0..L-1, with t = l/(L-1)."""
    if n_layers < 2:
        raise ConfigError(f"n_layers must be >= 2 for a tapered schedule, got {n_layers}")
    out = []
    for layer in range(n_layers):
        t = layer / (n_layers - 1)
        if schedule == "linear":
            value = d_start - (d_start - d_end) * t
        elif schedule == "cosine":
            value = d_end + (d_start - d_end) / 2 * (1 + math.cos(math.pi * t))
        elif schedule == "sigmoid":
            value = d_end + (d_start - d_end) / (1 + math.exp(k * (t - 0.5)))
        else:
            raise ConfigError(f"schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
        out.append(value)
    return out


def _shift_to_sum(values: list[float], goal: float, lo: float, hi: float) -> list[float]:
    """clamp(v + c, lo, hi) with the constant c that makes the sum equal `goal` (c = 0 when the
    clamped values already sum to it, as they do for every start + end = 2 schedule)."""
    def shifted(c: float) -> list[float]:
        return [min(hi, max(lo, v + c)) for v in values]

    if not values or abs(sum(shifted(0.0)) - goal) < 1e-6:
        return shifted(0.0)
    a, b = -(hi - lo), hi - lo  # sum(shifted(a)) = n*lo <= goal <= n*hi = sum(shifted(b))
    for _ in range(200):
        mid = (a + b) / 2
        if sum(shifted(mid)) < goal:
            a = mid
        else:
            b = mid
    return shifted((a + b) / 2)


def tapered_widths(
    d_ff: int,
    n_layers: int,
    schedule: str,
    start: float,
    end: float,
    multiple: int = 16,
    k: float = 10,
    *,
    name: Namer = _plain,
) -> list[int]:
    """Per-layer widths: non-increasing, multiples of `multiple`, first d_start = start*d_ff,
    last d_end = end*d_ff, and sum == n_layers * d_ff exactly (the uniform model's FFN budget).

    Raises ConfigError naming the key when no such allocation exists. `name` maps a key to the
    name used in messages (the builder passes `Spec.name`).
    """
    for key, value in (("d_ff", d_ff), ("n_layers", n_layers), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name(key)} must be a positive integer, got {value!r}")
    if schedule not in SCHEDULES:
        raise ConfigError(f"{name('schedule')} must be one of {list(SCHEDULES)}, got {schedule!r}")
    if n_layers < 2:
        raise ConfigError(f"{name('n_layers')} must be >= 2 for a tapered schedule, got {n_layers}")
    if not end > 0:
        raise ConfigError(f"{name('end')} must be positive, got {end!r}")
    if not start > end:
        raise ConfigError(f"{name('start')}={start} must be greater than end={end} (a taper narrows)")
    if schedule == "sigmoid" and not k > 0:
        raise ConfigError(f"{name('sigmoid_k')} must be positive, got {k!r}")

    d_start = _exact_multiple(start * d_ff, multiple, "start", name, "start * d_ff")
    d_end = _exact_multiple(end * d_ff, multiple, "end", name, "end * d_ff")
    total = n_layers * d_ff
    if total % multiple:
        raise ConfigError(
            f"{name('d_ff')}: n_layers * d_ff = {total} is not a multiple of {multiple}, so no "
            f"widths in multiples of {name('multiple')}={multiple} can sum to it"
        )
    interior = n_layers - 2
    remaining = total - d_start - d_end
    if not interior * d_end <= remaining <= interior * d_start:
        raise ConfigError(
            f"{name('start')}/{name('end')}: with first width {d_start} and last {d_end}, the "
            f"{interior} interior layers would need to sum to {remaining}, outside "
            f"[{interior * d_end}, {interior * d_start}]; no monotone schedule has mean d_ff={d_ff}"
        )

    raw = tapered_raw(d_start, d_end, n_layers, schedule, k)
    target = [d_start] + _shift_to_sum(raw[1:-1], remaining, d_end, d_start) + [d_end]
    widths = [d_start] + [multiple * _round_half_up(t / multiple) for t in target[1:-1]] + [d_end]
    steps = (total - sum(widths)) // multiple
    while steps > 0:  # one step up where the width is furthest below its target
        best = None
        for i in range(1, n_layers - 1):
            if widths[i] + multiple <= widths[i - 1]:
                key = (round(target[i] - widths[i], 6), -i)
                if best is None or key > best[0]:
                    best = (key, i)
        assert best is not None, "feasibility was checked above"
        widths[best[1]] += multiple
        steps -= 1
    while steps < 0:  # one step down where the width is furthest above its target
        best = None
        for i in range(1, n_layers - 1):
            if widths[i] - multiple >= widths[i + 1]:
                key = (round(widths[i] - target[i], 6), i)
                if best is None or key > best[0]:
                    best = (key, i)
        assert best is not None, "feasibility was checked above"
        widths[best[1]] -= multiple
        steps += 1
    return widths


TAPERED_KEYS = (
    "d_model", "n_layers", "d_ff", "schedule", "start", "end", "multiple", "sigmoid_k", "ffn_k",
    *ATTENTION_KEYS,
)


@register("tapered", TAPERED_KEYS)
def tapered(spec: Spec) -> list[LayerShape]:
    """MLP width tapered across depth (arXiv 2606.23670); attention identical in every layer."""
    attn = attention_shape(spec)
    widths = tapered_widths(
        d_ff=spec.int("d_ff"),
        n_layers=spec.int("n_layers"),
        schedule=spec.choice("schedule", SCHEDULES),
        start=spec.number("start"),
        end=spec.number("end"),
        multiple=spec.int("multiple", 16),
        k=spec.number("sigmoid_k", 10),
        name=spec.name,
    )
    ffn_k = spec.int("ffn_k", 1)
    return [LayerShape(attention=attn, ffn_widths=(w,) * ffn_k) for w in widths]


# --------------------------------------------------------------------------------------------
# Three-block allocations (arXiv 2606.23670, Figure 2)
# --------------------------------------------------------------------------------------------


def block_sizes(n_layers: int, n_blocks: int) -> list[int]:
    """Contiguous block lengths as even as possible: the first n_layers % n_blocks blocks get one
    extra layer (numpy.array_split's rule), e.g. 16 layers / 3 blocks -> [6, 5, 5]."""
    base, extra = divmod(n_layers, n_blocks)
    return [base + (1 if b < extra else 0) for b in range(n_blocks)]


def block_widths(
    d_ff: int,
    n_layers: int,
    ratios: Sequence[float],
    multiple: int = 16,
    *,
    name: Namer = _plain,
) -> list[int]:
    """Per-layer widths for contiguous blocks of width round(ratio*d_ff) (to `multiple`).

    When n_layers divides evenly into len(ratios) blocks the total must equal n_layers*d_ff
    exactly (a parameter-matched allocation), else ConfigError naming `ratios`. With an uneven
    split the total is whatever the block sizes give (documented, not matched).
    """
    for key, value in (("d_ff", d_ff), ("n_layers", n_layers), ("multiple", multiple)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name(key)} must be a positive integer, got {value!r}")
    if not isinstance(ratios, (list, tuple)) or not ratios:
        raise ConfigError(f"{name('ratios')} must be a non-empty list of numbers, got {ratios!r}")
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0:
            raise ConfigError(f"{name('ratios')} must hold positive numbers, got {ratios!r}")
    if len(ratios) > n_layers:
        raise ConfigError(
            f"{name('ratios')}: {len(ratios)} blocks do not fit in n_layers={n_layers}"
        )
    block_w = []
    for r in ratios:
        w = multiple * _round_half_up(r * d_ff / multiple)
        if w < multiple:
            raise ConfigError(f"{name('ratios')}: ratio {r} gives a width below {multiple}")
        block_w.append(w)
    sizes = block_sizes(n_layers, len(ratios))
    widths = [w for w, size in zip(block_w, sizes) for _ in range(size)]
    if n_layers % len(ratios) == 0 and sum(widths) != n_layers * d_ff:
        raise ConfigError(
            f"{name('ratios')}={list(ratios)}: block widths {block_w} sum to {sum(widths)} over "
            f"{n_layers} layers, not n_layers*d_ff={n_layers * d_ff} (ratios must average 1 and "
            f"ratio*d_ff must be a multiple of {multiple})"
        )
    return widths


@register("blocks", ("d_model", "n_layers", "d_ff", "ratios", "multiple", *ATTENTION_KEYS))
def blocks(spec: Spec) -> list[LayerShape]:
    """Piecewise-constant MLP widths over contiguous blocks (arXiv 2606.23670, Figure 2)."""
    attn = attention_shape(spec)
    widths = block_widths(
        d_ff=spec.int("d_ff"),
        n_layers=spec.int("n_layers"),
        ratios=spec.get("ratios"),
        multiple=spec.int("multiple", 16),
        name=spec.name,
    )
    return [LayerShape(attention=attn, ffn_widths=(w,)) for w in widths]


# --------------------------------------------------------------------------------------------
# Variable residual width (arXiv 2606.18246; the solve in shapelm.model.variable_width)
# --------------------------------------------------------------------------------------------


VARIABLE_WIDTH_KEYS = (
    "d_model", "n_layers", "n_heads", "schedule", "max_layer", "bottleneck", "symmetric", "multiple",
    "resize", "constant_residual_stream", *EMBEDDING_WIDTH_KEYS,
)


@register("variable_width", VARIABLE_WIDTH_KEYS)
def variable_width(spec: Spec) -> list[LayerShape]:
    """Per-layer residual widths (arXiv 2606.18246); each layer: n_heads heads of width h_i / n_heads
    (d_attn = h_i) and one SwiGLU of width 4 h_i. With `constant_residual_stream` the stream stays
    at h and layer i maps it to h_i and back in its projections (no resize)."""
    h = spec.int("d_model")
    n_layers = spec.int("n_layers")
    n_heads = spec.int("n_heads")
    # (`resize` is read into ModelConfig by build_model_config, which checks its value)
    # the embeddings' widths (ModelConfig fields, set by build_model_config) change the match
    embeddings = {key: spec.flag(key, True) for key in EMBEDDING_WIDTH_KEYS}
    constant = spec.flag("constant_residual_stream", False)
    # the paper's solver asserts both embeddings at h with a constant stream; nothing is resized
    refused = [key for key in EMBEDDING_WIDTH_KEYS if not embeddings[key]] + ["resize"] * spec.has("resize")
    if constant and refused:
        raise ConfigError(
            f"{spec.name(refused[0])}: a constant residual stream keeps the embeddings at d_model and "
            f"resizes nothing ({spec.name('constant_residual_stream')} is true)")
    widths = solve_widths(
        h, n_layers, spec.int("vocab_size", COMMON_KEYS["vocab_size"]),
        schedule=spec.choice("schedule", WIDTH_SCHEDULES, "geometric"),
        max_layer=spec.int("max_layer"), bottleneck=spec.number("bottleneck"), symmetric=spec.flag("symmetric", True),
        multiple=spec.int("multiple", 32), constant_residual_stream=constant, name=spec.name, **embeddings,
    )
    layers = []
    for i, w in enumerate(widths):
        if w % n_heads or (w // n_heads) % 2:
            raise ConfigError(
                f"{spec.name('n_heads')}={n_heads} does not split layer {i + 1}'s width {w} into heads of an "
                f"even size (RoPE); choose n_heads or {spec.name('multiple')} so that 2 * n_heads divides it"
            )
        attn = AttentionShape(n_heads=n_heads, n_kv_heads=n_heads, head_dim=w // n_heads)
        layers.append(LayerShape(attention=attn, ffn_widths=(FFN_RATIO * w,),
                                 d_model=None if w == h or constant else w))
    return layers


# --------------------------------------------------------------------------------------------
# Head schedules (Prism, arXiv 2606.27449)
# --------------------------------------------------------------------------------------------


def head_counts(n_layers: int, heads: Sequence[int], *, name: Namer = _plain) -> list[int]:
    """Per-layer head counts: an explicit list (one per layer), or [first, last] doubling from
    first to last over contiguous blocks as even as `block_sizes` makes them (e.g. 12 layers,
    [4, 16] -> 4 layers of 4, 8 and 16 heads)."""
    if not isinstance(heads, list) or not heads or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in heads):
        raise ConfigError(f"{name('heads')} must be a list of head counts >= 1, got {heads!r}")
    if len(heads) == n_layers:
        return list(heads)
    if len(heads) != 2:
        raise ConfigError(f"{name('heads')}: give [first, last] or one count per layer ({n_layers}), "
                          f"got {len(heads)} values")
    first, last = heads
    ratio = max(first, last) / min(first, last)
    steps = round(math.log2(ratio))
    if 2**steps != ratio:
        raise ConfigError(f"{name('heads')}: [first, last] must differ by a power of two, got {heads}")
    if steps + 1 > n_layers:
        raise ConfigError(f"{name('heads')}: {steps + 1} head counts need at least as many layers, got {n_layers}")
    counts = [first * 2**b if last >= first else first // 2**b for b in range(steps + 1)]
    return [c for c, size in zip(counts, block_sizes(n_layers, steps + 1)) for _ in range(size)]


@register("head_schedule", ("d_model", "n_layers", "d_h", "ffn_ratio", "heads", "d_attn"))
def head_schedule(spec: Spec) -> list[LayerShape]:
    """Prism's progressive head counts (arXiv 2606.27449): every layer keeps d_attn (default
    d_model) and splits it into its own number of heads (head_dim = d_attn / heads, MHA), so the
    parameters equal the uniform model's; the FLOPs too when the mean head count is the uniform
    one (only the softmax's 3 S H term depends on the head count)."""
    n_layers = spec.int("n_layers")
    d_attn = spec.int("d_attn", spec.int("d_model"))
    ffn = _ffn_width(spec)
    layers = []
    for i, n in enumerate(head_counts(n_layers, spec.get("heads"), name=spec.name)):
        if d_attn % n or (d_attn // n) % 2:
            raise ConfigError(f"{spec.name('heads')}: layer {i + 1}'s {n} heads do not split d_attn={d_attn} "
                              f"into heads of an even size (RoPE)")
        layers.append(LayerShape(attention=AttentionShape(n, n, d_attn // n), ffn_widths=(ffn,)))
    return layers


# --------------------------------------------------------------------------------------------
# Layer-wise scaling (OpenELM; arXiv 2509.06518)
# --------------------------------------------------------------------------------------------


def make_divisible(v: float, divisor: int, min_value: float | None = None) -> int:
    """OpenELM's rounding (corenet/utils/math_utils.py): nearest multiple of `divisor` (halves
    up, via int(v + divisor/2)), at least `min_value` (default: divisor), stepped up once by
    `divisor` if the result fell below 0.9*v.

    The 003 authors' copy tests `<= 0.9*v` instead of `< 0.9*v`; the two differ only when the
    rounded value equals 0.9*v exactly, which no configuration of either paper hits (tested).
    """
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return int(new_v)


# Frame values the 003 authors force onto the first and last layer (model.py, `layer_freeze`).
FRAME_DEFAULT = (4.0, 1.0)

# (ffn multipliers, attention multipliers, frame) per variant; baseline and vanilla depend on
# the depth (12L is the OLMo2-190M base, 18L the paper's main comparison), the others are the
# 18-layer settings of Section 4 / the authors' configs (LWS_freeze.yaml, ReverseLWS.yaml,
# autoencoder.yaml = crown) and apply to any depth.
LWS_VARIANTS: dict[str, Any] = {
    "baseline": {12: ((4.0, 4.0), (1.0, 1.0), False), 18: ((2.5, 2.5), (0.75, 0.75), False)},
    "vanilla": {12: ((2.0, 5.3), (0.5, 2.0), False), 18: ((1.0, 4.0), (0.5, 1.0), False)},
    "framed": ((0.5, 4.0), (0.5, 1.0), True),
    "reverse": ((4.0, 0.5), (1.0, 0.5), True),
    "crown": ((0.5, 3.8, 0.5), (0.5, 1.0, 0.5), True),
}


def lws_variant(variant: str, n_layers: int, *, name: Namer = _plain):
    """(ffn_multipliers, attn_multipliers, frame) of a named 003 variant at this depth."""
    if variant not in LWS_VARIANTS:
        raise ConfigError(f"{name('variant')} must be one of {list(LWS_VARIANTS)}, got {variant!r}")
    entry = LWS_VARIANTS[variant]
    if isinstance(entry, dict):
        if n_layers not in entry:
            raise ConfigError(
                f"{name('variant')}={variant!r} is defined by the paper only for n_layers in "
                f"{sorted(entry)}; give ffn_multipliers/attn_multipliers explicitly for "
                f"n_layers={n_layers}"
            )
        entry = entry[n_layers]
    return entry


def _interpolate(points: Sequence[float], n_layers: int, key: str, name: Namer) -> list[float]:
    if isinstance(points, (int, float)) and not isinstance(points, bool):
        points = [points]
    if not isinstance(points, (list, tuple)) or not 1 <= len(points) <= 3:
        raise ConfigError(f"{name(key)} must be a number or a list of 1-3 numbers, got {points!r}")
    for p in points:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0:
            raise ConfigError(f"{name(key)} must hold positive numbers, got {points!r}")
    if len(points) == 1:
        return [float(points[0])] * n_layers
    if len(points) == 2:
        # OpenELM / authors: numpy linspace over all N layers, each rounded to 2 decimals.
        return [round(float(x), 2) for x in np.linspace(points[0], points[1], num=n_layers, dtype=float)]
    # Three points (crown), the authors' rule: np.interp (not rounded) through the middle;
    # N even -> a two-layer plateau at layers N/2-1 and N/2; N odd -> peak at layer (N-1)/2.
    if n_layers < 3:
        raise ConfigError(f"{name(key)}: a three-point profile needs n_layers >= 3")
    half = math.ceil(n_layers / 2)
    if n_layers % 2 == 0:
        xs = [0, half - 1, half, n_layers - 1]
        ys = [points[0], points[1], points[1], points[2]]
    else:
        xs = [0, half - 1, n_layers - 1]
        ys = list(points)
    return [float(v) for v in np.interp(np.arange(n_layers), xs, ys)]


def lws_layer_multipliers(
    n_layers: int,
    ffn_multipliers: Sequence[float] | float,
    attn_multipliers: Sequence[float] | float,
    frame: bool | Sequence[float] = False,
    *,
    name: Namer = _plain,
) -> tuple[list[float], list[float]]:
    """Per-layer (beta_i, alpha_i) lists.

    Two points: linear over all N layers (numpy linspace, rounded to 2 decimals as OpenELM).
    Three points: the crown profile (see `_interpolate`). `frame` (True = beta 4, alpha 1, or an
    explicit [beta, alpha]) then overwrites layer 0 and layer N-1 only; the interior keeps the
    interpolation over all N layers, exactly as the authors' code (not re-spread over N-2).
    """
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise ConfigError(f"{name('n_layers')} must be a positive integer, got {n_layers!r}")
    betas = _interpolate(ffn_multipliers, n_layers, "ffn_multipliers", name)
    alphas = _interpolate(attn_multipliers, n_layers, "attn_multipliers", name)
    if frame is not False and frame is not None:
        if frame is True:
            fb, fa = FRAME_DEFAULT
        elif (
            isinstance(frame, (list, tuple))
            and len(frame) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in frame)
        ):
            fb, fa = float(frame[0]), float(frame[1])
        else:
            raise ConfigError(f"{name('frame')} must be true, false or [beta, alpha], got {frame!r}")
        betas[0] = betas[-1] = fb
        alphas[0] = alphas[-1] = fa
    return betas, alphas


def lws_layers(
    d_model: int,
    n_layers: int,
    ffn_multipliers: Sequence[float] | float,
    attn_multipliers: Sequence[float] | float,
    frame: bool | Sequence[float] = False,
    head_dim: int = 64,
    groups: int = 3,
    ffn_divisor: int = 256,
    *,
    name: Namer = _plain,
) -> list[LayerShape]:
    """Layer shapes by OpenELM's rule:
    d_ffn_i = make_divisible(beta_i * d_model, ffn_divisor);
    q_i = make_divisible(alpha_i * d_model, groups * head_dim), n_heads_i = q_i / head_dim,
    n_kv_heads_i = n_heads_i / groups (the KV-head count varies per layer, as in OpenELM and in
    the 003 authors' code; a fixed 4 KV heads does not reproduce 003's 179.7M).
    """
    for key, value in (("d_model", d_model), ("head_dim", head_dim), ("groups", groups),
                       ("ffn_divisor", ffn_divisor)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name(key)} must be a positive integer, got {value!r}")
    betas, alphas = lws_layer_multipliers(n_layers, ffn_multipliers, attn_multipliers, frame, name=name)
    layers = []
    for beta, alpha in zip(betas, alphas):
        ffn = make_divisible(beta * d_model, ffn_divisor)
        q_width = make_divisible(alpha * d_model, groups * head_dim)
        n_heads = q_width // head_dim
        attn = AttentionShape(n_heads=n_heads, n_kv_heads=n_heads // groups, head_dim=head_dim)
        layers.append(LayerShape(attention=attn, ffn_widths=(ffn,)))
    return layers


@register(
    "lws",
    ("d_model", "n_layers", "head_dim", "groups", "variant", "ffn_multipliers",
     "attn_multipliers", "frame", "ffn_divisor"),
)
def lws(spec: Spec) -> list[LayerShape]:
    """OpenELM layer-wise scaling, with the 003 variants by name or explicit multipliers."""
    n_layers = spec.int("n_layers")
    if spec.has("variant"):
        explicit = [k for k in ("ffn_multipliers", "attn_multipliers", "frame") if spec.has(k)]
        if explicit:
            raise ConfigError(f"{spec.where}: give variant or {explicit}, not both")
        ffn_m, attn_m, frame = lws_variant(spec.get("variant"), n_layers, name=spec.name)
    else:
        ffn_m = spec.get("ffn_multipliers")
        attn_m = spec.get("attn_multipliers")
        frame = spec.get("frame", False)
    return lws_layers(
        d_model=spec.int("d_model"),
        n_layers=n_layers,
        ffn_multipliers=ffn_m,
        attn_multipliers=attn_m,
        frame=frame,
        head_dim=spec.int("head_dim", 64),
        groups=spec.int("groups", 3),
        ffn_divisor=spec.int("ffn_divisor", 256),
        name=spec.name,
    )
