"""Question-answering data for RULER's qa_1 (SQuAD v2 dev) and qa_2 (HotpotQA dev distractor).

``read_squad`` / ``read_hotpotqa`` read the original JSON files exactly as RULER's qa.py does:
unique documents sorted; a question's gold documents, plus (SQuAD) the other paragraphs of its
article as preferred distractors; unanswerable SQuAD questions dropped. They also read the
Hugging Face copies of the same dev sets (one question a row: ``rajpurkar/squad_v2``'s
``title, context, question, answers{text}``; ``hotpotqa/hotpot_qa`` distractor's ``question,
answer, context{title, sentences}``) from parquet/jsonl files, a directory of them or an
``hf:`` spec in the local cache (:mod:`shapelm.longctx.inputs`); rows are regrouped into the
original structure first, so both give the same questions and documents.

``text_qa`` is the offline substitute used by the default pipeline (no dataset download): the
local text is cut into passages of about ``passage_words`` (50) words (the "documents"), and each
question is a cloze built from one sentence of a gold passage:

    In the given documents, which word is missing from this sentence: "... ___ ..."?

The answer is the removed word (at least 5 letters, alphabetic). ``kind="squad"`` has one gold
passage per question and the other passages of the same source document as preferred
distractors (like SQuAD's article paragraphs); ``kind="hotpotqa"`` has two gold passages (the
cloze passage and the one before it in the source text, mimicking HotpotQA's two supporting
paragraphs). These are retrieval questions, not multi-hop reasoning; they exercise the same
prompt format, document packing and string_match_part scoring.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

from shapelm.errors import DataError

QA = tuple[list[dict], list[str]]  # (questions, documents)


def _original_json(path: str | os.PathLike, what: str):
    """The parsed file when ``path`` is the dataset's original ``.json``, else None (rows)."""
    from shapelm.longctx.inputs import parse_hub

    p = Path(path)
    if parse_hub(path) is not None or p.is_dir() or not p.name.lower().endswith(".json"):
        return None
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read {what} JSON ({e})") from e


def _rows(path, split: str, what: str) -> list[dict]:
    from shapelm.longctx.sources import iter_records

    rows = list(iter_records(path, split))
    if not rows:
        raise DataError(f"{path}: no {what} rows")
    return rows


def squad_from_rows(rows: list[dict], where: str = "SQuAD rows") -> dict:
    """HF ``squad_v2`` rows (one question each) -> the original ``{"data": [articles]}``."""
    articles: dict[str, dict[str, list]] = {}  # title -> context -> qas, in row order
    for i, r in enumerate(rows):
        try:
            texts = list((r["answers"] or {}).get("text") or [])
            qa = {"question": r["question"], "answers": [{"text": t} for t in texts], "is_impossible": not texts}
            articles.setdefault(r["title"], {}).setdefault(r["context"], []).append(qa)
        except (KeyError, TypeError, AttributeError) as e:
            raise DataError(f"{where}: row {i} is not a squad_v2 row (title, context, question, answers): {e}") from e
    return {"data": [{"title": t, "paragraphs": [{"context": c, "qas": q} for c, q in paras.items()]}
                     for t, paras in articles.items()]}


def hotpotqa_from_rows(rows: list[dict], where: str = "HotpotQA rows") -> list[dict]:
    """HF ``hotpot_qa`` distractor rows -> the original list (``context`` as [title, sentences])."""
    out = []
    for i, r in enumerate(rows):
        try:
            ctx = r["context"]
            pairs = [[t, list(s)] for t, s in zip(ctx["title"], ctx["sentences"])] if isinstance(ctx, dict) else ctx
            out.append({"question": r["question"], "answer": r["answer"], "context": pairs})
        except (KeyError, TypeError) as e:
            raise DataError(f"{where}: row {i} is not a hotpot_qa row (question, answer, context): {e}") from e
    return out


def read_squad(path: str | os.PathLike, split: str = "validation") -> QA:
    data = _original_json(path, "SQuAD v2")
    if data is None:
        data = squad_from_rows(_rows(path, split, "SQuAD"), str(path))
    if not isinstance(data, dict) or "data" not in data:
        raise DataError(f"{path}: not a SQuAD JSON file (no top-level 'data')")
    docs = sorted({p["context"] for d in data["data"] for p in d["paragraphs"]})
    index = {c: i for i, c in enumerate(docs)}
    qas = []
    for d in data["data"]:
        more = [index[p["context"]] for p in d["paragraphs"]]
        for p in d["paragraphs"]:
            gold = index[p["context"]]
            for q in p["qas"]:
                if not q.get("is_impossible", False):
                    qas.append(
                        {
                            "query": q["question"],
                            "outputs": [a["text"] for a in q["answers"]],
                            "context": [gold],
                            "more_context": [i for i in more if i != gold],
                        }
                    )
    return qas, docs


def read_hotpotqa(path: str | os.PathLike, split: str = "validation") -> QA:
    data = _original_json(path, "HotpotQA")
    if data is None:
        data = hotpotqa_from_rows(_rows(path, split, "HotpotQA"), str(path))
    if not isinstance(data, list):
        raise DataError(f"{path}: not a HotpotQA dev distractor file (expected a JSON list)")
    docs = sorted({f"{t}\n{''.join(p)}" for d in data for t, p in d["context"]})
    index = {c: i for i, c in enumerate(docs)}
    qas = [
        {
            "query": d["question"],
            "outputs": [d["answer"]],
            "context": [index[f"{t}\n{''.join(p)}"] for t, p in d["context"]],
        }
        for d in data
    ]
    return qas, docs


_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_WORD = re.compile(r"\b([A-Za-z]{5,})\b")


def split_sentences(text: str) -> list[str]:
    """A plain regex sentence splitter (RULER uses nltk's punkt, which needs a download)."""
    return [s.strip() for s in _SENT.split(text.strip()) if s.strip()]


def _passages(texts: list[str], passage_words: int) -> list[tuple[int, str]]:
    out = []
    for src, text in enumerate(texts):
        words = re.sub(r"\s+", " ", text).strip().split(" ")
        for start in range(0, len(words) - passage_words // 2, passage_words):
            chunk = " ".join(words[start : start + passage_words]).strip()
            if chunk:
                out.append((src, chunk))
    return out


def text_qa(
    texts: list[str], kind: str = "squad", passage_words: int = 50, max_questions: int = 2000, seed: int = 42
) -> QA:
    """Cloze questions from local text (see module docstring); deterministic for a seed."""
    if kind not in ("squad", "hotpotqa"):
        raise DataError(f"text_qa: kind must be 'squad' or 'hotpotqa', got {kind!r}")
    passages = _passages(texts, passage_words)
    if len(passages) < 3:
        raise DataError("QA substitute: the text gives fewer than 3 passages; provide more text")
    docs = [p for _, p in passages]
    rng = random.Random(seed)
    qas = []
    for i, (src, passage) in enumerate(passages):
        if kind == "hotpotqa" and (i == 0 or passages[i - 1][0] != src):
            continue
        sents = [s for s in split_sentences(passage) if len(s.split()) >= 6 and _WORD.search(s)]
        if not sents:
            continue
        sent = rng.choice(sents)
        cands = _WORD.findall(sent)
        word = rng.choice(cands)
        cloze = re.sub(rf"\b{re.escape(word)}\b", "___", sent, count=1)
        query = f'In the given documents, which word is missing from this sentence: "{cloze}"?'
        item = {"query": query, "outputs": [word]}
        if kind == "squad":
            item["context"] = [i]
            item["more_context"] = [j for j, (s, _) in enumerate(passages) if s == src and j != i]
        else:
            item["context"] = [i - 1, i]
        qas.append(item)
        if len(qas) >= max_questions:
            break
    if not qas:
        raise DataError("QA substitute: no sentence in the text gave a cloze question")
    order = list(range(len(qas)))
    rng.shuffle(order)
    return [qas[j] for j in order], docs
