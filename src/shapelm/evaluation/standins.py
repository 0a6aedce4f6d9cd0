"""Stand-in data for the papers' downstream tasks, cut from held-out text.

Where the hub's datasets cannot be reached (the tiny default, the rehearsal), `shapelm eval
make-tasks --standins tapered` writes, for each task, a ``<task>.standin.jsonl`` in the hub
dataset's own schema, so lm-eval runs the real task on it: its YAML, prompt, preprocessing,
request type and metric (PIQA's two solutions, WinoGrande's partial scoring, LAMBADA's last word,
WikiText's rolling word perplexity). The questions are about our text, not the benchmark's: every
multiple-choice item asks which sentence really came next in a held-out passage (distractors from
other documents, as ``heldout_mc``), WinoGrande which word filled a blank, BoolQ whether a sentence
came next, LAMBADA the last word of a passage, WikiText the words of whole held-out documents.
The numbers show the task runs and the model learned the text; they are not the benchmark's, and
the tables say which columns stand in (``is_standin``).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Callable

from shapelm.errors import EvalError
from shapelm.evaluation.examples import make_examples
from shapelm.evaluation.tasks import STANDIN_FILE as SUFFIX
LETTERS = "ABCDE"
_WORD = re.compile(r"[A-Za-z]{4,}")
_TRAILING = re.compile(r"[^\w]+$")
WIKITEXT_MAX_CHARS = 4000  # a page's share of the tiny evaluation time stays bounded


def is_standin(path: str | None) -> bool:
    """Whether a task's data file is a stand-in written here (downstream.json records it)."""
    return bool(path) and str(path).endswith(SUFFIX)


def standin_path(out_dir: str | Path, task: str) -> Path:
    return Path(out_dir) / f"{task}{SUFFIX}"


# Each builder: (mc examples with n choices, ce examples, documents, rng) -> rows in the hub schema.
MC = list[dict]


def _arc(mc: MC, ce, docs, rng) -> list[dict]:
    return [{"question": ex["context"], "choices": {"text": ex["choices"], "label": list(LETTERS[:len(ex["choices"])])},
             "answerKey": LETTERS[ex["gold"]]} for ex in mc]


def _piqa(mc: MC, ce, docs, rng) -> list[dict]:
    return [{"goal": ex["context"], "sol1": ex["choices"][0], "sol2": ex["choices"][1], "label": ex["gold"]}
            for ex in mc]


def _hellaswag(mc: MC, ce, docs, rng) -> list[dict]:
    return [{"activity_label": "Passage", "ctx_a": ex["context"], "ctx_b": "", "endings": ex["choices"],
             "label": str(ex["gold"])} for ex in mc]


def _sciq(mc: MC, ce, docs, rng) -> list[dict]:
    rows = []
    for ex in mc:
        wrong = [c for i, c in enumerate(ex["choices"]) if i != ex["gold"]]
        rows.append({"support": ex["context"], "question": "Which sentence comes next?",
                     "distractor1": wrong[0], "distractor2": wrong[1], "distractor3": wrong[2],
                     "correct_answer": ex["choices"][ex["gold"]]})
    return rows


def _siqa(mc: MC, ce, docs, rng) -> list[dict]:
    return [{"context": ex["context"], "question": "What comes next?", "answerA": ex["choices"][0],
             "answerB": ex["choices"][1], "answerC": ex["choices"][2], "label": str(ex["gold"] + 1)}
            for ex in mc]


def _boolq(mc: MC, ce, docs, rng) -> list[dict]:
    rows = []
    for ex in mc:
        answer = rng.random() < 0.5
        pick = ex["gold"] if answer else next(i for i in range(len(ex["choices"])) if i != ex["gold"])
        question = _TRAILING.sub("", ex["choices"][pick]) or ex["choices"][pick]
        rows.append({"passage": ex["context"], "question": question, "answer": answer})
    return rows


def _lambada(mc, ce: list[dict], docs, rng) -> list[dict]:
    rows = []
    for ex in ce:
        sentence = _TRAILING.sub("", ex["answer"])
        last = sentence.rsplit(" ", 1)[-1]
        if " " in sentence and re.fullmatch(r"\w+", last):
            rows.append({"text": f"{ex['context']} {sentence}".strip()})
    return rows


def _triviaqa(mc, ce: list[dict], docs, rng) -> list[dict]:
    return [{"question": ex["context"], "answer": {"value": ex["answer"], "aliases": [ex["answer"]]}} for ex in ce]


def _nq(mc, ce: list[dict], docs, rng) -> list[dict]:
    return [{"question": ex["context"], "answer": [ex["answer"]]} for ex in ce]


def _winogrande(mc, ce: list[dict], docs, rng) -> list[dict]:
    """A word of the true next sentence blanked; option: it or a word of another document."""
    pool = sorted({w for d in docs for w in _WORD.findall(d)})
    rows = []
    for ex in ce:
        words = ex["answer"].split(" ")
        spots = [i for i, w in enumerate(words[:-2]) if _WORD.fullmatch(w)]
        if not spots or len(pool) < 2:
            continue
        i = rng.choice(spots)
        other = words[i]
        while other == words[i]:
            other = rng.choice(pool)
        options = [words[i], other] if rng.random() < 0.5 else [other, words[i]]
        sentence = " ".join(filter(None, [ex["context"], *words[:i], "_", *words[i + 1:]]))
        rows.append({"sentence": sentence, "option1": options[0], "option2": options[1],
                     "answer": "1" if options[0] == words[i] else "2"})
    return rows


def _wikitext(mc, ce, docs: list[str], rng) -> list[dict]:
    pages = [d.strip()[:WIKITEXT_MAX_CHARS] for d in docs if len(d.split()) >= 20]
    rng.shuffle(pages)
    return [{"page": p} for p in pages]


# task -> (choices per multiple-choice item, builder); 0 choices: built from ce examples / documents
BUILDERS: dict[str, tuple[int, Callable]] = {
    "arc_easy": (4, _arc), "arc_challenge": (4, _arc), "commonsense_qa": (5, _arc),
    "piqa": (2, _piqa), "hellaswag": (4, _hellaswag), "sciq": (4, _sciq), "social_iqa": (3, _siqa),
    "boolq": (2, _boolq), "lambada": (0, _lambada), "trivia_qa": (0, _triviaqa), "natural_qs": (0, _nq),
    "winogrande": (0, _winogrande), "wikitext": (0, _wikitext),
}


def standin_tasks(names: list[str]) -> list[str]:
    """Task and set names (as `--tasks` takes them) -> the tasks, each one a stand-in exists for."""
    from shapelm.evaluation.tasks import TASK_SETS

    out = []
    for raw in names:
        for name in TASK_SETS.get(raw, [raw]):
            if name not in BUILDERS:
                raise EvalError(f"no stand-in data for task {name!r}: stand-ins exist for "
                                f"{', '.join(BUILDERS)} and the sets olmo, tapered")
            if name not in out:
                out.append(name)
    return out


def make_standins(tasks: list[str], docs: list[str], n: int, seed: int) -> dict[str, list[dict]]:
    """{task: rows}: each task's items from its own shuffle of the documents (seed + its index in
    BUILDERS), so two tasks of the same form do not ask the same questions."""
    out = {}
    for task in standin_tasks(tasks):
        n_choices, build = BUILDERS[task]
        k = list(BUILDERS).index(task) + 1
        rng = random.Random(seed * 1000 + k)
        # some passages cannot make a LAMBADA / WinoGrande item (no plain last or middle word)
        mc, ce = make_examples(docs, n if n_choices else 1, 2 * n, max(n_choices, 2), seed=seed * 1000 + k)
        rows = build(mc, ce, docs, rng)[:n]
        if not rows:
            raise EvalError(f"held-out text too small for the {task} stand-in (no item could be cut)")
        out[task] = rows
    return out
