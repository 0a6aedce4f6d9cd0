"""Held-out documents and the examples cut from them: the documents of a token directory (decoded
with its tokenizer), a text file or a directory of text files, and the multiple-choice and
continuation examples `shapelm eval make-tasks` writes and the stand-in tasks build on.
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

from shapelm.errors import EvalError

if TYPE_CHECKING:  # loading imports torch; config checks import this module
    from shapelm.evaluation.loading import TextTokenizer


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
