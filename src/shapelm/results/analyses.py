"""Tables and figures beyond the papers' own: paired differences with intervals, scaling-law fits
per shape family, the equal-budget table across the papers (docs/RESULTS.md). Each is a plain table of our numbers (no paper column): rows
of named values, written as CSV, Markdown and LaTeX beside the paper tables.

    TABLES:  name -> (title, caption, builder(ctx) -> PlainTable)
    FIGURES: name -> (figure(ctx) -> matplotlib Figure, caption)
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from shapelm.results.plain import FIGURE_NAMES, TABLE_NAMES, PlainTable, write_plain_table  # noqa: F401


def _tables() -> dict[str, tuple[str, str, Callable]]:
    from shapelm.results import equal_budget, intervals, scaling

    return {
        "paired_differences": (intervals.TITLE, intervals.CAPTION, intervals.paired_table),
        "scaling_fits": (scaling.TITLE, scaling.CAPTION, scaling.scaling_table),
        "equal_budget": (equal_budget.TITLE, equal_budget.CAPTION, equal_budget.equal_budget_table),
    }


def _figures() -> dict[str, tuple[Callable, str]]:
    from shapelm.results import equal_budget, intervals, scaling

    return {
        "paired_differences": (intervals.paired_figure, intervals.CAPTION),
        "scaling_fits": (scaling.scaling_figure, scaling.CAPTION),
        "equal_budget": (equal_budget.equal_budget_figure, equal_budget.CAPTION),
    }




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
