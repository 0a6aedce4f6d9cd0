"""`shapelm recipe diff`: every field where the paper text and the released code differ, with
their sources, and the printed numbers the choice changes (Figure 4's fits and compute saving,
3B/8B GPU-hours, parameter counts with untied vs tied embeddings), computed under both.

The recipes themselves (values, provenance, how a run follows one) are `shapelm.reference.recipes`.

    shapelm recipe diff configs/paper.yaml configs/overlays/paper-official.yaml [--all] [--write DIR]
"""
from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path
from typing import Any

from shapelm import files
from shapelm import reference
from shapelm.config import Experiment, load_yaml, merge
from shapelm.plan.build import load_plan
from shapelm.plan.document import Plan
from shapelm.plan.experiment import load_experiment
from shapelm.reference.recipes import CSV_COLUMNS, RECIPE_NAMES, TABLE_NAME, expand_source, fields, groups
from shapelm.results import claims


# --------------------------------------------------------------------------- derived numbers


#: What the recipe table reads which runs follow which recipe from: a plan, or what one is built from.
PlanSource = Plan | Experiment | str | Path


def _b200() -> dict[str, Any]:
    return reference.load_recipes()["hardware"]


def table2_model(run: str, recipe: str = "paper"):
    """A Table 2 model from the reference shape and the recipe's vocabulary (for counting)."""
    from shapelm.model.builders import build_model_config

    shape = dict(reference.row("hourglass_table2", run)["shape"])
    if shape["kind"] == "conventional":
        shape.pop("k", None)
    shape["vocab_size"] = reference.load_recipes()["vocab"][recipe]["value"]
    shape["max_seq_len"] = 4096
    return build_model_config(shape, f"hourglass_table2/{run}")


def _tokens(group: str, recipe: str) -> float:
    return float(fields(group)["total_tokens"].side(recipe).value)


def fig4_under(recipe: str):
    """Figure 4's fits (conventional, hourglass) and compute saving with each scale's tokens
    under `recipe` (the points: printed per-step FLOPs and Avg Acc of Table 2)."""
    tokens = {s: _tokens(f"hourglass_{S}", recipe) for s, S in (("906m", "906M"), ("3b", "3B"), ("8b", "8B"))}
    return claims.fig4_fits(claims.fig4_points_paper(tokens))


def train_flops_total(run: str, group: str, recipe: str) -> float:
    from shapelm.shapes.accounting import flops_per_token

    return flops_per_token(table2_model(run, recipe), 4096).train * _tokens(group, recipe)


def derived_rows() -> list[dict[str, str]]:
    """Printed numbers that depend on the recipe, computed under both (from the reference data)."""
    from shapelm.shapes.accounting import param_counts

    rows: list[dict[str, str]] = []

    def add(group: str, name: str, paper: float, official: float, fmt: str, how: str, note: str = "") -> None:
        same = f"{paper:{fmt}}" == f"{official:{fmt}}"
        rows.append({"section": "derived", "group": group, "field": name, "config_key": "",
                     "status": "same" if same else "differs", "paper": f"{paper:{fmt}}", "paper_source": how,
                     "official": f"{official:{fmt}}", "official_source": how, "note": note})

    tok = {r: f"8B at {_tokens('hourglass_8B', r) / 1e9:.0f}B tokens" for r in RECIPE_NAMES}
    pc, ph, ps = fig4_under("paper")
    oc, oh, os_ = fig4_under("official")
    how = ("least squares Acc = a + b log10 C over Table 2's printed Avg Acc and C = printed per-step FLOPs x "
           "tokens / 4,194,304 (shapelm.results.claims)")
    fig4 = reference.row("hourglass_fig4_compute_fit", "fit_acc_vs_log_compute")["values"]
    add("figure4", "fit R^2, conventional", pc.r2, oc.r2, ".4f", how,
        f"printed {fig4['r2_first']} (Figure 4 caption); {tok['paper']} vs {tok['official']}")
    add("figure4", "fit R^2, hourglass", ph.r2, oh.r2, ".4f", how,
        f"printed {fig4['r2_second']} (Figure 4 caption); {tok['paper']} vs {tok['official']}")
    for label, p_fit, o_fit in (("conventional", pc, oc), ("hourglass", ph, oh)):
        add("figure4", f"fit slope b per decade of C, {label}", p_fit.b, o_fit.b, ".4f", how,
            f"not printed; {tok['paper']} vs {tok['official']}")
    add("figure4", "compute saving at matched accuracy", ps, os_, ".2%", how + "; read at the mean accuracy",
        f"printed {fig4['compute_saving']} (abstract, Section 4.5); {tok['paper']} vs {tok['official']}")

    hw = _b200()
    peak_bf16, peak_fp8 = hw["b200"]["bf16_dense_tflops"] * 1e12, hw["b200"]["fp8_dense_tflops"] * 1e12
    mfu = float(hw["assumed_mfu"])
    for claim in reference.load_recipes()["wall_clock_claims"]:
        run, group = claim["run"], claim["group"]
        flops = {r: train_flops_total(run, group, r) for r in RECIPE_NAMES}
        # "shapelm.accounting" (now shapelm.shapes.accounting) is text of the committed recipe_diff
        # table: renaming it here changes that table, so it waits for the next regeneration.
        how = ("shapelm.accounting A.8 FLOPs x the recipe's tokens / (B200 dense BF16 peak x assumed MFU "
               f"{mfu:g})")
        add(group, f"{run}: GPU-hours (B200, MFU {mfu:g})", flops["paper"] / (peak_bf16 * mfu) / 3600,
            flops["official"] / (peak_bf16 * mfu) / 3600, ".0f", how,
            f"the paper's claim: {claim['gpus']} B200 x {claim['days']} days = "
            f"{claim['gpus'] * claim['days'] * 24} GPU-hours ({claim['source']})")
        seconds = claim["gpus"] * claim["days"] * 86400
        add(group, f"{run}: MFU implied by {claim['days']} days on {claim['gpus']} B200 (BF16 peak)",
            flops["paper"] / (seconds * peak_bf16), flops["official"] / (seconds * peak_bf16), ".2f",
            "accounting FLOPs / (GPUs x days x B200 dense BF16 peak)", hw["b200"]["source"])
        add(group, f"{run}: MFU implied by {claim['days']} days on {claim['gpus']} B200 (FP8 peak)",
            flops["paper"] / (seconds * peak_fp8), flops["official"] / (seconds * peak_fp8), ".2f",
            "accounting FLOPs / (GPUs x days x B200 dense FP8 peak); the official recipe trains in FP8",
            hw["b200"]["source"])

    for group, spec in groups().items():
        if spec["paper"] != "hourglass":
            continue
        tie = fields(group)["tie_embeddings"]
        for run in spec["runs"]:
            counts = {r: param_counts(table2_model(run, r), tie_embeddings=bool(tie.side(r).value))
                      for r in RECIPE_NAMES}
            add(group, f"{run}: total parameters (embeddings untied / tied)", counts["paper"].total / 1e6,
                counts["official"].total / 1e6, ".1f",
                "shapelm.accounting.param_counts (M) of the Table 2 shape with vocabulary 100,352",
                f"non-embedding {counts['paper'].non_embedding / 1e6:.1f}M under both")
    return rows


# --------------------------------------------------------------------------- diff table


def field_rows(include_same: bool = False) -> list[dict[str, str]]:
    """Every recipe field where text and code differ (all fields with include_same)."""
    rows = []
    for group in groups():
        for f in fields(group).values():
            status = f.status
            if status == "same" and not include_same:
                continue
            off = f.official
            note = "; ".join(x for x in (off.refusal if not off.supported else "", off.note, f.paper.note) if x)
            rows.append({"section": "field", "group": group, "field": f.name, "config_key": f.config or "",
                         "status": status, "paper": f.paper.text,
                         "paper_source": "; ".join(expand_source(s) for s in f.paper.sources),
                         "official": off.text, "official_source": "; ".join(expand_source(s) for s in off.sources),
                         "note": note})
    return rows


def followed(plan: Plan) -> dict[str, list[str]]:
    """Recipe name -> the experiment's runs that follow it (the plan's `run_recipes`)."""
    out: dict[str, list[str]] = {name: [] for name in RECIPE_NAMES}
    for run in plan.runs:
        out[plan.run_recipes[run]].append(run)
    return out


def to_csv(rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(source: PlanSource, rows: list[dict[str, str]]) -> str:
    plan = load_plan(source)
    by = followed(plan)
    repos = reference.load_recipes()["repositories"]
    lines = [f"# Recipe diff: paper text vs released code ({plan.name})", "",
             f"Experiment `{plan.name}` follows recipe **{plan.recipe}**; "
             + "; ".join(f"{name}: {len(runs)} run(s)" + (f" ({', '.join(runs)})" if runs and name == "official" else "")
                         for name, runs in by.items()) + ".",
             "Sources: " + "; ".join(f"{r['repo']}@{r['commit'][:7]}" for r in repos.values())
             + "; the papers' texts (README, Papers). docs/PAPER_NOTES.md has the evidence.", ""]
    for section, title in (("field", "Fields where the text and the code differ"),
                           ("derived", "Printed numbers under each recipe")):
        part = [r for r in rows if r["section"] == section]
        if not part:
            continue
        lines += [f"## {title}", "", "| group | field | status | paper | official | note | paper source | official source |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in part:
            label = f"{r['field']} (`{r['config_key']}`)" if r["config_key"] else r["field"]
            cells = [r["group"], label, r["status"], r["paper"], r["official"], r["note"], r["paper_source"],
                     r["official_source"]]
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_recipe_diff(source: PlanSource, tables_dir: str | Path, include_same: bool = False) -> list[Path]:
    """recipe_diff.csv and .md in `tables_dir`; which runs follow which recipe from the plan of
    `source` (a plan document, a config, a loaded experiment or a Plan)."""
    rows = field_rows(include_same) + derived_rows()
    tables_dir = Path(tables_dir)
    out = [tables_dir / f"{TABLE_NAME}.csv", tables_dir / f"{TABLE_NAME}.md"]
    files.write_text(out[0], to_csv(rows))
    files.write_text(out[1], to_markdown(source, rows))
    return out


# --------------------------------------------------------------------------- CLI


def load_configs(paths: list[str]):
    """One experiment from config files merged in order (an overlay after its base), as
    `snakemake --configfile BASE OVERLAY` merges them; one path may also be a plan document
    (work/EXP/plan.json, what the recipe_diff rule passes)."""
    if len(paths) == 1:
        return load_plan(paths[0])
    data: dict[str, Any] = {}
    for path in paths:
        data = merge(data, load_yaml(path))
    return load_experiment(data)


def cmd_diff(args: argparse.Namespace) -> int:
    exp = load_configs(args.config)
    if args.write:
        for path in write_recipe_diff(exp, args.write, include_same=args.all):
            print(path)
        return 0
    rows = field_rows(args.all) + derived_rows()
    print(to_csv(rows) if args.format == "csv" else to_markdown(exp, rows), end="")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recipe", help="the paper's and the released code's training recipes")
    rsub = p.add_subparsers(dest="recipe_command", metavar="SUBCOMMAND", required=True)
    d = rsub.add_parser("diff", help="every field where paper text and released code differ, with sources")
    d.add_argument("config", nargs="+",
                   help="experiment config(s), later files overlaying earlier ones, or one plan document (plan.json)")
    d.add_argument("--all", action="store_true", help="also list the fields on which both agree")
    d.add_argument("--format", choices=("md", "csv"), default="md", help="output format")
    d.add_argument("--write", metavar="DIR", help=f"write {TABLE_NAME}.csv and {TABLE_NAME}.md into DIR")
    d.set_defaults(func=cmd_diff)
