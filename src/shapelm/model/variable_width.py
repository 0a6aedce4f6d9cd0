"""Variable residual width (Variable-Width Transformers, arXiv 2606.18246): the width solve of kind
"variable_width" (registered in `shapelm.model.schedules`).

Layer i (1-indexed) has its own residual width h_i; the residual stream is resized between
layers without parameters (`shapelm.model.layers.resize`, `ModelConfig.resize`: truncation when it
narrows; zero-padding, or the paper's dense configs' `move_up`, when it widens). The final norm has
the last layer's width h_L, and the stream is resized to the unembedding after it (the paper's code).
By default the input embedding and the unembedding stay at the baseline width h (`ModelConfig.d_model`):
the paper's `original_input_width` / `original_output_width` true, which its dense configs use. Either
may be false (arch keys of the same name, `ModelConfig` fields): the input embedding then has the
first layer's width h_1, the unembedding the last layer's width h_L, and the stream is not resized
at that end.

Schedule (the paper's, around a 1-indexed turning layer k = `max_layer`, no duplicated turning layer):
  geometric:  h_1 = b, h_i = h_{i-1} * e for 2 <= i <= k, then h_i = h_{i-1} * r for i > k
  arithmetic: h_1 = b, h_i = h_{i-1} + b * delta for i <= k, then h_{i-1} + b * delta_neg
With `symmetric: true` the shrink side is solved so that h_1 == h_L (geometric r = e^(-(k-1)/(L-k));
arithmetic delta_neg = -delta (k-1)/(L-k)); otherwise r = 1/e, delta_neg = -delta.

Solving: the growth rate is solved (bisection) so that the smallest width of the continuous
schedule is `bottleneck * h`; for each candidate rate the base width b is the positive root that
makes the *matched accounting* equal the uniform baseline's (`matched_params`). b is then rounded to
an integer, the schedule recomputed from it, and every width rounded to a multiple of `multiple`.

Matched accounting (the paper's code's count, used for the match only): per layer 16 h_i^2 (4 h_i^2
attention, 12 h_i^2 for a SwiGLU of width 4 h_i), the embeddings v e_in + v e_out, no norms, less
what the resizes make useless. e_in = h with `original_input_width`, and then, with h_1 > h,
3 (h_1 - h) h_1 of the first layer's Q/K/V inputs only ever see zero padding; otherwise e_in = h_1
and nothing is discounted. e_out = h with `original_output_width`, and then, with h_L > h,
4 h_L (h_L - h) of the last layer's MLP outputs are cut before the unembedding; otherwise
e_out = h_L and nothing is discounted. The models built hold more (norms, and those columns):
`accounting.param_counts`.

Constant residual stream (the paper's `constant_residual_stream`): the stream keeps the width h;
layer i's first projections (Q/K/V, the MLP's gate and up) map h to h_i and its last ones (O, down)
h_i back to h, its norms stay at h: an ordinary layer of attention width h_i and SwiGLU width 4 h_i.
Its matched count is 2 v h + 16 h sum(h_i) (both embeddings at h, nothing discounted).
"""

from __future__ import annotations

import math

from shapelm.errors import ConfigError

SCHEDULES = ("geometric", "arithmetic")
#: The SwiGLU width per unit of residual width in every layer (the paper's 4h MLP).
FFN_RATIO = 4


def matched_params(widths: list[float], h: float, vocab: int, *, original_input_width: bool = True,
                   original_output_width: bool = True, constant_residual_stream: bool = False) -> float:
    """The paper's matched parameter count for these widths (module docstring)."""
    if constant_residual_stream:  # every projection maps h to h_i or back: 16 h h_i a layer
        return 2.0 * vocab * h + sum(16.0 * h * w for w in widths)
    total = sum(16.0 * w * w for w in widths)
    total += vocab * (h if original_input_width else widths[0])
    total += vocab * (h if original_output_width else widths[-1])
    if original_input_width and widths[0] > h:
        total -= 3.0 * (widths[0] - h) * widths[0]
    if original_output_width and widths[-1] > h:
        total -= 4.0 * widths[-1] * (widths[-1] - h)
    return total


def _rates(schedule: str, rate: float, k: int, n_layers: int, symmetric: bool) -> tuple[float, float]:
    grow, shrink = k - 1, n_layers - k
    if schedule == "geometric":
        back = rate ** (-grow / shrink) if symmetric and shrink > 0 and grow > 0 else 1.0 / rate
        return rate, back
    back = -rate * grow / shrink if symmetric and shrink > 0 and grow > 0 else -rate
    return rate, back


def schedule_widths(base: float, schedule: str, rate: float, k: int, n_layers: int,
                    symmetric: bool) -> list[float]:
    """Continuous widths h_1..h_L from the base width and the growth rate (e or delta)."""
    up, down = _rates(schedule, rate, k, n_layers, symmetric)
    widths = [float(base)]
    for i in range(2, n_layers + 1):
        step = up if i <= k else down
        widths.append(widths[-1] * step if schedule == "geometric" else widths[-1] + base * step)
    return widths


def _base_width(h: int, vocab: int, schedule: str, rate: float, k: int, n_layers: int, symmetric: bool,
                original_input_width: bool, original_output_width: bool,
                constant_residual_stream: bool = False) -> float:
    """The base width b that matches the uniform baseline under `matched_params`.

    Widths are b * c_i, so the count is 16 b^2 S + embeddings - waste(b), where an embedding at
    h is constant and one at h_1 = b c_1 (h_L = b c_L) is linear in b: a quadratic on each side of
    the thresholds b c_1 > h, b c_L > h; the root consistent with its side is taken. With a
    constant residual stream the count, 2 v h + 16 h b sum(c_i), is linear: sum(h_i) = L h."""
    c = schedule_widths(1.0, schedule, rate, k, n_layers, symmetric)
    if constant_residual_stream:
        return n_layers * h / sum(c)
    target = matched_params([float(h)] * n_layers, h, vocab)
    lin0 = 0.0  # the terms linear in b from embeddings at a layer's width; constants go to target
    for original, c_end in ((original_input_width, c[0]), (original_output_width, c[-1])):
        if original:
            target -= vocab * h
        else:
            lin0 += vocab * c_end
    s = 16.0 * sum(ci * ci for ci in c)
    # a cut is only possible at an end whose embedding stays at h
    for cut_in in (False, True) if original_input_width else (False,):
        for cut_out in (False, True) if original_output_width else (False,):
            a, lin = s, lin0
            if cut_in:
                a, lin = a - 3 * c[0] ** 2, lin + 3 * h * c[0]
            if cut_out:
                a, lin = a - 4 * c[-1] ** 2, lin + 4 * h * c[-1]
            disc = lin * lin + 4 * a * target
            if a <= 0 or disc < 0:
                continue
            b = (-lin + math.sqrt(disc)) / (2 * a)
            if b > 0 and (not original_input_width or (b * c[0] > h) == cut_in) and (
                    not original_output_width or (b * c[-1] > h) == cut_out):
                return b
    raise ConfigError("no base width matches the baseline's parameters")  # not reached for L >= 1


def solve_widths(h: int, n_layers: int, vocab: int, *, schedule: str = "geometric", max_layer: int,
                 bottleneck: float, symmetric: bool = True, multiple: int = 32,
                 original_input_width: bool = True, original_output_width: bool = True,
                 constant_residual_stream: bool = False, name=lambda key: key) -> list[int]:
    """Per-layer widths: rate solved for min(width) == bottleneck * h, base width rounded to an
    integer, widths rounded to `multiple` (module docstring)."""
    k = max_layer
    if not 1 <= k <= n_layers:
        raise ConfigError(f"{name('max_layer')} must be in [1, n_layers={n_layers}], got {k}")
    if not 0 < bottleneck <= 1:
        raise ConfigError(f"{name('bottleneck')} must be in (0, 1], got {bottleneck}")
    # search value s in (0, 1]: s = 1 is the uniform model; geometric e = s, arithmetic
    # delta = (s - 1)/(k - 1) (its turning layer is then s * h_1 > 0)
    def rate(s: float) -> float:
        return s if schedule == "geometric" else (s - 1.0) / max(k - 1, 1)

    def base(r: float) -> float:
        return _base_width(h, vocab, schedule, r, k, n_layers, symmetric, original_input_width, original_output_width,
                           constant_residual_stream)

    def narrowest(s: float) -> float:
        r = rate(s)
        return min(schedule_widths(base(r), schedule, r, k, n_layers, symmetric))

    target = bottleneck * h
    lo, hi = 1e-6, 1.0
    if bottleneck < 1 and narrowest(lo) > target:
        raise ConfigError(
            f"{name('bottleneck')}={bottleneck}: the {schedule} schedule turning at {name('max_layer')}={k} "
            f"of {n_layers} layers cannot narrow to {target:g} at the baseline's parameters"
        )
    if bottleneck < 1:
        for _ in range(100):
            mid = (lo + hi) / 2
            if narrowest(mid) > target:
                hi = mid
            else:
                lo = mid
    r = rate((lo + hi) / 2 if bottleneck < 1 else 1.0)
    widths = [int(round(w / multiple) * multiple)
              for w in schedule_widths(round(base(r)), schedule, r, k, n_layers, symmetric)]
    if abs(min(widths) - target) > multiple / 2 or min(widths) <= 0:
        raise ConfigError(
            f"{name('bottleneck')}={bottleneck}: the narrowest width {min(widths)} misses {target:g} by more than "
            f"half of {name('multiple')}={multiple}; the schedule cannot reach its bottleneck at this multiple"
        )
    return widths
