"""The external inputs of an experiment, planned: which hub repositories, datasets, task data
and local files its jobs read, and which `fetch` job gets each (plan time: no network, no cache
lookups). Fetching them is the `fetch` command's (shapelm.commands.fetch, whose docstring says
what each kind of input is and how it is fetched).

`experiment_inputs(exp)` lists the inputs; `record_path` is where a fetch job writes the record
later jobs depend on; `plan_notes` says, at `snakemake -n`, which inputs are not fetched yet.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: Files of a tokenizer repository the data and evaluation stages read.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
#: Files of a model repository the novelty analysis loads (safetensors weights only).
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", *TOKENIZER_FILES,
               "vocab.json", "merges.txt")
KINDS = ("model", "dataset", "task", "file")


@dataclass(frozen=True)
class Input:
    """One external input: `kind` model (a hub model repo), dataset (a hub dataset repo), task
    (lm-eval's `datasets.load_dataset(repo, config)`) or file (a local file placed by hand)."""

    name: str
    kind: str
    repo: str  # hub id, or the local path of a `file`
    needed_by: str
    revision: str | None = None
    include: tuple[str, ...] = ()  # allow-patterns of a repo download (all files if empty)
    config: str | None = None  # a task dataset's configuration
    hint: str = ""  # where a `file` comes from

    def args(self) -> list[str]:
        """The `shapelm fetch` arguments that fetch this input."""
        out = ["--kind", self.kind, "--repo", self.repo, "--name", self.name, "--needed-by", self.needed_by]
        for flag, value in (("--revision", self.revision), ("--config", self.config), ("--hint", self.hint)):
            if value:
                out += [flag, value]
        for pattern in self.include:
            out += ["--include", pattern]
        return out


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.replace("/", "--")).strip("-")


def is_hub_id(spec: str) -> bool:
    """``owner/name`` (``@rev`` allowed) that is not a local path: a hub repository."""
    from shapelm.data.tokenizer import split_revision

    repo, _ = split_revision(str(spec))
    return (repo.count("/") == 1 and not repo.startswith((".", "/", "~"))
            and not Path(str(spec)).expanduser().exists())


def tokenizer_input(spec: str, needed_by: str) -> Input | None:
    """The fetch of a tokenizer spec, or None (a local file, the default corpus' tokenizer)."""
    from shapelm.data.tokenizer import split_revision

    if not spec or str(spec).startswith("default") or not is_hub_id(spec):
        return None
    repo, revision = split_revision(str(spec))
    return Input(f"tokenizer-{slug(repo)}" + (f"-{slug(revision)}" if revision else ""), "model", repo,
                 needed_by, revision, TOKENIZER_FILES)


def model_input(repo: str, needed_by: str) -> Input:
    return Input(f"model-{slug(repo)}", "model", repo, needed_by, include=MODEL_FILES)


def longctx_input(key: str, spec: str, split: str | None, needed_by: str) -> Input | None:
    """The fetch of a long-context input spec (``hf:``, ``datasets:``, a local path), or None
    for an input that is there (a local file or directory that exists)."""
    from shapelm.longctx.inputs import parse_hub
    from shapelm.longctx.sources import DATASETS_PREFIX

    spec = str(spec)
    if spec.startswith(DATASETS_PREFIX):
        target = spec[len(DATASETS_PREFIX):]
        if target.startswith("hf:"):
            spec = target
        elif is_hub_id(target.partition(":")[0]):
            path, _, config = target.partition(":")
            return Input(f"{key}-{slug(target)}", "task", path, needed_by, config=config or None)
        else:
            return None
    hub = parse_hub(spec)
    if hub is None:
        if Path(spec).expanduser().exists():
            return None
        return Input(f"{key}-file", "file", spec, needed_by, hint=LOCAL_FILE_HINTS.get(key, ""))
    repo, sub = hub
    prefix = f"{sub}/" if sub else ""
    include = (f"{prefix}{split}/*", f"{prefix}{split}-*", f"{prefix}{split}.*", f"{prefix}{split}_*") \
        if split else (f"{prefix}*",)
    return Input(f"{key}-{slug(repo)}", "dataset", repo, needed_by, include=include)


#: Where the long-context inputs that are files (not hub repositories) come from.
LOCAL_FILE_HINTS = {
    "essays": "RULER's scripts/data/synthetic/json/download_paulgraham_essay.py writes PaulGrahamEssays.json",
    "squad": "SQuAD v2 dev-v2.0.json (RULER's download_qa_dataset.sh), or set hf:rajpurkar/squad_v2/squad_v2",
    "hotpotqa": "hotpot_dev_distractor_v1.json (RULER's download_qa_dataset.sh), or set "
                "hf:hotpotqa/hotpot_qa/distractor",
    "words": "a word list, one word a line",
}


def task_input(task: str, needed_by: str) -> Input | None:
    """lm-eval's dataset of a task shapelm knows (its `hub` default), or None (generated data)."""
    from shapelm.evaluation.tasks import SPECS

    spec = SPECS.get(task)
    if spec is None or not spec.hub:
        return None
    path, _, config = spec.hub.partition(":")
    return Input(f"task-{slug(spec.hub)}", "task", path, needed_by, config=config or None)


def fetching(exp) -> bool:
    """Whether the experiment reads hub inputs: not the tiny default (its corpus stands in for
    them and no hub is assumed) nor a rehearsal (its inputs are made on this machine)."""
    rehearsal = exp.raw.get("rehearsal") or exp.name == "rehearsal"  # rehearsal_config's name for its copy
    return exp.section("data").get("source", "default") != "default" and not rehearsal


def fetched_by_job(exp, key: str, spec: str) -> bool:
    """Whether a `fetch` job of the workflow stands for long-context input `key` (not there
    yet, or there): the plan-time checks then do not look for it."""
    from shapelm.longctx.inputs import INPUT_SPLITS

    return fetching(exp) and longctx_input(key, str(spec), INPUT_SPLITS.get(key), "") is not None


def experiment_inputs(exp) -> dict[str, Input]:
    """{name: Input} of every external input the experiment's jobs read (see the module
    docstring); {} where :func:`fetching` is false. Reads no data and asks no server."""
    if not fetching(exp):
        return {}
    found: dict[str, Input] = {}

    def add(inp: Input | None) -> None:
        if inp is not None and inp.name not in found:
            found[inp.name] = inp

    for tok, who in _tokenizers(exp):
        add(tokenizer_input(tok, who))
    for key, spec, split, who in _longctx_specs(exp):
        add(longctx_input(key, spec, split, who))
    for task, who in _tasks(exp):
        add(task_input(task, who))
    for repo in novelty_models(exp).values():
        add(model_input(repo, "Tapered Figure 4's novelty analysis"))
    return found


def _tokenizers(exp) -> list[tuple[str, str]]:
    from shapelm.data import choices as data_choices

    out = [(data_choices.source_tokenizer(exp.section("data")), "data (the slicer's source tokenizer)")]
    for scale in dict.fromkeys(exp.run(r)["scale"] for r in exp.runs):
        data = data_choices.scale_data(exp.raw, scale)
        out.append((data_choices.source_tokenizer(data), f"scale {scale}"))
        out.append((data_choices.run_tokenizer(data), f"scale {scale} (data.tokenizer)"))
    return out


def _longctx_specs(exp) -> list[tuple[str, str, str | None, str]]:
    from shapelm.longctx.inputs import INPUT_SPLITS
    from shapelm.longctx.plan import longctx_settings, needed_inputs

    if not any(exp.run(r)["longctx"] for r in exp.runs):
        return []
    settings = longctx_settings(exp)
    need = needed_inputs(settings)
    out = []
    for key, what in need.items():
        if settings.get(key):
            out.append((key, str(settings[key]), INPUT_SPLITS.get(key), f"longctx.{key} ({what})"))
    if settings.get("words"):
        out.append(("words", str(settings["words"]), None, "longctx.words"))
    return out


def _tasks(exp) -> list[tuple[str, str]]:
    return [(task, f"eval.tasks of run {run}") for run in exp.runs for task in hub_tasks(exp, run)]


def hub_tasks(exp, run: str) -> list[str]:
    """The tasks `run` evaluates on their hub datasets (not on stand-ins or given files)."""
    from shapelm.evaluation.standins import standin_tasks
    from shapelm.evaluation.tasks import expand_task_names

    ev = exp.run(run)["eval"]
    local = set(standin_tasks(ev.get("standin_tasks", []))) | set(ev.get("task_data", {}))
    return [t for t in expand_task_names(ev.get("tasks", ["olmo"])) if t not in local]


def novelty_models(exp) -> dict[str, str]:
    """{name: hub repo} of the GPT-2 family the novelty analysis runs on: all of it where the
    experiment fetches its inputs, else the members already cached here."""
    from shapelm.analysis.hub import GPT2_FAMILY, cached_family

    if not any("tapered_fig4_novelty" in exp.run(r)["tables"] for r in exp.runs):
        return {}
    cached = cached_family()
    if not fetching(exp):
        return cached
    return {name: cached.get(name, ids[-1]) for name, ids in GPT2_FAMILY.items()}


def record_path(work_dir: str | os.PathLike, inp: Input | str) -> Path:
    """Where the fetch job of `inp` writes its record (the file later jobs depend on)."""
    return Path(work_dir) / "inputs" / f"{inp if isinstance(inp, str) else inp.name}.json"


def plan_notes(exp, work_dir: str | os.PathLike) -> list[str]:
    """One line per input not fetched yet: which job will fetch it."""
    notes = []
    for name, inp in experiment_inputs(exp).items():
        if record_path(work_dir, name).is_file():
            continue
        if inp.kind == "file":
            notes.append(f"{inp.repo} ({inp.needed_by}): not there; job fetch (input={name}) fails until it "
                         f"is placed there ({inp.hint or 'no hub repository holds it'})")
        else:
            notes.append(f"{inp.repo} ({inp.needed_by}): will be fetched by job fetch (input={name})")
    return notes
