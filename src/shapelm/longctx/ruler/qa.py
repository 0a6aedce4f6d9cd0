"""Question-answering data for RULER's qa_1 (SQuAD v2 dev) and qa_2 (HotpotQA dev distractor).

``read_squad`` / ``read_hotpotqa`` read the original JSON files exactly as RULER's qa.py does:
unique documents sorted; a question's gold documents, plus (SQuAD) the other paragraphs of its
article as preferred distractors; unanswerable SQuAD questions dropped.

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


def read_squad(path: str | os.PathLike) -> QA:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read SQuAD v2 JSON ({e})") from e
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


def read_hotpotqa(path: str | os.PathLike) -> QA:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: cannot read HotpotQA JSON ({e})") from e
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
