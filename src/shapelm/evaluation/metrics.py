"""The papers' evaluation metrics, as plain functions with hand-checkable definitions.

Held-out perplexity (docs/PAPER_NOTES.md protocol 6): per set, token-weighted mean cross-entropy over
fixed-length instances and PPL = exp(mean); the paper aggregates several sets as the mean of
the losses and the *arithmetic* mean of the PPLs (exp(mean loss) is reported beside them).

Downstream (OLMo's olmo/eval/downstream.py, docs/PAPER_NOTES.md protocol 7): multiple-choice ``acc`` and
``len_norm`` are lm-eval's own ``acc`` and ``acc_norm`` (lm-eval 0.4.x divides by the characters
of the choice without the delimiter, as OLMo does), so only OLMo's ``ce_loss`` is defined here:
-(log-likelihood of " answer") / characters of the answer (no leading space), averaged over
questions and printed without exp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def token_weighted_ce(ce_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """Mean cross-entropy per token over batches given per-batch sums and token counts."""
    total = sum(token_counts)
    if total <= 0:
        raise ValueError("no tokens to average over")
    return float(sum(ce_sums)) / total


def perplexity(mean_ce: float) -> float:
    """PPL = exp(mean cross-entropy per token); inf rather than OverflowError."""
    try:
        return math.exp(mean_ce)
    except OverflowError:
        return float("inf")


def aggregate_sets(losses: dict[str, float]) -> dict[str, float]:
    """The paper's aggregate over held-out sets (Tables 6/7).

    ``val_loss`` = mean of the losses, ``val_ppl`` = arithmetic mean of the per-set PPLs,
    ``exp_mean_loss`` = exp(val_loss) (what a token-pooled PPL would roughly be; shown beside).
    """
    if not losses:
        raise ValueError("no held-out sets to aggregate")
    vals = list(losses.values())
    mean_loss = sum(vals) / len(vals)
    return {
        "val_loss": mean_loss,
        "val_ppl": sum(perplexity(v) for v in vals) / len(vals),
        "exp_mean_loss": perplexity(mean_loss),
        "n_sets": len(vals),
    }


def continuation_chars(continuation: str) -> int:
    """Characters of a continuation excluding one leading space (OLMo's ``cont_str_len``).

    OLMo computes ``len(continuation) - 1`` because its continuations always start with a space;
    here the space is dropped only when present, and the result is at least 1.
    """
    n = len(continuation) - 1 if continuation.startswith(" ") else len(continuation)
    return max(n, 1)


def ce_per_char(loglik: float, answer: str) -> float:
    """OLMo's ce_loss for one question: -loglik(" answer") / len(answer without leading space)."""
    return -float(loglik) / continuation_chars(answer)


def mean(xs: Sequence[float]) -> float:
    xs = list(xs)
    if not xs:
        raise ValueError("mean of an empty list")
    return sum(xs) / len(xs)
