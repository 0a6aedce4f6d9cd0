"""shapelm's downstream tasks as lm-eval tasks: lm-eval's stock tasks where OLMo's protocol is
the same, generated YAMLs where it differs.

``write_tasks(out_dir, tasks, task_data)`` writes one YAML per task into ``out_dir``; lm-eval then
loads them with ``--include_path out_dir`` (or ``TaskManager(include_path=out_dir)``).

* A task whose protocol is lm-eval's own (``piqa``, ``hellaswag``, ``winogrande``,
  ``lambada_openai``, ``wikitext``) keeps lm-eval's name and YAML: the file written is
  ``include: <lm-eval's YAML>`` plus, when local data are given, the dataset lines.
* A task whose protocol differs (split, prompt, or a metric lm-eval lacks: OLMo's ce_loss) is
  rendered from ``templates/`` as ``shapelm_<name>`` so it never shadows lm-eval's stock task of
  the same name; the differences are listed in docs/EVALUATION.md.
* Any other lm-eval task name (``openbookqa``...) runs as lm-eval defines it, from the HF cache.

Multiple-choice accuracy is lm-eval's ``acc`` and ``acc_norm`` in every case: lm-eval 0.4.x's
``acc_norm`` divides the log-likelihood by the characters of the choice without the target
delimiter, which is OLMo's ``len_norm``.

``task_data`` maps a task name to its data: a local ``.jsonl``/``.json`` file (one example per
line, in the hub dataset's own schema) or a hub id ``path[:config][@split]``; tasks not in the
mapping use their default hub id (needs the HF datasets cache or network). A local file is named
relative to the task YAML's directory (``shapelm_task_fns.local_dataset`` opens it from there),
so a folder holding both can move. Stand-in data (``shapelm.evaluation.standins``) runs under the
task's name plus ``_standin`` (``piqa_standin``): never under a stock task's name, which a reader
would take for the benchmark.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

import yaml

from shapelm import files
from shapelm.errors import EvalError

HERE = Path(__file__).parent
FNS_FILE = "shapelm_task_fns.py"
PREFIX = "shapelm_"
STANDIN = "_standin"  # lm-eval's name of a task run on stand-in data: piqa_standin
STANDIN_FILE = ".standin.jsonl"  # how a stand-in data file is named (shapelm.evaluation.standins)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    template: str  # templates/<template>.yaml ("" for a stock task)
    fn: str  # function prefix in shapelm_task_fns.py
    hub: str  # default hub dataset: path[:config]
    split: str
    kind: str  # "acc" (counts in Avg Acc), "ce" (counts in Avg PPL), "ppl" (reported only)
    primary: str  # the metric the paper reports ("" for a stock task not in SPECS: chosen from its output)
    description: str
    stock: str = ""  # lm-eval's task of the same protocol, run under its own name
    stock_yaml: str = ""  # its YAML, relative to lm_eval/tasks/

    @property
    def lm_eval_name(self) -> str:
        return self.stock or PREFIX + self.name


def _stock(name, stock, stock_yaml, hub, split, kind, primary, description):
    return TaskSpec(name, "", "", hub, split, kind, primary, description, stock, stock_yaml)


SPECS: dict[str, TaskSpec] = {
    s.name: s
    for s in [
        # OLMo's / the Hourglass paper's Table 7 set
        TaskSpec("arc_easy", "mc", "arc", "allenai/ai2_arc:ARC-Easy", "validation", "acc", "acc",
                 "ARC-Easy, Question/Answer prompt, validation split, raw log-likelihood"),
        _stock("hellaswag", "hellaswag", "hellaswag/hellaswag.yaml", "Rowan/hellaswag", "validation",
               "acc", "acc_norm", "HellaSwag (lm-eval's task = OLMo's preprocessing), per-character normalised"),
        _stock("piqa", "piqa", "piqa/piqa.yaml", "baber/piqa", "validation", "acc", "acc_norm",
               "PIQA (lm-eval's task), Question/Answer prompt, per-character normalised"),
        TaskSpec("sciq", "mc", "sciq", "allenai/sciq", "validation", "acc", "acc",
                 "SciQ with support passage, validation split, raw log-likelihood"),
        TaskSpec("commonsense_qa", "mc", "arc", "tau/commonsense_qa", "validation", "acc", "acc_norm",
                 "CommonsenseQA, ARC-style prompt, per-character normalised"),
        TaskSpec("trivia_qa", "ce", "triviaqa", "mandarjoshi/trivia_qa:rc.wikipedia.nocontext",
                 "validation", "ce", "ce_loss", "TriviaQA answer CE per character"),
        TaskSpec("natural_qs", "ce", "nq", "google-research-datasets/nq_open", "validation", "ce",
                 "ce_loss", "Natural Questions (open) answer CE per character"),
        # Tapered's set (the same protocol where it applies)
        TaskSpec("arc_challenge", "mc", "arc", "allenai/ai2_arc:ARC-Challenge", "validation", "acc",
                 "acc_norm", "ARC-Challenge, Question/Answer prompt, validation split, per-character normalised"),
        _stock("winogrande", "winogrande", "winogrande/default.yaml", "allenai/winogrande:winogrande_xl",
               "validation", "acc", "acc", "WinoGrande (lm-eval's task), partial scoring of the shared suffix"),
        TaskSpec("social_iqa", "mc", "siqa", "lighteval/siqa", "validation", "acc", "acc_norm",
                 "Social IQa, Question/Answer prompt, per-character normalised"),
        TaskSpec("boolq", "mc", "boolq", "google/boolq", "validation", "acc", "acc",
                 "BoolQ passage/question, yes/no"),
        _stock("lambada", "lambada_openai", "lambada/lambada_openai.yaml", "EleutherAI/lambada_openai:default",
               "test", "acc", "acc", "LAMBADA (OpenAI; lm-eval's task) last-word accuracy; perplexity beside"),
        _stock("wikitext", "wikitext", "wikitext/wikitext.yaml",
               "EleutherAI/wikitext_document_level:wikitext-2-raw-v1", "test", "ppl", "word_perplexity",
               "WikiText-2 document word perplexity (lm-eval's task)"),
        # generated from held-out text by `shapelm eval make-tasks`
        TaskSpec("heldout_mc", "mc", "generic_mc", "", "validation", "acc", "acc",
                 "held-out next-line multiple choice (make-tasks)"),
        TaskSpec("heldout_ce", "ce", "generic_ce", "", "validation", "ce", "ce_loss",
                 "held-out gold continuation CE per character (make-tasks)"),
    ]
}
# lm-eval's own names of the stock tasks above ("lambada_openai" is shapelm's "lambada")
ALIASES = {s.stock: s.name for s in SPECS.values() if s.stock and s.stock != s.name}

OLMO_TASKS = ["arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa", "trivia_qa", "natural_qs"]
TAPERED_TASKS = ["wikitext", "lambada", "piqa", "hellaswag", "winogrande", "arc_easy",
                 "arc_challenge", "social_iqa", "boolq"]
HELDOUT_TASKS = ["heldout_mc", "heldout_ce"]
TASK_SETS = {"olmo": OLMO_TASKS, "tapered": TAPERED_TASKS, "heldout": HELDOUT_TASKS}


def lm_eval_tasks_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


# A `task:`, `group:` or `tag:` key of lm-eval's task configs (quoted or not, or a list item's),
# and the plain names of a list below one.
_TASK_KEY = re.compile(r"""^\s*(?:-\s+)?["']?(task|group|tag)["']?\s*:[ \t]*(.*)$""")
_TASK_ITEM = re.compile(r"""^\s*-\s+["']?([^\s:"'#\[\]{}]+)["']?\s*(?:#.*)?$""")
_NOT_TASK_CONFIGS = (".py", ".pyc", ".md", ".txt", ".json", ".jsonl", ".csv", ".tsv")


@functools.lru_cache(maxsize=1)
def stock_task_names() -> frozenset[str]:
    """Every task, group and tag lm-eval ships, read off its task configs' text in about a
    second: lm-eval's own index (`TaskManager`) parses every config and takes minutes on a busy
    machine, which a typo in a config would cost at `snakemake -n`. A superset: names that only
    a template mentions pass here and fail in lm-eval itself."""
    names: set[str] = set()
    for dirpath, _, filenames in os.walk(lm_eval_tasks_dir()):
        for filename in filenames:
            if filename.endswith(_NOT_TASK_CONFIGS):
                continue
            try:
                lines = Path(dirpath, filename).read_text(encoding="utf-8").splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            for i, line in enumerate(lines):
                key = _TASK_KEY.match(line)
                if not key:
                    continue
                value = key.group(2).split("#")[0].strip()
                if value.startswith("["):
                    names.update(v.strip().strip("\"'") for v in value.strip("[]").split(",") if v.strip())
                elif value:
                    names.add(value.strip("\"'"))
                else:
                    for item in map(_TASK_ITEM.match, lines[i + 1:]):
                        if not item:
                            break
                        names.add(item.group(1))
    return frozenset(names)


def spec_for(name: str) -> TaskSpec:
    """shapelm's spec of a task, or a pass-through spec for another stock lm-eval task."""
    if name in SPECS:
        return SPECS[name]
    return TaskSpec(name, "", "", "", "", "acc", "", f"lm-eval's stock task {name}", stock=name)


def expand_task_names(names: list[str]) -> list[str]:
    """Task names and set names ('olmo', 'tapered', 'heldout'), with or without the prefix, lm-eval's
    names of the stock tasks ('lambada_openai'), or any other task lm-eval ships."""
    out: list[str] = []
    for raw in names:
        for n in str(raw).split(","):
            n = n.strip()
            if not n:
                continue
            n = n.removeprefix(PREFIX)
            n = ALIASES.get(n, n)
            found = TASK_SETS.get(n, [n])
            for t in found:
                if t not in SPECS and t not in stock_task_names():
                    raise EvalError(f"unknown task {t!r}: neither shapelm's ({', '.join(SPECS)}; "
                                    f"sets {', '.join(TASK_SETS)}) nor one lm-eval ships")
                if t not in out:
                    out.append(t)
    return out


def task_name(spec: TaskSpec, source: str | None) -> str:
    """The name lm-eval runs a task under: its own, or with ``_standin`` on stand-in data."""
    return spec.lm_eval_name + (STANDIN if source and str(source).endswith(STANDIN_FILE) else "")


def _looks_local(value: str) -> bool:
    return value.endswith((".jsonl", ".json")) or value.startswith((".", "/", "~")) or os.path.exists(value)


# A Hugging Face dataset id, optionally `:config` and `@split`: what a non-local source may be.
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?"
                    r"(:[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?(@[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?")


def task_source_problem(source: str) -> str | None:
    """Why `source` cannot be a task's data (None if it can): it must be an existing local
    .jsonl/.json file or a hub id (`org/name[:config][@split]`), one line of text."""
    if not isinstance(source, str) or not source:
        return f"{source!r} is neither a local .jsonl/.json file nor a hub id"
    if any(ord(c) < 32 or ord(c) == 127 for c in source):
        return f"{source[:60]!r} holds a control character; give a file path or a hub id"
    if _looks_local(source):
        path = Path(source).expanduser()
        return None if path.is_file() else f"file {path.resolve()} does not exist"
    if HUB_ID.fullmatch(source):
        return None
    return f"{source[:60]!r} is neither an existing local .jsonl/.json file nor a hub id (org/name[:config][@split])"


def count_examples(path: Path) -> int:
    if path.suffix == ".jsonl":
        with open(path) as f:
            return sum(1 for line in f if line.strip())
    data = json.loads(path.read_text() or "null")
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    return len(data) if isinstance(data, list) else 0


def dataset_keys(spec: TaskSpec, source: str | None, base: str | os.PathLike | None = None) -> dict:
    """The dataset keys of a task YAML for a local file (named relative to ``base``, the YAML's
    directory) or a hub id.

    A stock task's YAML is included and these keys override it, so they also switch off the
    splits it names that the given data lack (zero-shot: no training split is read).
    """
    if source is None:
        if not spec.hub:
            raise EvalError(f"task {spec.name}: no data given (it has no hub default); "
                            f"pass --task-data {spec.name}=FILE.jsonl")
        source = spec.hub
    problem = task_source_problem(source)
    if problem:
        raise EvalError(f"task {spec.name}: task data {problem}")
    unset = {"training_split": None, "fewshot_split": None} if spec.stock else {}
    stock_null = {"dataset_name": None} if spec.stock else {}
    if _looks_local(source):
        path = Path(source).expanduser().resolve()
        if count_examples(path) == 0:
            raise EvalError(f"task {spec.name}: task data file {path} is an empty dataset (no examples)")
        name = os.path.relpath(path, Path(base).resolve()) if base is not None else str(path)
        return {"dataset_path": "json", **stock_null,
                "dataset_kwargs": {"data_files": {"validation": name}},
                "validation_split": "validation", **({"test_split": None} if spec.stock else {}), **unset}
    split = spec.split
    if "@" in source:
        source, split = source.rsplit("@", 1)
    path, _, name = source.partition(":")
    keys = {"dataset_path": path, **({"dataset_name": name} if name else stock_null)}
    if split == "test":
        keys["test_split"] = split
    else:
        keys["validation_split"] = split
        if spec.stock:
            keys["test_split"] = None
    return {**keys, **unset}


def dataset_block(spec: TaskSpec, source: str | None, base: str | os.PathLike | None = None) -> str:
    """`dataset_keys` as YAML lines, written by the YAML dumper: no value is formatted into the
    file as text, so a value can add no key of its own (lm-eval renders some keys as Jinja). A
    local file is read by the tasks' own loader, which finds a relative name beside the YAML (a
    constant line: the dumper writes no `!function` tag)."""
    keys = dataset_keys(spec, source, base)
    block = yaml.safe_dump(keys, sort_keys=False, allow_unicode=False, default_flow_style=False,
                           width=float("inf")).rstrip("\n")
    if keys.get("dataset_path") == "json" and "dataset_kwargs" in keys:
        block += f"\ncustom_dataset: !function {FNS_FILE[:-3]}.local_dataset"
    return block


def render_task(spec: TaskSpec, source: str | None, base: str | os.PathLike | None = None) -> str:
    if spec.stock:
        yaml_path = lm_eval_tasks_dir() / spec.stock_yaml
        if not yaml_path.is_file():
            raise EvalError(f"task {spec.name}: lm-eval's {spec.stock_yaml} is missing from {yaml_path.parent}")
        head = yaml.safe_dump({"include": str(yaml_path), "task": task_name(spec, source)},
                              sort_keys=False, width=float("inf"))
        data = f"{dataset_block(spec, source, base)}\n" if source else ""
        return (f"# lm-eval's stock task {spec.stock} ({spec.description}); generated by shapelm, "
                f"do not edit.\n{head}{data}")
    template = Template((HERE / "templates" / f"{spec.template}.yaml").read_text())
    return template.substitute(
        name=spec.name, task=task_name(spec, source), fn=spec.fn, primary=spec.primary,
        description=spec.description, dataset=dataset_block(spec, source, base),
    )


def parse_task_data(items: list[str] | dict | None) -> dict[str, str]:
    """``["name=FILE_OR_HUB", ...]`` or a JSON/YAML mapping file -> {name: source}."""
    if not items:
        return {}
    if isinstance(items, dict):
        out = {}
        for k, v in items.items():
            k = k.removeprefix(PREFIX)
            out[ALIASES.get(k, k)] = str(v)
        return out
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            p = Path(item)
            if p.is_file() and p.suffix in (".json", ".yaml", ".yml"):
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
    """Write a YAML per shapelm task (+ the functions file); return the lm-eval task names
    (``piqa_standin`` where the data is a stand-in).

    Stock tasks lm-eval ships that shapelm has no spec for get no file (lm-eval's own YAML runs)
    and cannot take local data.
    """
    task_data = dict(task_data or {})
    names = expand_task_names(tasks)
    unknown = sorted(set(task_data) - set(SPECS))
    if unknown:
        raise EvalError(f"--task-data names task(s) shapelm cannot redirect to other data: "
                        f"{', '.join(unknown)} (known: {', '.join(SPECS)})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files.copy(HERE / FNS_FILE, out / FNS_FILE)
    written = []
    for name in names:
        spec = spec_for(name)
        lm_name = task_name(spec, task_data.get(name))
        if name in SPECS:
            files.write_text(out / f"{lm_name}.yaml", render_task(spec, task_data.get(name), out))
        written.append(lm_name)
    return written
