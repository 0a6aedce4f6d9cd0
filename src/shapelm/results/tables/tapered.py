"""The special tables of the Tapered paper (arXiv 2606.23670): Table 1 and Figure 2 read from the
in-distribution split of metrics.jsonl, Table 2 with its task means, and the decode cost of the
tapered backbones against the Transformer of the same size.
"""

from __future__ import annotations

from typing import Callable

from shapelm.results import fmt
from shapelm.results import readers
from shapelm.results.context import Context
from shapelm.results.tables.cells import (
    Col, Getter, HELDOUT_SETS_PPL_JSON, INDIST_NOTE, RowRef, accounting_value, as_float, delta_interval_cols,
    indist_get, ours_only, ppl_get, row_comparison_base, standard_table, task_get, task_stderr, tasks_mean,
)


def decode_table(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """Per-token decode cost of the Tapered backbones against the run their `decode:` names (the
    softmax Transformer of the same d_model, depth and total parameters), each in its native
    shapes: no paper values (the Tapered paper reports no decoding; docs/DECODE.md "Recurrent
    mixers")."""
    def label(run: str) -> str:
        base = ctx.decode_baselines.get(run)
        return ctx.plan.runs[run].get("label", run) + (f" (vs {base})" if base else "")

    names = ctx.runs_for_table(name)  # the baselines first
    rows = [RowRef(n, label(n), n, False) for n in sorted(names, key=lambda n: n in ctx.decode_baselines)]

    def latency(length: int) -> Getter:
        return lambda ctx, row: ctx.latency(row.run, "native", length) if row.run else None

    def rel(length: int) -> Getter:
        def get(ctx: Context, row: RowRef) -> float | None:
            base = ctx.decode_baselines.get(row.run)
            a, b = ctx.latency(row.run, "native", length), base and ctx.latency(base, "native", length)
            return a / b if a and b else None
        return get

    runs = {r.run for r in rows}
    native = [r for r in ctx.decode_rows if r.get("run") in runs and r.get("mixer") == "native"]
    lengths = sorted({int(r["length"]) for r in native}) or ctx.decode_lengths()

    def field_at(key: str, length: int) -> Getter:
        return lambda ctx, row: as_float((readers.decode_row(ctx.decode_rows, row.run, "native", length) or {}).get(key))

    def baseline_of_others(length: int) -> Callable[[Context, RowRef], str | None]:
        """A run measured that names no baseline has no ratio: it is the others' baseline."""
        def why(ctx: Context, row: RowRef) -> str | None:
            measured = ctx.latency(row.run, "native", length) is not None
            return "baseline" if measured and row.run not in ctx.decode_baselines else None
        return why

    cols = []
    for L in lengths:
        label = fmt.length_label(L)
        cols += [ours_only(f"latency_ms_{label}", f"ms per token at {label}", "metric", latency(L), "f3"),
                 ours_only(f"latency_rel_{label}", f"/ baseline's at {label}", "metric", rel(L), "x")]
        cols[-1].absent = baseline_of_others(L)
    if lengths:
        longest = fmt.length_label(lengths[-1])
        cols += [ours_only("kv_bytes", f"KV-cache bytes at {longest}", "metric", field_at("kv_bytes", lengths[-1]), "e"),
                 ours_only("state_bytes", "recurrent state bytes (measured)", "metric",
                            field_at("state_bytes", lengths[-1]), "e"),
                 ours_only("state_bytes_predicted", "recurrent state bytes (accounting)", "shape",
                            field_at("state_bytes_predicted", lengths[-1]), "e")]
    return cols, rows


def table2(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    cols, rows = standard_table(ctx, name)
    avg = tasks_mean(["lambada_acc", "piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "siqa", "boolq"])

    lam = Col("lambada_ppl", "LAMBADA ppl", "metric", task_get("lambada_ppl"), "f2",
              stderr=task_stderr("lambada_ppl"))
    out = []
    for c in cols:
        if c.name == "avg_acc":
            c.get = avg
        if c.name == "lambada_ppl":
            c = lam
        out.append(c)
    # The paper compares each tapered schedule with the uniform run of its backbone and scale; its
    # table prints no held-out PPL, so the change there (with its interval) is ours only.
    out += delta_interval_cols("val_ppl_heldout_delta", "Val PPL on the held-out sets - uniform's (mean of per-set PPLs)",
                               row_comparison_base, "ppl", "abs", with_delta=True)
    # The paper compares four backbones at 760M and 1.3B: their sizes and costs beside the metrics.
    out += [ours_only("params_total", "total params (ours)", "shape", accounting_value("total_params"), "M"),
            ours_only("train_flops", "train FLOPs per step (ours)", "shape", accounting_value("flops_step"), "e")]
    return out, rows


def indist_tables(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    """Tapered (arXiv 2606.23670) selects schedules on in-distribution validation PPL (a held-out split of the
    training data): its column reads our split; the four held-out sets' PPL stands beside it."""
    cols, rows = standard_table(ctx, name)
    for c in cols:
        if c.name == "val_ppl":  # the delta column reads this Col, so it follows
            c.get, c.header = indist_get("ppl"), f"{c.header} ({INDIST_NOTE})"
    cols.append(ours_only("val_ppl_heldout_sets", HELDOUT_SETS_PPL_JSON, "metric", ppl_get("val_ppl"), "f3"))
    return cols, rows
