"""`shapelm eval make-tasks`: small downstream tasks cut from held-out text.

For the tiny default pipeline and the tests. From held-out documents (a token directory decoded
with its tokenizer, a text file, or a directory of text files) it writes, deterministically:

* ``heldout_mc.jsonl``: ``{"context", "choices", "gold"}``: context = the sentences of a real
  passage before a cut, choices = the true next sentence and distractor sentences drawn from
  other documents (of similar length, so length alone does not give the answer away);
* ``heldout_ce.jsonl``: ``{"context", "answer"}``: a passage prefix and its true continuation,
  scored as OLMo's ce_loss per character.

and the two task YAMLs (``shapelm_heldout_mc``, ``shapelm_heldout_ce``) that lm-eval runs exactly
like the real tasks; with ``--standins``, stand-in data for the papers' own tasks in their hub
schemas (``shapelm.evaluation.standins``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shapelm.files import atomic_open, write_json
from shapelm.evaluation.examples import load_documents, make_examples
from shapelm.evaluation.loading import EvalError, TextTokenizer
from shapelm.evaluation.standins import make_standins, standin_path, standin_tasks
from shapelm.evaluation.tasks import write_tasks

def write_jsonl(path: Path, rows: list[dict]) -> None:
    with atomic_open(path) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def make_tasks(sources: list[str], out_dir: str | os.PathLike, tokenizer=None, n_mc: int = 200,
               n_ce: int = 200, n_choices: int = 4, seed: int = 1234,
               standins: list[str] | None = None) -> dict:
    """The held-out tasks (their files mapped in task_data.json) and, for each task or set in
    ``standins``, its stand-in data (n_mc items each, ``shapelm.evaluation.standins``; mapped in
    standin_data.json)."""
    standins = standin_tasks(standins or [])  # a name without a stand-in fails before any work
    tok = None
    if tokenizer is not None:
        tok = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer.load(tokenizer)
    docs: list[str] = []
    for s in sources:
        docs.extend(load_documents(s, tok))
    if not docs:
        raise EvalError(f"{', '.join(map(str, sources))}: empty dataset (no documents)")
    mc, ce = make_examples(docs, n_mc, n_ce, n_choices, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "heldout_mc.jsonl", mc)
    write_jsonl(out / "heldout_ce.jsonl", ce)
    task_data = {"heldout_mc": str((out / "heldout_mc.jsonl").resolve()),
                 "heldout_ce": str((out / "heldout_ce.jsonl").resolve())}
    standin_data = {}
    for task, rows in make_standins(standins, docs, n_mc, seed).items():
        path = standin_path(out, task)
        write_jsonl(path, rows)
        standin_data[task] = str(path.resolve())
    names = write_tasks(out, ["heldout_mc", "heldout_ce", *standins], {**task_data, **standin_data})
    info = {"sources": [str(s) for s in sources], "seed": seed, "n_choices": n_choices,
            "n_mc": len(mc), "n_ce": len(ce), "task_data": task_data, "standin_data": standin_data,
            "lm_eval_tasks": names}
    # kept apart: a run evaluates on stand-ins only for the tasks it names (eval.standin_tasks)
    write_json(out / "standin_data.json", standin_data)
    write_json(out / "task_data.json", task_data)
    write_json(out / "make_tasks.json", info)
    return info
