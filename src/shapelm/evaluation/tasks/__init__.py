"""shapelm's downstream tasks as lm-eval task YAMLs, generated at run time with chosen data.

``write_tasks(out_dir, task_data)`` renders the templates in ``templates/`` for the named tasks
and copies ``shapelm_task_fns.py`` beside them; lm-eval then loads them with
``--include_path out_dir`` (or ``TaskManager(include_path=out_dir)``). Each task is registered
in lm-eval as ``shapelm_<name>`` so it never shadows lm-eval's stock task of the same name
(which follows a different protocol: test splits, letter choices, exact match...).

``task_data`` maps a task name to its data: a local ``.jsonl``/``.json`` file (one example per
line, in the hub dataset's own schema) or a hub id ``path[:config][@split]``; tasks not in the
mapping use their default hub id (needs the HF datasets cache or network).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from string import Template

from shapelm.evaluation.loading import EvalError

HERE = Path(__file__).parent
FNS_FILE = "shapelm_task_fns.py"
PREFIX = "shapelm_"


@dataclass(frozen=True)
class TaskSpec:
    name: str
    template: str  # templates/<template>.yaml
    fn: str  # function prefix in shapelm_task_fns.py
    hub: str  # default hub dataset: path[:config]
    split: str
    kind: str  # "acc" (counts in Avg Acc), "ce" (counts in Avg PPL), "ppl" (reported only)
    primary: str  # the metric the paper reports
    description: str


SPECS: dict[str, TaskSpec] = {
    s.name: s
    for s in [
        # OLMo's / the seed paper's Table 7 set
        TaskSpec("arc_easy", "mc", "arc", "allenai/ai2_arc:ARC-Easy", "validation", "acc", "acc",
                 "ARC-Easy, Question/Answer prompt, raw log-likelihood"),
        TaskSpec("hellaswag", "mc", "hellaswag", "Rowan/hellaswag", "validation", "acc", "len_norm",
                 "HellaSwag, OLMo preprocessing, per-character normalised"),
        TaskSpec("piqa", "mc", "piqa", "ybisk/piqa", "validation", "acc", "len_norm",
                 "PIQA, Question/Answer prompt, per-character normalised"),
        TaskSpec("sciq", "mc", "sciq", "allenai/sciq", "validation", "acc", "acc",
                 "SciQ with support passage, raw log-likelihood"),
        TaskSpec("commonsense_qa", "mc", "arc", "tau/commonsense_qa", "validation", "acc", "len_norm",
                 "CommonsenseQA, ARC-style prompt, per-character normalised"),
        TaskSpec("trivia_qa", "ce", "triviaqa", "mandarjoshi/trivia_qa:rc.wikipedia.nocontext",
                 "validation", "ce", "ce_loss", "TriviaQA answer CE per character"),
        TaskSpec("natural_qs", "ce", "nq", "google-research-datasets/nq_open", "validation", "ce",
                 "ce_loss", "Natural Questions (open) answer CE per character"),
        # Tapered's set (the same protocol where it applies)
        TaskSpec("arc_challenge", "mc", "arc", "allenai/ai2_arc:ARC-Challenge", "validation", "acc",
                 "len_norm", "ARC-Challenge, Question/Answer prompt, per-character normalised"),
        TaskSpec("winogrande", "mc_multi_input", "winogrande", "allenai/winogrande:winogrande_xl",
                 "validation", "acc", "acc", "WinoGrande, partial scoring of the shared suffix"),
        TaskSpec("social_iqa", "mc", "siqa", "allenai/social_i_qa", "validation", "acc", "len_norm",
                 "Social IQa, Question/Answer prompt, per-character normalised"),
        TaskSpec("boolq", "mc", "boolq", "google/boolq", "validation", "acc", "acc",
                 "BoolQ passage/question, yes/no"),
        TaskSpec("lambada", "lambada", "lambada", "EleutherAI/lambada_openai:default", "test", "acc",
                 "acc", "LAMBADA (OpenAI) last-word accuracy; ppl reported beside"),
        TaskSpec("wikitext", "rolling", "wikitext", "EleutherAI/wikitext_document_level:wikitext-2-raw-v1",
                 "test", "ppl", "word_perplexity", "WikiText-2 document word perplexity"),
        # generated from held-out text by `shapelm eval make-tasks`
        TaskSpec("heldout_mc", "mc", "generic_mc", "", "validation", "acc", "acc",
                 "held-out next-line multiple choice (make-tasks)"),
        TaskSpec("heldout_ce", "ce", "generic_ce", "", "validation", "ce", "ce_loss",
                 "held-out gold continuation CE per character (make-tasks)"),
    ]
}

OLMO_TASKS = ["arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa", "trivia_qa", "natural_qs"]
TAPERED_TASKS = ["wikitext", "lambada", "piqa", "hellaswag", "winogrande", "arc_easy",
                 "arc_challenge", "social_iqa", "boolq"]
HELDOUT_TASKS = ["heldout_mc", "heldout_ce"]
TASK_SETS = {"olmo": OLMO_TASKS, "tapered": TAPERED_TASKS, "heldout": HELDOUT_TASKS}


def expand_task_names(names: list[str]) -> list[str]:
    """Task names and set names ('olmo', 'tapered', 'heldout'), with or without the prefix."""
    out: list[str] = []
    for raw in names:
        for n in str(raw).split(","):
            n = n.strip()
            if not n:
                continue
            if n.startswith(PREFIX):
                n = n[len(PREFIX):]
            found = TASK_SETS.get(n, [n])
            for t in found:
                if t not in SPECS:
                    raise EvalError(f"unknown task {t!r}; known: {', '.join(SPECS)} "
                                    f"and sets {', '.join(TASK_SETS)}")
                if t not in out:
                    out.append(t)
    return out


def _looks_local(value: str) -> bool:
    return value.endswith((".jsonl", ".json")) or value.startswith((".", "/", "~")) or os.path.exists(value)


def count_examples(path: Path) -> int:
    if path.suffix == ".jsonl":
        with open(path) as f:
            return sum(1 for line in f if line.strip())
    data = json.loads(path.read_text() or "null")
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    return len(data) if isinstance(data, list) else 0


def dataset_block(spec: TaskSpec, source: str | None) -> str:
    """The dataset lines of a task YAML for a local file or a hub id."""
    if source is None:
        if not spec.hub:
            raise EvalError(f"task {spec.name}: no data given (it has no hub default); "
                            f"pass --task-data {spec.name}=FILE.jsonl")
        source = spec.hub
    if _looks_local(source):
        path = Path(source).expanduser().resolve()
        if not path.is_file():
            raise EvalError(f"task {spec.name}: task data file {path} does not exist")
        if count_examples(path) == 0:
            raise EvalError(f"task {spec.name}: task data file {path} is an empty dataset (no examples)")
        return (
            "dataset_path: json\n"
            f"dataset_kwargs:\n  data_files:\n    validation: {json.dumps(str(path))}\n"
            "validation_split: validation"
        )
    split = spec.split
    if "@" in source:
        source, split = source.rsplit("@", 1)
    path, _, name = source.partition(":")
    lines = [f"dataset_path: {json.dumps(path)}"]
    if name:
        lines.append(f"dataset_name: {json.dumps(name)}")
    key = "test_split" if split == "test" else "validation_split"
    lines.append(f"{key}: {json.dumps(split)}")
    return "\n".join(lines)


def render_task(spec: TaskSpec, source: str | None) -> str:
    template = Template((HERE / "templates" / f"{spec.template}.yaml").read_text())
    return template.substitute(
        name=spec.name, task=PREFIX + spec.name, fn=spec.fn, primary=spec.primary,
        description=spec.description, dataset=dataset_block(spec, source),
    )


def parse_task_data(items: list[str] | dict | None) -> dict[str, str]:
    """``["name=FILE_OR_HUB", ...]`` or a JSON/YAML mapping file -> {name: source}."""
    if not items:
        return {}
    if isinstance(items, dict):
        return {k[len(PREFIX):] if k.startswith(PREFIX) else k: str(v) for k, v in items.items()}
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            p = Path(item)
            if p.is_file() and p.suffix in (".json", ".yaml", ".yml"):
                import yaml

                mapping = yaml.safe_load(p.read_text()) or {}
                if not isinstance(mapping, dict):
                    raise EvalError(f"--task-data {p}: expected a mapping task -> file or hub id")
                out.update(parse_task_data(mapping))
                continue
            raise EvalError(f"--task-data {item!r}: expected NAME=FILE_OR_HUB_ID or a mapping file")
        k, v = item.split("=", 1)
        out.update(parse_task_data({k.strip(): v.strip()}))
    return out


def write_tasks(out_dir: str | os.PathLike, tasks: list[str], task_data: dict[str, str] | None = None) -> list[str]:
    """Write ``shapelm_<task>.yaml`` for each task (+ the functions file); return lm-eval names."""
    task_data = dict(task_data or {})
    names = expand_task_names(tasks)
    unknown = sorted(set(task_data) - set(SPECS))
    if unknown:
        raise EvalError(f"--task-data names unknown task(s): {', '.join(unknown)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / FNS_FILE, out / FNS_FILE)
    written = []
    for name in names:
        text = render_task(SPECS[name], task_data.get(name))
        tmp = out / f".{PREFIX}{name}.yaml.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / f"{PREFIX}{name}.yaml")
        written.append(PREFIX + name)
    return written
