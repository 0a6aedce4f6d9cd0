"""Numbers printed the way the paper printed the column, one digit finer, and their differences."""

from __future__ import annotations

import re

from shapelm.reference import PrintedNumber

PENDING = "pending"
NOT_IN_SEED = "n/a (not printed in the paper)"
DERIVED = "derived from printed values"
NO_PAPER = "—"  # a column the paper does not have (ours only)

_SUFFIX_MULT = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "%": 1e-2, "pp": 1e-2}


def style_of(p: PrintedNumber) -> dict:
    """How a printed number is written: suffix, exponent notation, decimals, unit scale."""
    text = p.text.strip().lstrip("~≈").strip()
    m = re.search(r"(%|pp|[KMBT]|×|x)\s*$", text)
    suffix = m.group(1) if m else ""
    exp = re.search(r"[eE]([+\-−]?\d+)", text)
    return {"suffix": suffix, "exp": int(exp.group(1).replace("−", "-")) if exp else None,
            "decimals": p.decimals, "unit_scale": p.unit_scale, "signed": text[:1] in "+-−"}


def fmt_like(x: float, p: PrintedNumber, extra: int = 1) -> str:
    """`x` (SI units) written in `p`'s notation with `extra` more digits than printed."""
    st = style_of(p)
    mult = _SUFFIX_MULT.get(st["suffix"], 1.0) * st["unit_scale"]
    y = x / mult
    sign = "+" if st["signed"] and y >= 0 else ""
    suffix = st["suffix"]
    if st["exp"] is not None:
        return f"{y:.{st['decimals'] + extra}e}"
    if st["decimals"] == 0 and not suffix and float(y).is_integer() and abs(y) < 1e15:
        return f"{sign}{int(y)}"
    return f"{sign}{y:.{st['decimals'] + extra}f}{suffix}"


def fmt_default(x: float, style: str) -> str:
    """Ours where the paper printed nothing: a column's own style."""
    if style == "int":
        return str(int(round(x)))
    if style == "M":
        return f"{x / 1e6:.2f}M"
    if style == "e":
        return f"{x:.3e}"
    if style == "pct":
        return f"{x * 100:+.2f}%"
    if style == "pct_plain":
        return f"{x * 100:.1f}%"
    if style == "x":
        return f"{x:.3f}×"
    if style.startswith("f"):
        return f"{x:.{int(style[1:])}f}"
    return f"{x:.4g}"


def diff_text(ours: float, p: PrintedNumber) -> tuple[str, float, float | None]:
    """(display, absolute difference in printed units, relative difference) of ours vs paper."""
    st = style_of(p)
    mult = _SUFFIX_MULT.get(st["suffix"], 1.0) * st["unit_scale"]
    paper = p.value * st["unit_scale"]
    absd = (ours - paper) / mult
    rel = (ours / paper - 1.0) if paper else None
    if st["suffix"] in ("%", "pp"):
        return f"{absd:+.{max(p.decimals, 1) + 1}f}pp", absd, rel
    large = st["exp"] is not None or st["suffix"] in ("K", "M", "B", "T") or st["unit_scale"] != 1.0
    if large and rel is not None:
        return f"{rel * 100:+.2f}%", absd, rel
    if st["decimals"] == 0 and float(absd).is_integer():
        return f"{int(absd):+d}", absd, rel
    return f"{absd:+.{p.decimals + 1}f}", absd, rel


def length_label(tokens: int) -> str:
    """Context lengths as the papers print them: 4096 -> "4k", 131072 -> "128k", 512 -> "512"."""
    return f"{tokens // 1024}k" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)
