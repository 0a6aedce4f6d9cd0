"""RULER (Hsieh et al. 2024): offline generator and scorer for its 13 synthetic tasks."""

from shapelm.longctx.ruler.scoring import (
    postprocess_pred,
    ruler_mean,
    score_task,
    string_match_all,
    string_match_part,
)
from shapelm.longctx.ruler.tasks import TASK_CONFIGS, TASK_NAMES, TEMPLATES, Resources, generate_task

__all__ = [
    "TASK_CONFIGS",
    "TASK_NAMES",
    "TEMPLATES",
    "Resources",
    "generate_task",
    "postprocess_pred",
    "ruler_mean",
    "score_task",
    "string_match_all",
    "string_match_part",
]
