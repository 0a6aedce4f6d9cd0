"""Every regenerated table as rows x columns of (paper, ours, difference, status) cells.

A table's rows are the paper's rows (in the paper's order; `run` ids match the experiment's run
names) followed by any experiment run that lists the table in `tables:` but is not a paper row.
A column is either *shape* (params, FLOPs, KV, widths: ours from the accounting of the run config,
available before training) or *metric* (ours from the per-run result files; "pending" until they
exist). Paper cells come only from `shapelm.reference` (paper_values.yaml).

Cell status:
    match       ours rounds to the printed value at its printed precision (shape columns)
    documented  ours differs, and docs/PAPER_NOTES.md / paper_values.yaml explain why (KNOWN_DIFFERENCES)
    MISMATCH    ours differs and nothing explains it: a bug in the config or the accounting
    scaled      the experiment runs a scaled-down shape for this row (the tiny default): shape
                columns are ours, not a reproduction, so a difference is expected
    measured    a metric we measured; the difference is informative, not a failure
    pending     the run (or its result file) does not exist yet
    diverged    the run's metric is NaN or infinite: "diverged at step N" (metrics.jsonl's step)
    n/a         the paper printed no value (or prints the column only for other rows)

This module is the engine every table shares: the data model (RowRef, Col, Cell, Table), the
getters that read one value of a run, the standard columns and their deltas with intervals, and
`fill_cells`, which compares each cell against the printed number. A paper's own builders live in
its module beside this one (hourglass, tapered, lws, recipe).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from shapelm import reference
from shapelm.reference import PrintedNumber
from shapelm.results import fmt
from shapelm.results import intervals
from shapelm.results import readers
from shapelm.results.context import Context, is_scaled_down
from shapelm.results.seeds import Spread, spread
from shapelm.results.tables.gaps import known_difference


# ----------------------------------------------------------------------------- data model


@dataclass
class RowRef:
    id: str  # paper row id, or the run name for rows the paper does not have
    label: str
    run: str | None  # the experiment run behind the row, if any
    in_paper: bool
    meta: dict[str, Any] = field(default_factory=dict)


Getter = Callable[[Context, RowRef], "float | None"]


@dataclass
class Col:
    name: str
    header: str
    kind: str  # "shape" | "metric"
    get: Getter
    style: str = "g"  # how ours is written where the paper printed nothing (fmt.fmt_default)
    paper: bool = True  # False: a column only we report (paper cell "—")
    paper_from: tuple[str, str] | None = None  # paper value from (table, column) of the same row id
    stderr: Getter | None = None  # standard error of ours, printed as "± se" where the data have it
    per_seed: bool = True  # metric over a row's seeds: mean ± std (n); False: the getter aggregates itself
    absent: Callable[[Context, RowRef], "str | None"] | None = None  # why ours cannot exist (e.g. MFU on CPU)


@dataclass
class Cell:
    paper: str
    ours: float | None
    ours_text: str
    diff_text: str = ""
    diff_abs: float | None = None
    diff_rel: float | None = None
    status: str = ""
    note: str | None = None
    stderr: float | None = None
    std: float | None = None  # sample std over the row's seeds (n >= 2)
    n: int | None = None  # seeds behind ours (rows with `seeds:` only)


@dataclass
class Table:
    name: str
    title: str
    caption: str
    columns: list[Col]
    rows: list[RowRef]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    data_notes: list[str] = field(default_factory=list)  # about our numbers' data (stand-ins)

    def cell(self, row: str, col: str) -> Cell:
        return self.cells[(row, col)]


# ----------------------------------------------------------------------------- getters


def accounting_value(key: str) -> Getter:
    return lambda ctx, row: as_float((ctx.acc(row.run) or {}).get(key))


def as_float(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def ppl_get(attr: str) -> Getter:
    def get(ctx: Context, row: RowRef) -> float | None:
        p = ctx.ppl(row.run)
        return as_float(getattr(p, attr)) if p else None
    return get


# Table 6's four sets by the names a run's ppl.json may use; the last of each is the tiny
# default's stand-in for it (web, code, science, wiki text of the embedded corpus).
SET_NAMES = {
    "dolma_cc": ("dolma_common-crawl", "dolma_cc", "common-crawl", "common_crawl", "c4", "default_web"),
    "dolma_stack": ("dolma_stack", "the_stack", "stack", "default_code"),
    "m2d2": ("m2d2_s2orc", "m2d2", "default_sci"),
    "wikitext": ("wikitext_103", "wikitext", "default_wiki"),
}


def set_get(short: str, key: str) -> Getter:
    def get(ctx: Context, row: RowRef) -> float | None:
        p = ctx.ppl(row.run)
        return as_float(p.set_value(SET_NAMES.get(short, (short,)), key)) if p else None
    return get


TASK_ALIASES = {"siqa": "social_iqa", "lambada_acc": "lambada", "wikitext_ppl": "wikitext"}


def task_get(task: str) -> Getter:
    def get(ctx: Context, row: RowRef) -> float | None:
        d = ctx.downstream(row.run)
        if not d:
            return None
        name = TASK_ALIASES.get(task, task)
        return as_float(d.tasks.get(name, d.tasks.get(task)))
    return get


def task_stderr(task: str) -> Getter:
    """lm-eval's standard error of a task's primary metric, from downstream.json's details
    (absent when the run was evaluated without them: bootstrap_iters 0, or WikiText)."""
    def get(ctx: Context, row: RowRef) -> float | None:
        if not row.run or not ctx.has_run(row.run):
            return None
        details = ctx.downstream_json(row.run).get("details")
        if not isinstance(details, dict):
            return None
        name = TASK_ALIASES.get(task, task)
        if name == "lambada_ppl":
            return as_float((details.get("lambada") or {}).get("perplexity_stderr"))
        d = details.get(name)
        if not isinstance(d, dict):
            return None
        return as_float(d.get(f"{d.get('primary', '')}_stderr"))
    return get


def avg_get(which: str) -> Getter:
    def get(ctx: Context, row: RowRef) -> float | None:
        d = ctx.downstream(row.run)
        return as_float(getattr(d, which)) if d else None
    return get


def rel_latency(length: int, mixer: str = "mha") -> Getter:
    """A run's decode latency relative to the conventional run of its scale (1.0 for that run)."""
    def get(ctx: Context, row: RowRef) -> float | None:
        if not row.run:
            return None
        scale = ctx.plan.runs[row.run]["scale"].lower()
        pair = ctx.decode_pairs.get(scale)
        if not pair or row.run not in pair:
            return None
        s = ctx.speedup(scale, mixer, length)
        if s is None:
            return None
        return 1.0 if row.run == pair[0] else 1.0 / s
    return get


SHAPE_KEYS = {
    "d_model": ("d_model", "int"), "n_layers": ("n_layers", "int"), "d_attn": ("d_attn", "int"),
    "k": ("k", "int"), "d_h": ("d_h", "int"), "ffn_ratio": ("ffn_ratio", "f3"),
    "attn_params": ("attn_params", "M"), "ffn_params": ("ffn_params", "M"),
    "attn_size": ("attn_params", "M"), "ffn_size": ("ffn_params", "M"),
    "model_size": ("matrices", "M"), "params_total": ("matrices", "M"), "params": ("non_embedding", "M"),
    "train_flops": ("flops_step", "e"), "flops": ("flops_step", "e"),
}
METRIC_STYLE = {"val_loss": "f4", "val_ppl": "f3", "avg_acc": "f4", "avg_ppl": "f4"}


def generic_col(name: str, header: str) -> Col:
    """A paper column by its name (the names are shared across tables in paper_values.yaml)."""
    if name in SHAPE_KEYS:
        key, style = SHAPE_KEYS[name]
        return Col(name, header, "shape", accounting_value(key), style)
    if name in ("val_loss", "val_ppl"):
        return Col(name, header, "metric", ppl_get(name), METRIC_STYLE[name])
    if name.startswith(("loss_", "ppl_")):
        kind, short = name.split("_", 1)
        return Col(name, header, "metric", set_get(short, kind), "f4" if kind == "loss" else "f3")
    if name in ("avg_acc", "avg_ppl"):
        return Col(name, header, "metric", avg_get(name), "f4")
    if name == "decode_latency_64k":
        return Col(name, header, "metric", rel_latency(65536), "x")
    return Col(name, header, "metric", task_get(name), "f4", stderr=task_stderr(name))


def delta_col(src: Col, name: str, header: str, base_of: Callable[[str], str | None], mode: str,
              rows: list[RowRef]) -> Col:
    """ours(row)/ours(base) - 1 (mode "rel") or ours(row) - ours(base) (mode "abs")."""
    by_id = {r.id: r for r in rows}

    def get(ctx: Context, row: RowRef) -> float | None:
        base_id = base_of(row.id)
        if not base_id or base_id == row.id or base_id not in by_id:
            return None
        # The base at its mean over seeds, also when one seed of this row is evaluated.
        a, b = src.get(ctx, row), src.get(ctx.aggregated, by_id[base_id])
        if a is None or b is None or (mode == "rel" and b == 0):
            return None  # a change relative to zero (a 0% accuracy base) has no value
        return a / b - 1.0 if mode == "rel" else a - b

    return Col(name, header, src.kind, get, "pct" if mode == "rel" else "f3")


BaseOf = Callable[[Context, RowRef], "str | None"]

DIVERGED = "diverged"  # a cell's status where its run's metric is NaN or infinite

# ppl.json's held-out PPL: whole sets, scored at each run's eval.ppl_seq_len (its training length
# unless the protocol names another; plan.runs.ppl_seq_len), a number other than the trainer's.
HELDOUT_SETS_PPL_JSON = ("Val PPL on the held-out sets (mean of per-set PPLs, ppl.json: whole sets at the run's "
                         "eval.ppl_seq_len)")

INTERVAL_NOTE = ("Interval columns (95% lo / 95% hi): percentile bootstrap of the pair's change "
                 f"({intervals.N_BOOT} resamples), both runs scored on the same units and resampled jointly "
                 "(shapelm.results.intervals): held-out PPL and loss over the evaluation instances within each "
                 "set; downstream averages over lm-eval's items (per-item samples) within each task; each header names "
                 "which. A run with seeds enters with each unit averaged over its finished seeds. They cover "
                 "evaluation noise only (evaluation windows or lm-eval items), not training noise (seeds, data "
                 "order: the seed std): no verdict on a paper is taken from them (paired_differences' verdict "
                 "column is, with seeds); empty where the per-unit records are missing.")

# The held-out measures (short or as a table's column names) -> their aggregate in intervals.SetAggregates
_HELDOUT = {"loss": "loss", "ppl": "ppl", "val_loss": "loss", "val_ppl": "ppl"}


def _pair_interval(ctx: Context, arm: str, base: str, measure: str, mode: str) -> tuple[intervals.Interval | None, str]:
    """The interval of arm's change against base in `measure`: a held-out aggregate (ppl.json's
    per-instance losses) or a downstream average ("avg_acc", "avg_ppl": lm-eval's per-item samples)."""
    if measure in _HELDOUT:
        agg, status = intervals.pair_aggregates(ctx, arm, base)
        key = _HELDOUT[measure]
    else:
        agg, key = intervals.task_mean_aggregates(ctx, arm, base, measure), "avg"
        status = ("measured" if agg else intervals.NO_ITEMS if ctx.downstream(arm) and ctx.downstream(base)
                  else "pending")
    if agg is None:
        return None, status
    return (agg.relative(key) if mode == "rel" else agg.difference(key)), status


def delta_interval_cols(name: str, header: str, base_of: BaseOf, measure: str, mode: str,
                        with_delta: bool) -> list[Col]:
    """Ours-only columns `NAME_lo95`, `NAME_hi95` (and `NAME` itself where the table prints no such
    delta): a row's change in `measure` (held-out "loss"/"ppl", the mean over sets, or downstream's
    "avg_acc"/"avg_ppl") against its base run, arm / base - 1 (mode "rel") or arm - base ("abs"),
    from the paired bootstraps of shapelm.results.intervals. Rows without a base stay pending, rows
    without the per-unit records say so."""
    found: dict[tuple[int, str, str], tuple[intervals.Interval | None, str]] = {}  # one bootstrap per pair

    def interval(ctx: Context, row: RowRef) -> tuple[intervals.Interval | None, str]:
        base = base_of(ctx, row) if row.run else None
        if not base or base == row.run:
            return None, "no base"
        key = (id(ctx.aggregated), row.run, base)
        if key not in found:
            found[key] = _pair_interval(ctx.aggregated, row.run, base, measure, mode)
        return found[key]

    def part(attr: str) -> Getter:
        return lambda ctx, row: getattr(iv, attr) if (iv := interval(ctx, row)[0]) else None

    def absent(ctx: Context, row: RowRef) -> str | None:  # a row without a base stays pending, as delta_col's
        return {intervals.NO_UNITS: "n/a (no per-instance losses in ppl.json)",
                intervals.NO_ITEMS: "n/a (no per-item lm-eval samples)"}.get(interval(ctx, row)[1])

    style = "pct" if mode == "rel" else "f3" if measure == "ppl" else "f4"
    noise = intervals.EVAL_WINDOWS if measure in _HELDOUT else intervals.ITEMS  # what the interval covers, in its header
    parts = ([("", "estimate", header)] if with_delta else []) + [
        ("_lo95", "lo", f"{header}, 95% lo (paired bootstrap over {noise} only)"),
        ("_hi95", "hi", f"{header}, 95% hi (paired bootstrap over {noise} only)")]
    cols = [Col(name + suffix, title, "metric", part(attr), style, paper=False, per_seed=False)
            for suffix, attr, title in parts]
    for c in cols:
        c.absent = absent
    return cols


def base_by_row_id(base_of: Callable[[str], str | None]) -> BaseOf:
    """A table's base rule over row ids (DELTA_BASES) as the base run of a row."""
    return lambda ctx, row: b if (b := base_of(row.id)) and ctx.has_run(b) else None


def row_comparison_base(ctx: Context, row: RowRef) -> str | None:
    """The run the paper compares the row's run against (intervals.comparison_base)."""
    return intervals.comparison_base(ctx, row.run) if row.run else None


# ----------------------------------------------------------------------------- rows


def paper_rows(ctx: Context, table: str) -> list[RowRef]:
    """The paper's rows (if the table is in paper_values.yaml) then the experiment's extra runs."""
    rows: list[RowRef] = []
    seen: set[str] = set()
    if table in reference.tables():
        for r in reference.table(table):
            rows.append(RowRef(r["run"], r.get("label", r["run"]), r["run"] if ctx.has_run(r["run"]) else None,
                               True, {"paper_row": r}))
            seen.add(r["run"])
    for name in ctx.runs_for_table(table):
        if name not in seen:
            rows.append(RowRef(name, ctx.plan.runs[name].get("label", name), name, False))
    return rows


def paper_columns(table: str) -> list[tuple[str, str]]:
    if table not in reference.tables():
        return []
    return [(c, meta.get("header", c)) for c, meta in (reference.table_info(table).get("columns") or {}).items()]


DELTA_BASES = {
    "hourglass_table2": ("rel", lambda r: r.replace("_hg", "_conv") if r.endswith("_hg") else None),
    "hourglass_table5": ("rel", lambda r: {"hg403m_conv_r3": "hg403m_conv", "hg403m_conv_r2": "hg403m_conv",
                                            "hg403m_conv_r1p5": "hg403m_conv",
                                            "hg906m_conv_l12": "hg906m_conv"}.get(r)),
    "hourglass_table8": ("abs", lambda r: r.replace("_attn0p9", "") if r.endswith("_attn0p9") else None),
    "tapered_table1": ("abs", lambda r: "tp440m_uniform" if r != "tp440m_uniform" else None),
    "tapered_fig2_blocks": ("abs", lambda r: "tp440m_uniform" if r != "tp440m_uniform" else None),
}


# Tables whose Val Loss / Val PPL are ppl.json's held-out aggregates and whose Avg Acc / Avg PPL are
# downstream.json's, so their deltas get the paired bootstrap's interval (the Tapered selection tables
# read the in-distribution split of metrics.jsonl, which keeps no per-instance losses).
INTERVAL_DELTA_TABLES = ("hourglass_table2", "hourglass_table5", "hourglass_table8")


def standard_table(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)
    cols: list[Col] = []
    by_name: dict[str, Col] = {}
    for cname, header in paper_columns(name):
        interval_cols: list[Col] = []
        if cname.endswith("_delta") and name in DELTA_BASES:
            mode, base = DELTA_BASES[name]
            src = by_name.get(cname[: -len("_delta")]) or generic_col(cname[: -len("_delta")], cname)
            col = delta_col(src, cname, header, base, mode, rows)
            if name in INTERVAL_DELTA_TABLES and cname in ("val_loss_delta", "val_ppl_delta", "avg_acc_delta",
                                                           "avg_ppl_delta"):
                interval_cols = delta_interval_cols(cname, header, base_by_row_id(base), cname[: -len("_delta")],
                                                    mode, with_delta=False)
        else:
            col = generic_col(cname, header)
        cols += [col, *interval_cols]
        by_name[cname] = col
    return cols, rows


def ours_only(name: str, header: str, kind: str, get: Getter, style: str) -> Col:
    return Col(name, header, kind, get, style, paper=False)


def standin_notes(ctx: Context, rows: list[RowRef], cols: list[Col]) -> list[str]:
    """Which rows' task columns (or averages over tasks) ran on stand-in data (downstream.json's
    standin_tasks)."""
    shown = {TASK_ALIASES.get(c.name, c.name) for c in cols} | {"lambada" for c in cols if c.name == "lambada_ppl"}
    averaged = any(c.name in ("avg_acc", "avg_ppl") for c in cols)
    by_tasks: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if row.run and ctx.has_run(row.run):
            tasks = tuple(t for t in ctx.downstream_json(row.run).get("standin_tasks") or ()
                          if averaged or t in shown)
            if tasks:
                by_tasks.setdefault(tasks, []).append(row.run)
    return [f"{', '.join(tasks)}: stand-in data cut from our held-out text in each task's hub schema "
            f"(`shapelm eval make-tasks --standins`), run by lm-eval's own task; not the benchmark's "
            f"questions (rows {', '.join(runs)}; docs/EVALUATION.md)" for tasks, runs in by_tasks.items()]


def paper_number(table: str, row: RowRef, col: Col) -> tuple[str, PrintedNumber | None]:
    if not col.paper:
        return fmt.NO_PAPER, None
    src_table, src_col = col.paper_from or (table, col.name)
    if src_table not in reference.tables():
        return fmt.NOT_IN_SEED, None
    try:
        values = reference.row(src_table, row.id).get("values") or {}
    except KeyError:
        return fmt.NOT_IN_SEED, None
    if src_col not in values:
        derived = reference.derived(src_table, row.id, src_col)
        return (f"{derived.text} ({fmt.DERIVED})", derived) if derived else (fmt.NOT_IN_SEED, None)
    p = reference.printed(src_table, row.id, src_col)
    return p.text, p


def over_seeds(ctx: Context, row: RowRef, col: Col) -> Spread | None:
    """A metric column's value for each of the row's seeds (None for a row of one run)."""
    names = ctx.instances(row.run)
    if col.kind != "metric" or not col.per_seed or len(names) < 2:
        return None
    return spread(col.get(ctx.single, dataclasses.replace(row, run=name)) for name in names)


def fill_cells(ctx: Context, table: Table) -> None:
    for row in table.rows:
        # A row that is not a run itself (Table 12's mixers) is scaled when the run behind it is.
        scaled = is_scaled_down(ctx, table.name, row.id if ctx.has_run(row.id) else (row.run or row.id))
        planned = len(ctx.instances(row.run))
        for col in table.columns:
            text, p = paper_number(table.name, row, col)
            seeds = over_seeds(ctx, row, col)
            ours = col.get(ctx, row) if seeds is None else seeds.mean
            if ours is not None and not math.isfinite(ours):
                ours = None
            cell = Cell(paper=text, ours=ours, ours_text=fmt.PENDING)

            def written(x: float) -> str:
                return fmt.fmt_like(x, p) if p else fmt.fmt_default(x, col.style)

            if ours is not None:
                cell.ours_text = written(ours)
                if seeds is not None:
                    cell.std, cell.n = seeds.std, seeds.n
                    std = f" ± {written(seeds.std)}" if seeds.std is not None else ""
                    of = "" if seeds.n == planned else f" of {planned}"
                    cell.ours_text += f"{std} (n={seeds.n}{of})"
                else:
                    cell.stderr = col.stderr(ctx, row) if col.stderr else None
                if cell.stderr is not None:
                    cell.ours_text += f" ± {written(cell.stderr)}"
            elif col.kind == "metric" and (why := ctx.divergence(row.run)):
                cell.ours_text, cell.status = why, DIVERGED  # not pending: it will not come
                table.cells[(row.id, col.name)] = cell
                continue
            elif col.absent is not None and (why := col.absent(ctx, row)):
                cell.ours_text, cell.status = why, "n/a"
                table.cells[(row.id, col.name)] = cell
                continue
            if p is None:
                cell.status = fmt.PENDING if ours is None else ("n/a" if col.paper else "")
            elif ours is None:
                cell.status = fmt.PENDING
            else:
                cell.diff_text, cell.diff_abs, cell.diff_rel = fmt.diff_text(ours, p)
                if col.kind == "shape":
                    if p.matches(ours, scale=p.unit_scale):
                        cell.status = "match"
                    elif scaled:
                        cell.status = "scaled"
                    else:
                        note = known_difference(table.name, row.id, col.name)
                        cell.status = "documented" if note else "MISMATCH"
                        cell.note = note
                else:
                    cell.status = "measured"
            table.cells[(row.id, col.name)] = cell


def tasks_mean(tasks: list[str]) -> Getter:
    """The mean of a table's own task columns (None until every one is measured): an average
    column that agrees with the columns beside it."""
    def get(ctx: Context, row: RowRef) -> float | None:
        vals = [task_get(t)(ctx, row) for t in tasks]
        return sum(vals) / len(vals) if all(v is not None for v in vals) else None
    return get


# ----------------------------------------------------------------------------- evaluations during training

INDIST_NOTE = ("ours: the final evaluation on the held-out split of the training stream "
               "(train.eval_heldout_sequences, metrics.jsonl)")


def indist_get(key: str = "ppl") -> Getter:
    """The final in-distribution evaluation (the held-out split of the training stream)."""
    def get(ctx: Context, row: RowRef) -> float | None:
        rec = ctx.final_val(row.run) if row.run else None
        return as_float(readers.val_value(rec, readers.HELDOUT_SPLIT, key)) if rec else None
    return get


def indist_mean(ctx: Context, run: str) -> float | None:
    """A run's final in-distribution PPL, the mean over the seeds that have it (derived_claims)."""
    if not ctx.has_run(run):
        return None
    get = indist_get("ppl")
    return spread(get(ctx.single, RowRef(n, n, n, False)) for n in ctx.instances(run)).mean
