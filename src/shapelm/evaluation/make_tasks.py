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
import random
import re
from pathlib import Path

from shapelm.files import atomic_open
from shapelm.evaluation.loading import EvalError, TextTokenizer, atomic_write_json
from shapelm.evaluation.tasks import write_tasks

_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
MIN_CHARS, MAX_CHARS = 15, 300


def documents_from_token_dir(path: str | os.PathLike, tokenizer: TextTokenizer,
                             max_tokens: int = 2_000_000) -> list[str]:
    from shapelm.evaluation.ppl import open_token_dir

    store = open_token_dir(path)
    if store.n_tokens == 0:
        raise EvalError(f"held-out set {path}: empty dataset (0 tokens)")
    ids = store.read(0, min(store.n_tokens, max_tokens)).tolist()
    docs, cur = [], []
    for t in ids:
        if t == store.eos_id:
            if cur:
                docs.append(tokenizer.decode(cur))
            cur = []
        else:
            cur.append(t)
    if cur:
        docs.append(tokenizer.decode(cur))
    return docs


def documents_from_text(path: str | os.PathLike) -> list[str]:
    """A .txt file (documents separated by blank lines), a .jsonl with "text", or a directory."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.suffix in (".txt", ".jsonl", ".md"))
        if not files:
            raise EvalError(f"{p}: no .txt/.jsonl/.md files and no manifest.json (not a token dir)")
        return [d for f in files for d in documents_from_text(f)]
    if not p.is_file():
        raise EvalError(f"{p}: no such text file or token directory")
    text = p.read_text(errors="replace")
    if p.suffix == ".jsonl":
        return [json.loads(line)["text"] for line in text.splitlines() if line.strip()]
    return [d for d in re.split(r"\n\s*\n", text) if d.strip()]


def load_documents(source: str | os.PathLike, tokenizer: TextTokenizer | None) -> list[str]:
    p = Path(source)
    if (p / "manifest.json").is_file():
        if tokenizer is None:
            raise EvalError(f"{p} is a token directory: pass --tokenizer to decode it")
        return documents_from_token_dir(p, tokenizer)
    return documents_from_text(p)


def sentences(doc: str) -> list[str]:
    units = [" ".join(u.split()) for u in _SPLIT.split(doc)]
    return [u for u in units if MIN_CHARS <= len(u) <= MAX_CHARS]


def make_examples(docs: list[str], n_mc: int = 200, n_ce: int = 200, n_choices: int = 4,
                  context_chars: int = 400, seed: int = 1234):
    """(mc_examples, ce_examples) from documents; deterministic for a seed."""
    per_doc = [sentences(d) for d in docs]
    pool = [(i, s) for i, ss in enumerate(per_doc) for s in ss]
    cuts = [(i, j) for i, ss in enumerate(per_doc) for j in range(1, len(ss))]
    if not cuts or len({i for i, _ in pool}) < 2:
        raise EvalError(
            f"held-out text too small: {len(cuts)} sentence boundaries in {len(docs)} documents "
            "(need documents with at least two sentences, and at least two documents)"
        )
    rng = random.Random(seed)
    rng.shuffle(cuts)
    by_len = sorted(pool, key=lambda x: len(x[1]))

    def context(i: int, j: int) -> str:
        ctx = ""
        for s in reversed(per_doc[i][:j]):
            if ctx and len(ctx) + len(s) + 1 > context_chars:
                break
            ctx = s + (" " + ctx if ctx else "")
        return ctx

    def distractors(i: int, true: str, k: int) -> list[str]:
        lo = next((n for n, (_, s) in enumerate(by_len) if len(s) >= len(true) * 0.6), 0)
        hi = next((n for n, (_, s) in enumerate(by_len) if len(s) > len(true) * 1.6), len(by_len))
        cand = [s for d, s in by_len[lo:hi] if d != i and s != true]
        if len(set(cand)) < k:
            cand = [s for d, s in pool if d != i and s != true]
        cand = sorted(set(cand))
        if len(cand) < k:
            return []
        return rng.sample(cand, k)

    mc, ce = [], []
    for n, (i, j) in enumerate(cuts):
        true = per_doc[i][j]
        if len(mc) < n_mc and n % 2 == 0:
            wrong = distractors(i, true, n_choices - 1)
            if wrong:
                gold = rng.randrange(n_choices)
                choices = wrong[:gold] + [true] + wrong[gold:]
                mc.append({"context": context(i, j), "choices": choices, "gold": gold})
        elif len(ce) < n_ce:
            ce.append({"context": context(i, j), "answer": true})
        if len(mc) >= n_mc and len(ce) >= n_ce:
            break
    if not mc or not ce:
        raise EvalError(f"held-out text too small to make tasks ({len(mc)} mc, {len(ce)} ce examples)")
    return mc, ce


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
    from shapelm.evaluation.standins import make_standins, standin_path, standin_tasks

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
    atomic_write_json(out / "standin_data.json", standin_data)
    atomic_write_json(out / "task_data.json", task_data)
    atomic_write_json(out / "make_tasks.json", info)
    return info
