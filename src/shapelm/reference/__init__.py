"""The papers' printed reference values and their loader.

`paper_values.yaml` (beside this file) holds every number printed in the papers'
tables (and the result numbers of their text/figure captions) that a reproduction
regenerates, as the printed strings. This module parses them into `PrintedNumber`s that
know their printed precision, and recomputes the papers' own internal arithmetic
(`derived_checks`) so that docs and tests can say which printed numbers disagree.

API::

    load_paper_values() -> dict              # the parsed YAML (cached; do not mutate)
    tables() -> list[str]                    # table names
    table(name) -> list[dict]                # the rows of one table
    table_info(name) -> dict                 # paper, source, caption, key, columns, notes
    row(table, run) -> dict                  # one row, by its `run` id
    printed(table, run, column) -> PrintedNumber
    derived(table, run, column) -> PrintedNumber | None  # not printed; follows from printed values
    runs() -> dict[str, list[str]]           # run name -> tables it appears in
    derived_checks() -> list[Check]          # the papers' internal arithmetic, ok or not
    noted_checks() -> dict[str, str]         # check name -> the table note that explains it
    load_recipes() -> dict                   # recipes.yaml: paper vs official training recipes

`PrintedNumber("906.1M").value == 906.1e6`; `.matches(x, scale=1.0)` is True when x / scale
rounds to the printed number at its printed precision (half-way cases either way).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

__all__ = [
    "PAPER_VALUES_PATH",
    "PrintedNumber",
    "Check",
    "load_paper_values",
    "tables",
    "table",
    "table_info",
    "row",
    "printed",
    "derived",
    "runs",
    "derived_checks",
    "noted_checks",
    "validate",
    "RECIPES_PATH",
    "load_recipes",
]

PAPER_VALUES_PATH = Path(__file__).with_name("paper_values.yaml")
# The training recipes as printed (`paper`) and as released (`official`), with provenance;
# applied and compared by shapelm.reference.recipes.
RECIPES_PATH = Path(__file__).with_name("recipes.yaml")

# --------------------------------------------------------------------------- numbers

_SUFFIX = {
    "": 1.0,
    "K": 1e3,
    "M": 1e6,
    "B": 1e9,
    "T": 1e12,
    "%": 1e-2,
    "pp": 1e-2,
    "×": 1.0,
    "x": 1.0,
}

_NUMBER_RE = re.compile(
    r"""^\s*
    (?P<approx>[~≈])?\s*
    (?P<sign>[+\-−])?
    (?P<int>\d*)(?:\.(?P<frac>\d*))?
    (?:[eE](?P<exp>[+\-−]?\d+))?
    \s*(?P<suffix>%|pp|[KMBT]|×|x)?\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class PrintedNumber:
    """A number as a paper printed it: value plus printed precision.

    text: the printed string ("3.34e+16", "906.1M", "-2.40%", "0.52×", "~3%").
    value: the number it denotes (3.34e16, 906.1e6, -0.024, 0.52, 0.03).
    decimals: digits after the point in the printed mantissa.
    sig_figs: significant digits of the printed mantissa (trailing zeros count).
    half_unit: half of one unit in the last printed digit, in `value`'s units.
    approximate: the text was marked "~" or "≈".
    unit_scale: what one printed unit means in the column's unit (from the table's
        `columns` metadata, e.g. 1e6 for "Params (M)"); 1.0 when none. Not applied to
        `value`; pass it as `matches(x, scale=p.unit_scale)`.
    """

    text: str
    value: float
    decimals: int
    sig_figs: int
    half_unit: float
    approximate: bool = False
    unit_scale: float = 1.0

    @classmethod
    def parse(cls, text: Any, unit_scale: float = 1.0) -> "PrintedNumber":
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise ValueError(f"not a printed number: {text!r}")
        s = str(text)
        m = _NUMBER_RE.match(s)
        if not m or not (m.group("int") or m.group("frac")):
            raise ValueError(f"not a printed number: {text!r}")
        int_digits = m.group("int") or ""
        frac_digits = m.group("frac") or ""
        mantissa = float(f"{int_digits or '0'}.{frac_digits or '0'}")
        exponent = int((m.group("exp") or "0").replace("−", "-"))
        sign = -1.0 if m.group("sign") in ("-", "−") else 1.0
        mult = _SUFFIX[m.group("suffix") or ""] * 10.0**exponent
        digits = (int_digits + frac_digits).lstrip("0")
        sig = len(digits) if digits else max(len(frac_digits), 1)
        decimals = len(frac_digits)
        return cls(
            text=s,
            value=sign * mantissa * mult,
            decimals=decimals,
            sig_figs=sig,
            half_unit=0.5 * 10.0 ** (-decimals) * mult,
            approximate=m.group("approx") is not None,
            unit_scale=float(unit_scale),
        )

    @property
    def interval(self) -> tuple[float, float]:
        """Values that print as this text (closed: half-way cases either way)."""
        return (self.value - self.half_unit, self.value + self.half_unit)

    @property
    def si_value(self) -> float:
        """`value` times the column's unit scale (e.g. "227" in "(M)" -> 227e6)."""
        return self.value * self.unit_scale

    def _eps(self, y: float) -> float:
        return 1e-9 * self.half_unit + 1e-12 * max(abs(self.value), abs(y))

    def matches(self, x: float, scale: float = 1.0) -> bool:
        """True when x / scale rounds to the printed number at the printed precision.

        Half-way cases count as matching either way; a tiny epsilon absorbs float noise.
        """
        y = float(x) / float(scale)
        if not math.isfinite(y):
            return False
        return abs(y - self.value) <= self.half_unit + self._eps(y)

    def overlaps(self, lo: float, hi: float) -> bool:
        """True when some value in [lo, hi] prints as this number."""
        a, b = self.interval
        e = self._eps(max(abs(lo), abs(hi)))
        return lo <= b + e and hi >= a - e

    def __float__(self) -> float:
        return self.value

    def __str__(self) -> str:
        return self.text


# --------------------------------------------------------------------------- loading


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict) or "tables" not in data or "papers" not in data:
        raise ValueError(f"{path}: expected top-level 'papers' and 'tables'")
    return data


def load_paper_values(path: str | Path | None = None) -> dict:
    """The parsed paper values file (cached per path). Treat the result as read-only."""
    return _load(str(Path(path) if path is not None else PAPER_VALUES_PATH))


@functools.cache
def load_recipes() -> dict:
    """The parsed recipes file (cached). Treat the result as read-only."""
    data = yaml.safe_load(RECIPES_PATH.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "recipes" not in data or "repositories" not in data:
        raise ValueError(f"{RECIPES_PATH}: expected top-level 'recipes' and 'repositories'")
    return data


def tables() -> list[str]:
    return list(load_paper_values()["tables"])


def table_info(name: str) -> dict:
    try:
        return load_paper_values()["tables"][name]
    except KeyError:
        raise KeyError(f"unknown paper table {name!r}; known: {', '.join(tables())}") from None


def table(name: str) -> list[dict]:
    """The rows of one table (each with `run`, `values`, and usually `shape`)."""
    return table_info(name)["rows"]


def row(table_name: str, run: str) -> dict:
    for r in table(table_name):
        if r["run"] == run:
            return r
    known = ", ".join(r["run"] for r in table(table_name))
    raise KeyError(f"{table_name}: no row {run!r}; rows: {known}")


def printed(table_name: str, run: str, column: str) -> PrintedNumber:
    """The printed number in one cell, with the column's unit scale attached."""
    r = row(table_name, run)
    values = r.get("values") or {}
    if column not in values:
        why = (r.get("missing_values") or {}).get(column) or (r.get("missing_values") or {}).get("all")
        extra = f" (missing: {why})" if why else ""
        raise KeyError(f"{table_name}/{run}: no printed {column!r}{extra}")
    meta = (table_info(table_name).get("columns") or {}).get(column) or {}
    return PrintedNumber.parse(values[column], unit_scale=meta.get("scale", 1.0))


def derived(table_name: str, run: str, column: str) -> PrintedNumber | None:
    """A cell the paper does not print but that follows from its printed values (a row's
    `derived_values`, e.g. Tapered Figure 2's +1.01 = 17.29 - 16.28); None where there is none."""
    try:
        text = (row(table_name, run).get("derived_values") or {}).get(column)
    except KeyError:
        return None
    if text is None:
        return None
    meta = (table_info(table_name).get("columns") or {}).get(column) or {}
    return PrintedNumber.parse(text, unit_scale=meta.get("scale", 1.0))


def runs() -> dict[str, list[str]]:
    """Run name -> names of the tables it appears in."""
    out: dict[str, list[str]] = {}
    for name in tables():
        for r in table(name):
            out.setdefault(r["run"], []).append(name)
    return out


def noted_checks() -> dict[str, str]:
    """Check name -> text of the table note that documents its disagreement."""
    out: dict[str, str] = {}
    for name in tables():
        for note in table_info(name).get("notes") or []:
            if isinstance(note, dict):
                for c in note.get("checks") or []:
                    out[c] = note["text"]
    return out


def validate() -> list[str]:
    """Structural problems in the values file (empty list when it is well formed)."""
    data = load_paper_values()
    problems: list[str] = []
    papers = data["papers"]
    for name, t in data["tables"].items():
        where = f"table {name}"
        for req in ("paper", "source", "caption", "key", "rows", "notes"):
            if req not in t:
                problems.append(f"{where}: missing {req!r}")
        if t.get("paper") not in papers:
            problems.append(f"{where}: unknown paper {t.get('paper')!r}")
        if t.get("key") != ["run"]:
            problems.append(f"{where}: key must be [run]")
        rows = t.get("rows") or []
        if not rows:
            problems.append(f"{where}: no rows")
        columns = t.get("columns") or {}
        seen: set[str] = set()
        for r in rows:
            run = r.get("run")
            if not isinstance(run, str) or not re.fullmatch(r"[a-z0-9_]+", run):
                problems.append(f"{where}: bad run id {run!r}")
            if run in seen:
                problems.append(f"{where}: duplicate run {run!r}")
            seen.add(run)
            values = r.get("values")
            if not isinstance(values, dict):
                problems.append(f"{where}/{run}: values must be a mapping")
                continue
            if not values and not r.get("missing_values"):
                problems.append(f"{where}/{run}: no values and no missing_values note")
            for col, text in (r.get("derived_values") or {}).items():  # not printed: values must not have it
                if col not in columns or col in values:
                    problems.append(f"{where}/{run}: derived {col!r} undeclared or also printed")
                else:
                    try:
                        PrintedNumber.parse(str(text))
                    except ValueError as exc:
                        problems.append(f"{where}/{run}/{col} (derived): {exc}")
            for col, text in values.items():
                if col not in columns:
                    problems.append(f"{where}/{run}: column {col!r} not declared")
                if not isinstance(text, str):
                    problems.append(f"{where}/{run}/{col}: value must be the printed string, got {text!r}")
                    continue
                try:
                    PrintedNumber.parse(text)
                except ValueError as exc:
                    problems.append(f"{where}/{run}/{col}: {exc}")
            for k, v in (r.get("shape") or {}).items():
                if k in ("kind", "schedule", "mixer"):
                    ok = isinstance(v, str)
                elif k in ("attention", "framed"):
                    ok = isinstance(v, bool)
                elif k.endswith("_ratio") or k.startswith(("beta_", "alpha_")):
                    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
                elif k == "multipliers":
                    ok = isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)
                else:
                    ok = isinstance(v, int) and not isinstance(v, bool)
                if not ok:
                    problems.append(f"{where}/{run}: shape field {k}={v!r} has the wrong type")
    for c in noted_checks():
        if c.split(".")[0] not in data["tables"]:
            problems.append(f"note refers to check {c!r} of an unknown table")
    return problems


# --------------------------------------------------------------------------- checks


@dataclass
class Check:
    """One of the papers' internal arithmetic relations, recomputed.

    computed: the relation evaluated on the printed inputs (or exact integers).
    lo, hi: range of the relation over the rounding intervals of the printed inputs.
    exact: the computed value rounds to the printed one (None where exactness is not
        expected, e.g. exp of a 3-decimal loss).
    ok: the printed value is reachable from some inputs that print as printed (no
        contradiction). `status` is "ok" (exact), "rounding" (ok only thanks to the
        inputs' rounding) or "fail".
    note: the table note explaining a non-ok status, if the values file documents one.
    """

    name: str
    paper: str
    table: str
    description: str
    printed: str
    computed: float
    lo: float
    hi: float
    exact: bool | None
    ok: bool
    note: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if not self.ok:
            return "fail"
        if self.exact is False:
            return "rounding"
        return "ok"


Input = PrintedNumber | float | int


def _range(f: Callable[..., float], args: Sequence[Input]) -> tuple[float, float, float]:
    """f at the printed values, and its min/max over the corners of the inputs' intervals
    (every relation used here is monotone in each argument)."""
    centre = f(*[float(a) for a in args])
    choices = [a.interval if isinstance(a, PrintedNumber) else (float(a),) for a in args]
    vals = [f(*corner) for corner in itertools.product(*choices)]
    return centre, min(vals), max(vals)


class _Checks:
    def __init__(self) -> None:
        self.out: list[Check] = []
        self.notes = noted_checks()
        self.data = load_paper_values()

    def p(self, t: str, run: str, col: str) -> PrintedNumber:
        return printed(t, run, col)

    def has(self, t: str, run: str, col: str) -> bool:
        try:
            return col in (row(t, run).get("values") or {})
        except KeyError:
            return False

    def add(
        self,
        name: str,
        t: str,
        description: str,
        target: PrintedNumber,
        f: Callable[..., float],
        args: Sequence[Input],
        scale: float = 1.0,
        exact_expected: bool = True,
        inputs: dict[str, str] | None = None,
    ) -> None:
        centre, lo, hi = _range(f, args)
        c, lo, hi = centre / scale, lo / scale, hi / scale
        self.out.append(
            Check(
                name=name,
                paper=table_info(t)["paper"],
                table=t,
                description=description,
                printed=target.text,
                computed=c,
                lo=lo,
                hi=hi,
                exact=target.matches(c) if exact_expected else None,
                ok=target.overlaps(lo, hi),
                note=self.notes.get(name),
                inputs=inputs or {},
            )
        )

    def add_tolerance(self, name: str, t: str, description: str, target: PrintedNumber,
                      computed: float, rel_tol: float) -> None:
        ok = abs(computed / target.si_value - 1.0) <= rel_tol
        self.out.append(Check(name, table_info(t)["paper"], t, description, target.text,
                              computed, computed, computed, None, ok, self.notes.get(name)))

    # ---- generic relations
    def mean(self, t: str, run: str, out_col: str, cols: Sequence[str], src: str | None = None) -> None:
        src = src or t
        args = [self.p(src, run, c) for c in cols]
        self.add(f"{t}.{run}.{out_col}_mean", t,
                 f"{t} {run} {out_col} = mean of {src} {', '.join(cols)}",
                 self.p(t, run, out_col), lambda *xs: sum(xs) / len(xs), args,
                 inputs={c: a.text for c, a in zip(cols, args)})

    def rel_delta(self, t: str, run: str, base: str, col: str, delta_col: str,
                  name: str | None = None) -> None:
        a, b = self.p(t, run, col), self.p(t, base, col)
        self.add(name or f"{t}.{run}.{delta_col}", t,
                 f"{t} {delta_col} of {run} = {col}({run}) / {col}({base}) - 1",
                 self.p(t, run, delta_col), lambda x, y: x / y - 1.0, [a, b],
                 inputs={run: a.text, base: b.text})

    def abs_delta(self, t: str, run: str, base: str, col: str, delta_col: str) -> None:
        a, b = self.p(t, run, col), self.p(t, base, col)
        self.add(f"{t}.{run}.{delta_col}", t,
                 f"{t} {delta_col} of {run} = {col}({run}) - {col}({base})",
                 self.p(t, run, delta_col), lambda x, y: x - y, [a, b],
                 inputs={run: a.text, base: b.text})

    def formula(self, t: str, run: str, col: str, value: float, what: str,
                name: str | None = None) -> None:
        """An exact quantity (from integer shapes) against a printed cell, in the cell's units."""
        target = self.p(t, run, col)
        self.add(name or f"{t}.{run}.{col}_formula", t, f"{t} {run} {col}: {what}",
                 target, lambda: float(value), [], scale=target.unit_scale)

    def same(self, t1: str, run1: str, col1: str, t2: str, run2: str, col2: str) -> None:
        a, b = self.p(t1, run1, col1), self.p(t2, run2, col2)
        self.add(f"{t1}.{run1}.{col1}=={t2}.{run2}.{col2}", t1,
                 f"{t1} {run1} {col1} printed identically in {t2} ({run2} {col2})",
                 a, lambda x: x, [b.value], inputs={f"{t2}.{col2}": b.text})


def _shape(t: str, run: str) -> dict:
    return row(t, run).get("shape") or {}


def _attn(s: dict) -> int:
    return 4 * s["d_model"] * s["d_attn"] * s["n_layers"]


def _ffn(s: dict) -> int:
    return 3 * s["k"] * s["d_model"] * s["d_h"] * s["n_layers"]


def _norms(s: dict) -> int:
    """Every RMSNorm weight: pre-attention d, QK-norm 2*d_attn, one per FFN sub-block, final."""
    d, a, k, n = s["d_model"], s["d_attn"], s["k"], s["n_layers"]
    return (d + 2 * a + k * d) * n + d


@functools.lru_cache(maxsize=1)
def _derived_checks() -> tuple[Check, ...]:
    C = _Checks()

    # Table 1: parameter split in the caption; Val PPL vs exp(Val Loss)
    t = "hourglass_table1"
    for r in table(t):
        s, run = r["shape"], r["run"]
        C.formula(t, run, "attn_params", _attn(s), "4*d_model*d_attn*L")
        C.formula(t, run, "ffn_params", _ffn(s), "3*K*d_model*d_h*L")
        C.formula(t, run, "params_total", _attn(s) + _ffn(s), "attention + FFN matrices")
        loss = C.p(t, run, "val_loss")
        C.add(f"{t}.{run}.val_ppl_exp_loss", t, f"{t} {run}: Val PPL = exp(Val Loss)",
              C.p(t, run, "val_ppl"), math.exp, [loss], exact_expected=False)

    # Table 2: parameter counts, relative deltas, latency vs intro speedups, Table 7 copies
    t = "hourglass_table2"
    for r in table(t):
        s, run = r["shape"], r["run"]
        C.formula(t, run, "attn_params", _attn(s), "4*d_model*d_attn*L (bare matrices)")
        C.formula(t, run, "attn_params", _attn(s) + (s["d_model"] + 2 * s["d_attn"]) * s["n_layers"],
                  "4*d_model*d_attn*L + (pre-attention norm + QK-norm) weights",
                  name=f"{t}.{run}.attn_params_with_norms")
        C.formula(t, run, "ffn_params", _ffn(s), "3*K*d_model*d_h*L")
        for col in ("val_ppl", "avg_acc", "avg_ppl"):
            C.same(t, run, col, "hourglass_table7", run, col)
    for scale in ("906m", "3b", "8b"):
        hg, conv = f"hg{scale}_hg", f"hg{scale}_conv"
        C.rel_delta(t, hg, conv, "train_flops", "train_flops_delta")
        C.rel_delta(t, hg, conv, "val_ppl", "val_ppl_delta")
        C.rel_delta(t, hg, conv, "avg_acc", "avg_acc_delta")
        C.rel_delta(t, hg, conv, "avg_ppl", "avg_ppl_delta")
        sp = C.p("hourglass_decode_text", f"decode_{scale}", "speedup_64k")
        C.add(f"{t}.{hg}.decode_latency_64k_vs_intro_speedup", t,
              f"{t} {hg} 64k latency = 1 / intro speedup ({sp.text})",
              C.p(t, hg, "decode_latency_64k"), lambda x: 1.0 / x, [sp])

    # Table 5: deltas vs the standard row of the same scale; ratio column vs shape
    t = "hourglass_table5"
    pairs = [("hg403m_conv_r3", "hg403m_conv"), ("hg403m_conv_r2", "hg403m_conv"),
             ("hg403m_conv_r1p5", "hg403m_conv"), ("hg906m_conv_l12", "hg906m_conv")]
    for run, base in pairs:
        for col in ("flops", "val_loss", "val_ppl", "avg_acc", "avg_ppl"):
            C.rel_delta(t, run, base, col, f"{col}_delta")
    for r in table(t):
        s = r["shape"]
        C.formula(t, r["run"], "ffn_ratio", s["d_h"] / s["d_model"], "d_h/d_model of the (partly inferred) shape")
    for col in ("flops", "val_loss", "val_ppl", "avg_acc", "avg_ppl"):
        src = {"flops": ("hourglass_table2", "train_flops")}.get(col, ("hourglass_table7", col))
        C.same(t, "hg906m_conv", col, src[0], "hg906m_conv", src[1])

    # Table 6: per-set PPL = exp(per-set loss)
    t = "hourglass_table6"
    sets = ("dolma_cc", "dolma_stack", "m2d2", "wikitext")
    for r in table(t):
        for sname in sets:
            loss = C.p(t, r["run"], f"loss_{sname}")
            C.add(f"{t}.{r['run']}.ppl_{sname}_exp_loss", t,
                  f"{t} {r['run']}: PPL {sname} = exp(loss {sname} = {loss.text})",
                  C.p(t, r["run"], f"ppl_{sname}"), math.exp, [loss], exact_expected=False)

    # Table 7: aggregates
    t = "hourglass_table7"
    for r in table(t):
        run = r["run"]
        C.mean(t, run, "avg_acc", ["arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa"])
        C.mean(t, run, "avg_ppl", ["trivia_qa", "natural_qs"])
        if any(x["run"] == run for x in table("hourglass_table6")):
            args = [C.p("hourglass_table6", run, f"loss_{s}") for s in sets]
            C.add(f"{t}.{run}.val_loss_mean", t, f"{t} {run} Val Loss = mean of Table 6 losses",
                  C.p(t, run, "val_loss"), lambda *xs: sum(xs) / 4, args,
                  inputs={s: a.text for s, a in zip(sets, args)})
            args = [C.p("hourglass_table6", run, f"ppl_{s}") for s in sets]
            C.add(f"{t}.{run}.val_ppl_mean", t, f"{t} {run} Val PPL = mean of Table 6 PPLs",
                  C.p(t, run, "val_ppl"), lambda *xs: sum(xs) / 4, args,
                  inputs={s: a.text for s, a in zip(sets, args)})

    # Table 8: totals with every norm, absolute deltas, copies of Tables 2/7
    t = "hourglass_table8"
    for r in table(t):
        s = r["shape"]
        C.formula(t, r["run"], "params", _attn(s) + _ffn(s) + _norms(s),
                  "attention + FFN matrices + every RMSNorm weight")
    C.abs_delta(t, "hg906m_conv_attn0p9", "hg906m_conv", "val_loss", "val_loss_delta")
    C.abs_delta(t, "hg906m_conv_attn0p9", "hg906m_conv", "val_ppl", "val_ppl_delta")
    C.abs_delta(t, "hg906m_hg_attn0p9", "hg906m_hg", "val_loss", "val_loss_delta")
    C.abs_delta(t, "hg906m_hg_attn0p9", "hg906m_hg", "val_ppl", "val_ppl_delta")
    for run in ("hg906m_conv", "hg906m_hg"):
        C.same(t, run, "flops", "hourglass_table2", run, "train_flops")
        C.same(t, run, "val_loss", "hourglass_table7", run, "val_loss")
        C.same(t, run, "val_ppl", "hourglass_table7", run, "val_ppl")

    # Table 9: FFN budget
    t = "hourglass_table9"
    for r in table(t):
        C.formula(t, r["run"], "ffn_params", _ffn(r["shape"]), "3*K*d_model*d_h*L")

    # Tables 10/11: sizes and sums; ratio column; shared K=4/d_h=418 run
    for t in ("hourglass_table10", "hourglass_table11"):
        for r in table(t):
            s, run = r["shape"], r["run"]
            C.formula(t, run, "attn_size", _attn(s), "4*d_model^2*L")
            C.formula(t, run, "ffn_size", _ffn(s), "3*K*d_model*d_h*L")
            C.formula(t, run, "model_size", _attn(s) + _ffn(s), "attention + FFN")
            a, f = C.p(t, run, "attn_size"), C.p(t, run, "ffn_size")
            C.add(f"{t}.{run}.model_size_sum", t, f"{t} {run}: printed Attention + FFN = Model Size",
                  C.p(t, run, "model_size"), lambda x, y: x + y, [a, f])
            if t == "hourglass_table11":
                C.formula(t, run, "ffn_ratio", s["d_h"] / s["d_model"], "d_h/d_model")
    for col in ("model_size", "attn_size", "ffn_size", "val_loss", "val_ppl"):
        C.same("hourglass_table10", "hgabl_k4_dh418", col, "hourglass_table11", "hgabl_k4_dh418", col)

    # Table 12: KV reduction and MLA grouping factor
    t = "hourglass_table12"
    for r in table(t):
        s = r["shape"]
        C.formula(t, r["run"], "kv_reduction", 1 - s["l_hg"] / s["l_conv"], "1 - L_hg/L_conv")
    s = _shape(t, "decode906m_mla")
    C.formula(t, "decode906m_mla", "g", 2 * s["d_attn"] / (s["r_kv"] + s["d_rope"]),
              "2*d_attn/(r_KV + d_rope)")

    # Intro / Section 4.7: KV reductions and asymptotes
    t = "hourglass_decode_text"
    for r in table(t):
        s, run = r["shape"], r["run"]
        C.formula(t, run, "kv_reduction_64k", 1 - s["l_hg"] / s["l_conv"],
                  f"1 - L_hg/L_conv = 1 - {s['l_hg']}/{s['l_conv']}")
        if C.has(t, run, "speedup_asymptote"):
            C.formula(t, run, "speedup_asymptote", s["l_conv"] / s["l_hg"], "L_conv/L_hg")

    # Figure 2: parameter budgets of the 403M frozen-head configs (Section 4.1's 0.5% rule)
    t = "hourglass_fig2_frozen_head"
    target = PrintedNumber.parse("403M")
    for r in table(t):
        s = r["shape"]
        C.add_tolerance(f"{t}.{r['run']}.params_403m", t,
                        f"{t} {r['run']}: attention + FFN within 0.5% of 403M",
                        target, float(_attn(s) + _ffn(s)), 0.005)
        C.formula(t, r["run"], "ffn_ratio", s["d_h"] / s["d_model"], "d_h/d_model")

    # Figure 3 text: layer fractions
    t = "hourglass_fig3_906m_sweep"
    for run in ("hg906m_sweep_r0p6_l12", "hg906m_sweep_r0p6_l16"):
        C.formula(t, run, "layer_fraction", _shape(t, run)["n_layers"] / 24, "L / 24")

    # Hourglass v1 (arXiv 2602.06471v1 summary): relative and percentage-point changes
    t = "hourglass_v1_summary"
    for r in table(t):
        v = r["values"]
        if "change" not in v:
            continue
        ch = C.p(t, r["run"], "change")
        a, b = C.p(t, r["run"], "hg_value"), C.p(t, r["run"], "baseline_value")
        if v["change"].endswith("pp"):
            C.add(f"{t}.{r['run']}.change", t, f"{t} {r['run']}: hg - baseline (pp)",
                  ch, lambda x, y: x - y, [a, b])
        else:
            C.add(f"{t}.{r['run']}.change", t, f"{t} {r['run']}: hg / baseline - 1",
                  ch, lambda x, y: x / y - 1, [a, b])

    # Tapered Figure 2: 0.32-point improvement
    t = "tapered_fig2_blocks"
    C.abs_delta(t, "tp440m_blocks_wider_early", "tp440m_uniform", "val_ppl", "val_ppl_delta")
    C.same("tapered_fig2_blocks", "tp440m_uniform", "val_ppl", "tapered_table1", "tp440m_uniform", "val_ppl")

    return tuple(C.out)


def derived_checks() -> list[Check]:
    """The papers' internal arithmetic, recomputed from the printed values.

    Each Check says whether the printed result follows from the printed inputs exactly
    (`exact`), only thanks to the inputs' rounding (`status == "rounding"`), or not at all
    (`ok == False`). Checks whose status is not "ok" carry the table note explaining them.
    """
    return list(_derived_checks())
