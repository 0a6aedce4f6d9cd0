"""An experiment loaded as the workflow plans it: the config validated and merged, every run
(and seed instance) resolved, then checked across fields (`check_runs`: model lengths, decode
baselines, evaluation task names) and for where its names put outputs (`check_output_paths`).

`shapelm.config` holds the schema and the loader, `shapelm.plan.runs` run resolution; the checks here need the
evaluation task registry and the per-scale data choices, which sit above it.
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
    section_defaults,
    seed_instances,
    validate_schema,
)
from shapelm.data.choices import retokenizes, run_tokenizer, scale_data, tokenizer_slug
from shapelm.errors import EvalError
from shapelm.evaluation.standins import standin_tasks
from shapelm.evaluation.tasks import expand_task_names, task_source_problem
from shapelm.reference.recipes import run_recipe_name
from shapelm.plan.paths import RUNS
from shapelm.plan.runs import resolve_run


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
    and key): a model shorter than its training sequences, evaluation tasks no one provides, a
    run's eval key that only the top-level eval section sets (`check_run_eval`)."""
    raw, errors = exp.raw, []
    for name, run in exp.runs.items():
        max_len, seq_len = int(run["model"]["max_seq_len"]), int(run["train"]["seq_len"])
        if max_len < seq_len:
            name = group_of(run)  # the key to fix is the run's, not one seed's
            key = (f"runs.{name}.arch.max_seq_len" if "max_seq_len" in exp.spec(name)["arch"]
                   else "model_defaults.max_seq_len")
            errors.append(f"{key}: {max_len} is shorter than runs.{name}'s train.seq_len {seq_len}")
    errors += check_contexts(exp)
    errors += check_decode(exp)
    errors += check_run_eval(exp)
    if raw.get("recipe_waive") and not any(run_recipe_name(raw, n) == "official" for n in raw["runs"]):
        errors.append(f"recipe_waive: {raw['recipe_waive']} waives nothing: no run follows recipe 'official' "
                      f"(the paper recipe has no unsupported field); remove it")

    sections = {"eval": raw.get("eval", {})}
    sections.update({f"runs.{n}.eval": r.get("eval", {}) for n, r in raw["runs"].items()})
    for key, section in sections.items():
        for field, check in (("tasks", expand_task_names), ("standin_tasks", standin_tasks)):
            if field in section:
                try:
                    check(section[field])
                except EvalError as err:
                    errors.append(f"{key}.{field}: {err}")
        for task, source in (section.get("task_data") or {}).items():
            problem = task_source_problem(source)
            if problem:
                errors.append(f"{key}.task_data.{task}: {problem}")
    return errors


def _arch_key(exp: Experiment, run: dict[str, Any], key: str) -> str:
    """Where a resolved run's arch key was written: the run's arch or model_defaults."""
    name = group_of(run)
    return f"runs.{name}.arch.{key}" if key in exp.spec(name)["arch"] else f"model_defaults.{key}"


def check_contexts(exp: Experiment) -> list[str]:
    """Titans' window and memory chunk and Hope's CMS periods against each run's train.seq_len (a
    window beyond it is full attention, a chunk that does not divide it leaves a partial last
    update, a CMS period beyond it never updates within a sequence). Perplexity may be scored
    beyond a model's training context on purpose: the protocol scores every model on 4096-token
    instances, the 113M ones trained on 2048 (docs/PAPER_NOTES.md protocol 6); ppl.py says so in its log.
    So eval.ppl_seq_len is not checked against model.max_seq_len either: max_seq_len defaults to
    train.seq_len and is no hard limit (no position table; RoPE angles are computed for every
    position the input has), so a longer instance is scored, by extrapolation, as intended."""
    errors = []
    for name, run in exp.runs.items():
        group = group_of(run)
        seq_len = int(run["train"]["seq_len"])
        for layer in run["model"]["layers"]:
            window, chunk = layer.get("window"), layer.get("memory_chunk")
            if window is not None and window > seq_len:
                errors.append(f"{_arch_key(exp, run, 'window')}: {window} is beyond runs.{group}'s "
                              f"train.seq_len {seq_len} (a window that long is full attention)")
            if chunk is not None and seq_len % chunk:
                errors.append(f"{_arch_key(exp, run, 'memory_chunk')}: {chunk} does not divide runs."
                              f"{group}'s train.seq_len {seq_len}")
            for period in layer.get("cms_chunks") or ():
                if period > seq_len:
                    errors.append(f"{_arch_key(exp, run, 'cms_chunks')}: {period} is beyond runs.{group}'s "
                                  f"train.seq_len {seq_len} (that CMS level would never update)")
    return list(dict.fromkeys(errors))


#: The keys of a run's own `eval:` that its jobs read; the rules take every other eval key (the
#: held-out perplexity's length, instances and batch, lm-eval's batch and limit, the stand-in
#: tasks' size) from the top-level `eval:` only.
RUN_EVAL_KEYS = ("tasks", "standin_tasks", "task_data")


def check_run_eval(exp: Experiment) -> list[str]:
    """A run's `eval:` key that no job would read: refused rather than silently not applied (a
    run's own eval.ppl_seq_len would not be applied: the length is its scale's or the top-level's,
    else its training length (plan.runs.ppl_seq_len), so the paired intervals compare runs of a
    scale scored on the same instances)."""
    errors = []
    top = exp.raw.get("eval", {})
    for name, spec in exp.raw["runs"].items():
        for key, value in (spec.get("eval") or {}).items():
            if key not in RUN_EVAL_KEYS:
                now = f" ({top[key]!r} there now)" if key in top else ""
                errors.append(f"runs.{name}.eval.{key}: {value!r} would not be applied: every run is evaluated "
                              f"with the top-level eval.{key}{now}; a run's eval takes only "
                              f"{', '.join(RUN_EVAL_KEYS)}")
    return errors


def check_decode(exp: Experiment) -> list[str]:
    """The decode benchmark's pairings: `decode: true` makes exactly one conventional and one
    other run per scale (Table 12's pair; a lone or third one would be ignored or replace the
    pair), and a run named as baseline is another run, and no chain of baselines comes back."""
    raw, errors = exp.raw, []
    by_scale: dict[str, list[str]] = {}
    for name, spec in raw["runs"].items():
        if spec.get("decode") is True:
            by_scale.setdefault(spec["scale"].lower(), []).append(name)
    for scale, names in by_scale.items():
        kinds = ["conventional" if exp.run(n)["arch"].get("kind") == "conventional" else "other" for n in names]
        if sorted(kinds) != ["conventional", "other"]:
            errors.append(
                f"runs.{names[-1]}.decode: true pairs one conventional and one other run of a scale "
                f"(Table 12); scale {raw['runs'][names[0]]['scale']!r} has {', '.join(names)} "
                f"({', '.join(kinds)})")
    baselines = {n: s["decode"] for n, s in raw["runs"].items() if isinstance(s.get("decode"), str)}
    for name, base in baselines.items():
        if base == name or base not in raw["runs"]:
            errors.append(f"runs.{name}.decode: {base!r} is not another run of the config "
                          "(a run's name: the baseline of its decode benchmark)")
            continue
        chain = [name]
        while base in baselines and base not in chain:
            chain.append(base)
            base = baselines[base]
        if base in chain:
            errors.append(f"runs.{name}.decode: baselines form a cycle ({' -> '.join([*chain, base])}); "
                          "a baseline is benchmarked, not compared")
    return errors


#: Output roots (relative to the working directory) and the config names below each of them.
OUTPUT_ROOTS = ("work", "results", "paper_figures", "logs")


def _escapes(root: str, parts: list[str]) -> str | None:
    """Where `root/parts...` resolves to, if a part is not one plain path component or the
    result is not inside `root/parts[0]` as resolved (followed symlinks included); else None.
    `root/parts[0]` itself (`work/EXP`: a plain name, the config cannot make it a link) may be
    a symlink the user made, to a scratch file system: what lies below it is confined to
    where it points."""
    plain = all(p not in ("", ".", "..") and Path(p).name == p and "\\" not in p for p in parts)
    top = (Path(root).resolve() / parts[0]).resolve()
    full = top.joinpath(*parts[1:]).resolve()
    if not plain or not (full == top or top in full.parents):
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
    named += [(f"runs.{r}", r, root, [RUNS, r]) for r in exp.runs for root in ("work", "results")]
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
    owners: dict[str, tuple[str, str, Any]] = {}  # output path, lower case -> (kind, key, value)
    for key, value, root, parts in named:
        if not isinstance(value, str) or not value:
            errors.append(f"{key}: {value!r} is not a name")
            continue
        where = _escapes(root, [name, *parts])
        if where:
            errors.append(f"{key}: {value!r} would put outputs at {where}, outside {root}/{name}/")
            continue
        # Two names one output: the same path from names of different kinds (a scale's decode
        # pair and a run's), or paths differing only in case (one file where the file system
        # ignores case, as macOS's and Windows' do).
        path = "/".join([root, name, *parts])
        kind = _name_kind(key)
        owner = owners.setdefault(path.lower(), (kind, key, value))
        if owner[0] != kind or owner[2] != value:
            why = " (names differing only in case are one file on macOS and Windows)" \
                if owner[2].lower() == value.lower() and owner[2] != value else ""
            errors.append(f"{key}: {value!r} and {owner[1]}: {owner[2]!r} both write {path}{why}; "
                          "rename one")
    return list(dict.fromkeys(errors))


def _name_kind(key: str) -> str:
    """What a config name names, for output collisions: a table or validation set listed under
    several runs or scales is one name; runs and scales are each their own."""
    last = key.rsplit(".", 1)[-1]
    return last if last in ("tables", "validation_sets", "tokenizer") else key.split(".", 1)[0]
