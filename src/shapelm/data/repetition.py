"""OLMo's instance repetition filter (olmo/util.py `find_periodic_sequences`).

OLMo-2 stage 1 masks, without dropping, every instance that contains a sub-sequence of period
p (1 <= p <= 13) repeated 32 or more times in a row: its labels become -100 (olmo/train.py
`get_labels`). The data order is unchanged, so the filter is applied where batches are built.
"""

from __future__ import annotations

import numpy as np

MAX_PERIOD = 13
MIN_PERIOD = 1
MAX_COUNT = 32


def longest_repeat(tokens: np.ndarray, period: int) -> int:
    """Most consecutive repetitions of any period-`period` pattern in `tokens`."""
    if tokens.size <= period:
        return 1 if tokens.size else 0
    equal = tokens[:-period] == tokens[period:]
    if not equal.any():
        return 1
    # Longest run of True: positions where a run starts/ends from the padded diff.
    padded = np.concatenate(([False], equal, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    longest_run = int((edges[1::2] - edges[::2]).max())
    return (longest_run + period) // period


def passes_repetition_filter(
    tokens: np.ndarray, max_period: int = MAX_PERIOD, min_period: int = MIN_PERIOD, max_count: int = MAX_COUNT
) -> bool:
    tokens = np.asarray(tokens)
    return all(longest_repeat(tokens, p) < max_count for p in range(min_period, max_period + 1))


def repetition_mask(batch: np.ndarray, **kwargs) -> np.ndarray:
    """Boolean [batch] mask: True where the instance passes (its labels are kept)."""
    return np.array([passes_repetition_filter(row, **kwargs) for row in np.asarray(batch)], dtype=bool)
