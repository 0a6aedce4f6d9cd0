"""The canvas helpers every figure shares: a pending or empty panel that says why it has no
data, run labels and shapes from the plan, and `save_figure`, which writes PNG and PDF through
`shapelm.files` (a PDF without a creation date, so a rebuild is byte-identical).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from shapelm import files
from shapelm.results.context import Context, is_scaled_down


ARCH_COLOR = {"conv": "#444444", "hg": "#1f77b4"}
SCALE_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
PENDING_STYLE = dict(ha="center", va="center", fontsize=11, color="#888888",
                     bbox=dict(boxstyle="round", fc="#f7f7f7", ec="#cccccc"))


def pending_text(ax, text: str, y: float = 0.5) -> None:
    ax.text(0.5, y, text, transform=ax.transAxes, **PENDING_STYLE)


def hide_value_axis(ax, axis: str = "y") -> None:
    """A placeholder panel's value axis has no scale yet: no 0-1 ticks that read as data."""
    getattr(ax, f"set_{axis}ticks")([])
    getattr(ax, f"set_{axis}ticklabels")([])


def pending_panel(ax, text: str, value_axes: str = "y", y: float = 0.5) -> None:
    """A panel whose data has not been measured yet, drawn the same way in every figure: the boxed
    text says what is pending, the axes keep their labels (the quantity and its unit, set by the
    caller), and each axis in `value_axes` ("x", "y" or "xy") draws no ticks, since a default 0-1
    scale would read as data. An axis whose range is known before any run (depth 0-1, a cosine's
    -1..1, RULER's 0-100, the configured lengths) is the caller's to keep."""
    pending_text(ax, text, y)
    for axis in value_axes:
        hide_value_axis(ax, axis)


def zero_line_axis(ax, axis: str = "x") -> None:
    """A difference axis with nothing measured yet: only its 0 (no difference) is a known value, so
    it is the one tick, drawn as a line across the panel."""
    (ax.axvline if axis == "x" else ax.axhline)(0, color="k", lw=0.8)
    getattr(ax, f"set_{axis}lim")(-1, 1)
    getattr(ax, f"set_{axis}ticks")([0])


def no_runs_panel(ax, ctx: Context, what: str) -> None:
    """A panel this experiment configures no run for: say so, draw no axes that would mean data."""
    pending_text(ax, f"no runs configured for {what}\nin experiment '{ctx.plan.name}'")
    ax.set_xticks([])
    ax.set_yticks([])


def scaled_note(ctx: Context, table: str, runs: list[str]) -> str:
    """' (scaled down ↓)' when any of the runs is, as the tables flag it."""
    return " (scaled down ↓)" if any(is_scaled_down(ctx, table, r) for r in runs) else ""


def scales_of(ctx: Context, runs: list[str]) -> str:
    return ", ".join(dict.fromkeys(str(ctx.plan.runs[r].get("scale", "?")) for r in runs if r in ctx.plan.runs))


def save_figure(fig, figures_dir: Path, name: str) -> list[Path]:
    figures_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        p = figures_dir / f"{name}.{ext}"
        with files.atomic_path(p, suffix=f".tmp.{ext}") as tmp:  # savefig picks the format by extension
            fig.savefig(tmp, dpi=150, bbox_inches="tight", metadata={"CreationDate": None} if ext == "pdf" else {})
        paths.append(p)
    plt.close(fig)
    return paths


def run_label(ctx: Context, run: str) -> str:
    return ctx.plan.runs[run].get("label", run) if run in ctx.plan.runs else run


def arch_of(ctx: Context, run: str) -> dict:
    return ctx.plan.runs[run].get("arch", {})
