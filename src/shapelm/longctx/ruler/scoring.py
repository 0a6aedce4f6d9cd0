"""RULER's scoring (scripts/eval/evaluate.py and scripts/eval/synthetic/constants.py).

``postprocess_pred``: strip, replace control characters by newlines, strip again.
``string_match_all``: per sample, the fraction of references found in the prediction
(case-insensitive substring), averaged over samples, x100, rounded to 2 decimals (niah, vt, cwe,
fwe). ``string_match_part``: per sample, 1 if any reference is found (qa).
The final RULER score of a length is the mean of the 13 task scores.
"""

from __future__ import annotations

import re

_CTRL = re.compile(r"[\x00-\x1f]")

METRIC_OF_KIND = {
    "niah": "string_match_all",
    "variable_tracking": "string_match_all",
    "common_words_extraction": "string_match_all",
    "freq_words_extraction": "string_match_all",
    "qa": "string_match_part",
}


def postprocess_pred(pred: str) -> str:
    return _CTRL.sub("\n", pred.strip()).strip()


def string_match_all(preds: list[str], refs: list[list[str]]) -> float:
    if not preds:
        return 0.0
    score = sum(
        sum(1.0 if r.lower() in p.lower() else 0.0 for r in ref) / len(ref) for p, ref in zip(preds, refs)
    ) / len(preds) * 100
    return round(score, 2)


def string_match_part(preds: list[str], refs: list[list[str]]) -> float:
    if not preds:
        return 0.0
    score = sum(max(1.0 if r.lower() in p.lower() else 0.0 for r in ref) for p, ref in zip(preds, refs)) / len(preds) * 100
    return round(score, 2)


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part}


def metric_for(task: str):
    from shapelm.longctx.ruler.tasks import TASK_CONFIGS

    return METRICS[METRIC_OF_KIND[TASK_CONFIGS[task]["task"]]]


def score_task(task: str, preds: list[str], refs: list[list[str]]) -> float:
    return metric_for(task)([postprocess_pred(p) for p in preds], refs)


def ruler_mean(task_scores: dict[str, float]) -> float:
    """Mean over tasks (RULER's final score when all 13 are present)."""
    if not task_scores:
        return float("nan")
    return sum(task_scores.values()) / len(task_scores)
