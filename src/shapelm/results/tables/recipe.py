"""The training-recipe tables (Hourglass Table 4, Tapered Section 3.1): each scale's configured
hyperparameters beside the printed ones.
"""

from __future__ import annotations

from shapelm.results.context import Context
from shapelm.results.tables.cells import Col, Getter, RowRef, ours_only, paper_columns, paper_rows


RECIPE_SCALES = {"recipe_113m": "113M", "recipe_403m": "403M", "recipe_906m": "906M", "recipe_3b": "3B",
                 "recipe_8b": "8B", "recipe_tp440m": "tapered440M", "recipe_tp760m": "tapered760M",
                 "recipe_tp1300m": "tapered1p3B"}


def recipe_table(ctx: Context, name: str) -> tuple[list[Col], list[RowRef]]:
    rows = paper_rows(ctx, name)
    for r in rows:
        r.meta["scale"] = RECIPE_SCALES.get(r.id, r.id)

    def S(key: str, scale: float = 1.0) -> Getter:
        def get(ctx: Context, row: RowRef) -> float | None:
            rec = ctx.scale_recipe(row.meta["scale"])
            v = rec.get(key) if rec else None
            return None if v is None else float(v) * scale
        return get

    keys = {"lr": ("lr", "g"), "peak_lr": ("lr", "g"), "batch_tokens": ("batch_tokens", "int"),
            "trained_tokens": ("total_tokens", "e"), "warmup_tokens": ("warmup_tokens", "e"),
            "n_heads": ("n_heads", "int"), "seq_len": ("seq_len", "int"), "vocab": ("vocab_size", "int"),
            "weight_decay": ("weight_decay", "g")}
    cols = []
    for cname, header in paper_columns(name):
        key, style = keys[cname]
        cols.append(Col(cname, header, "shape", S(key), style))
    cols.append(ours_only("batch_sequences", "sequences per step (ours)", "shape", S("batch_sequences"), "int"))
    return cols, rows
