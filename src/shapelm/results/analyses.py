"""Tables and figures beyond the papers' own: paired differences with intervals, scaling-law fits
per shape family, the equal-budget table across the papers (docs/RESULTS.md), and, for an
experiment whose runs list them, the depth analyses and the field's shapes. Each is a plain table of our numbers (no paper column): rows
of named values, written as CSV, Markdown and LaTeX beside the paper tables.

    TABLES:  name -> (title, caption, builder(ctx) -> PlainTable)
    FIGURES: name -> (figure(ctx) -> matplotlib Figure, caption)
    table_names(plan), figure_names(plan): what an experiment writes (TABLE_NAMES always, the
    LISTED_NAMES its runs list)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from shapelm.results.plain import (  # noqa: F401
    FIGURE_NAMES, LISTED_NAMES, TABLE_NAMES, PlainTable, listed_names, write_plain_table,
)


def _tables() -> dict[str, tuple[str, str, Callable]]:
    from shapelm.results import depth, equal_budget, field, intervals, scaling

    return {
        "paired_differences": (intervals.TITLE, intervals.CAPTION, intervals.paired_table),
        "scaling_fits": (scaling.TITLE, scaling.CAPTION, scaling.scaling_table),
        "equal_budget": (equal_budget.TITLE, equal_budget.CAPTION, equal_budget.equal_budget_table),
        "depth_analyses": (depth.TITLE, depth.CAPTION, depth.depth_table),
        "field_shapes": (field.TITLE, field.CAPTION, field.field_table),
    }


def _figures() -> dict[str, tuple[Callable, str]]:
    from shapelm.results import depth, equal_budget, field, intervals, scaling

    return {
        "paired_differences": (intervals.paired_figure, intervals.CAPTION),
        "scaling_fits": (scaling.scaling_figure, scaling.CAPTION),
        "equal_budget": (equal_budget.equal_budget_figure, equal_budget.CAPTION),
        "depth_analyses": (depth.depth_figure, depth.CAPTION),
        "field_shapes": (field.field_figure, field.CAPTION),
    }


def _listed(plan) -> list[str]:
    return listed_names(run["tables"] for run in plan.runs.values())


def table_names(plan) -> list[str]:
    """The analyses' tables this experiment writes: TABLE_NAMES, then the LISTED_NAMES its runs list."""
    return [*TABLE_NAMES, *_listed(plan)]


def figure_names(plan) -> list[str]:
    """The analyses' figures this experiment draws: FIGURE_NAMES, then the LISTED_NAMES its runs list."""
    return [*FIGURE_NAMES, *_listed(plan)]


def table_caption(name: str) -> str:
    title, caption, _ = _tables()[name]
    return f"{title}. {caption}"


def figure_caption(name: str) -> str:
    return _figures()[name][1]


def build_table(ctx, name: str) -> PlainTable:
    title, _, builder = _tables()[name]
    return builder(ctx)


def write_figure(ctx, name: str, figures_dir: Path) -> list[Path]:
    from shapelm.results.figures.common import save_figure

    return save_figure(_figures()[name][0](ctx), Path(figures_dir), name)
