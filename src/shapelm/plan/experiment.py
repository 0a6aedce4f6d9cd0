"""An experiment loaded as the workflow plans it: the config validated and merged, every run
(and seed instance) resolved, then checked across fields (`check_runs`: model lengths, decode
baselines, evaluation task names) and for where its names put outputs (`check_output_paths`).

`shapelm.config` holds the schema, the loader and run resolution; the checks here need the
evaluation task registry and the per-scale data plan, which sit above it.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from shapelm.config import (
    DEFAULTED_SECTIONS,
    Experiment,
    numbers_from_cli,
    group_of,
    load_yaml,
    merge,
    raise_problems,
    refuse_templates,
    resolve_run,
    section_defaults,
    seed_instances,
    validate_schema,
)
from shapelm.data.plan import retokenizes, run_tokenizer, scale_data, tokenizer_slug
from shapelm.errors import EvalError
from shapelm.evaluation.standins import standin_tasks
from shapelm.evaluation.tasks import expand_task_names


def load_experiment(path_or_data: str | os.PathLike | dict[str, Any], overrides: dict | None = None,
                    where: str = "config") -> Experiment:
    """Load, validate and resolve every run of an experiment config (`where` names a mapping's
    origin in messages; a file names itself)."""
    if isinstance(path_or_data, dict):
        data, path = copy.deepcopy(path_or_data), None
        refuse_templates(data, where)
    else:
        path = Path(path_or_data)
        data, where = load_yaml(path), str(path_or_data)
    if overrides:
        data = merge(data, overrides)
    if isinstance(data.get("cluster"), dict):
        data["cluster"] = numbers_from_cli(data["cluster"])
    validate_schema(data, where)
    exp = Experiment(name=data.get("name", path.stem if path else "experiment"), path=path, raw=data)
    instances = seed_instances(data, where)
    for run_name in data["runs"]:
        for instance, seed in instances[run_name]:
            exp.runs[instance] = resolve_run(data, run_name, where, seed=seed, instance=instance)
    raise_problems([*check_runs(exp), *check_output_paths(exp)], where)
    # Filled after the runs are resolved, so run configs (and their hashes) hold what was written.
    for section in DEFAULTED_SECTIONS:
        data[section] = {**section_defaults(section), **data.get(section, {})}
    return exp


def check_runs(exp: Experiment) -> list[str]:
    """Cross-field problems of the resolved runs that no single key shows (each naming the run
    and key): a model shorter than its training sequences, evaluation tasks no one provides."""
    raw, errors = exp.raw, []
    for name, run in exp.runs.items():
        max_len, seq_len = int(run["model"]["max_seq_len"]), int(run["train"]["seq_len"])
        if max_len < seq_len:
            name = group_of(run)  # the key to fix is the run's, not one seed's
            key = (f"runs.{name}.arch.max_seq_len" if "max_seq_len" in exp.spec(name)["arch"]
                   else "model_defaults.max_seq_len")
            errors.append(f"{key}: {max_len} is shorter than runs.{name}'s train.seq_len {seq_len}")
    for name, spec in raw["runs"].items():
        base = spec.get("decode")
        if isinstance(base, str) and (base == name or base not in raw["runs"]):
            errors.append(f"runs.{name}.decode: {base!r} is not another run of the config "
                          "(a run's name: the baseline of its decode benchmark)")
    sections = {"eval": raw.get("eval", {})}
    sections.update({f"runs.{n}.eval": r.get("eval", {}) for n, r in raw["runs"].items()})
    for key, section in sections.items():
        for field, check in (("tasks", expand_task_names), ("standin_tasks", standin_tasks)):
            if field in section:
                try:
                    check(section[field])
                except EvalError as err:
                    errors.append(f"{key}.{field}: {err}")
    return errors


#: Output roots (relative to the working directory) and the config names below each of them.
OUTPUT_ROOTS = ("work", "results", "paper_figures", "logs")


def _escapes(root: str, parts: list[str]) -> str | None:
    """Where `root/parts...` resolves to, if a part is not one plain path component or the
    result is not inside `root/parts[0]` (followed symlinks included); else None."""
    base = Path(root).resolve()
    top = (base / parts[0]).resolve()
    full = top.joinpath(*parts[1:]).resolve()
    plain = all(p not in ("", ".", "..") and Path(p).name == p and "\\" not in p for p in parts)
    if not plain or top.parent != base or not (full == top or top in full.parents):
        return str(full)
    return None


def check_output_paths(exp: Experiment) -> list[str]:
    """Every output path a config name becomes (experiment, scale, run, table, validation set,
    retokenized tokenizer), resolved: it must stay inside its output folder. Inputs (data roots,
    HF caches, long-context files) may point anywhere; they never become declared outputs."""
    raw, name = exp.raw, exp.name
    # (key, value, output root, path below root/EXP): the paths of workflow/rules/*.smk
    named: list[tuple[str, Any, str, list[str]]] = [("name", name, root, []) for root in OUTPUT_ROOTS]
    named += [(f"scales.{s}", s, "work", ["data", s]) for s in raw["scales"]]
    named += [(f"scales.{s}", s, "results", ["decode", f"pair_{s.lower()}.json"]) for s in raw["scales"]]
    named += [(f"runs.{r}", r, root, ["runs", r]) for r in exp.runs for root in ("work", "results")]
    named += [(f"runs.{r}", r, "results", ["decode", f"pair_{r}.json"]) for r in raw["runs"]
              if isinstance(raw["runs"][r].get("decode"), str)]
    named += [(f"runs.{r}.tables", t, "results", [".targets", f"table_{t}.done"])
              for r, run in exp.runs.items() for t in run["tables"]]
    for scale in raw["scales"]:
        data = scale_data(raw, scale)
        key = f"scales.{scale}.data" if "data" in raw["scales"][scale] else "data"
        named += [(f"{key}.validation_sets", v, "work", ["data", "val", v])
                  for v in data.get("validation_sets", [])]
        if retokenizes(data):
            tok = run_tokenizer(data)
            named.append((f"{key}.tokenizer", tok, "work", ["data", f"val-{tokenizer_slug(tok)}"]))
    errors = []
    for key, value, root, parts in named:
        if not isinstance(value, str) or not value:
            errors.append(f"{key}: {value!r} is not a name")
            continue
        where = _escapes(root, [name, *parts])
        if where:
            errors.append(f"{key}: {value!r} would put outputs at {where}, outside {root}/{name}/")
    return list(dict.fromkeys(errors))
