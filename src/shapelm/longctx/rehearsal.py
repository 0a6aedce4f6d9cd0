"""Long-context inputs for a rehearsal: small files in the real formats, from real text.

A rehearsal runs the paper's DAG on a small cluster with the paper's code paths, so its inputs
must be read exactly as the real ones are (:mod:`shapelm.longctx.inputs`). The text is the
embedded default corpus's (:mod:`shapelm.data.corpus`), only the parts that need no download:
the Python Language Reference articles (``pydoc_data.topics``, "wiki") and the standard
library's modules ("code"), so the files depend on nothing but the Python version.

``write_longctx_inputs(out_dir)`` writes under ``out_dir/longctx/``:

* ``pg19/{train,validation,test}/<id>.txt``: deepmind's PG19 layout, one book a file; the books
  are half of the reference articles (hash order), bundled into ``PG19_BOOKS`` books of similar
  length (6 train, 1 validation, 1 test);
* ``proofpile/test/proofpile_test.jsonl.gz``: hoskinson-center/proof-pile's layout, one
  ``{"text", "meta"}`` a line; long standard-library modules (math-and-code text, like
  Proof-pile's formal libraries), each cut at a line to at most ``PROOFPILE_MAX_CHARS``;
* ``ruler/PaulGrahamEssays.json``: RULER's ``{"text": ...}``, the other half of the articles;
* ``ruler/squad.json``: SQuAD v2 dev's layout (``version``, ``data`` of articles with
  ``paragraphs`` of ``context`` + ``qas``: ``id``, ``question``, ``answers`` [``text``,
  ``answer_start``], ``is_impossible``, unanswerable ones with ``plausible_answers``), built on
  the essays' paragraphs; questions are clozes ("which word is missing from ...") whose answer
  is the removed word, as the default pipeline's QA substitute asks;
* ``ruler/hotpotqa.json``: HotpotQA dev distractor's layout (``_id``, ``question``, ``answer``,
  ``supporting_facts`` [title, sentence id], ``context`` of [title, sentences]: 2 gold
  paragraphs and ``HOTPOTQA_DISTRACTORS`` distractors (the dev set has 8), ``type``, ``level``).

Paragraphs of the QA files are short (``QA_PARAGRAPH_WORDS``, ``HOTPOTQA_PARAGRAPH_WORDS``
words at most), so a question's documents fit RULER contexts of 512 tokens (RULER's templates
and generation budgets leave too little room at 256 for most tasks, whatever the data). Deterministic (sorted by hash,
seeded choices, gzip without a timestamp) and fast (well under a second: nothing is tokenized).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import re
from pathlib import Path

from shapelm import files
from shapelm.errors import DataError

PG19_BOOKS = 8  # 6 train, 1 validation, 1 test
PROOFPILE_DOCS = 12
PROOFPILE_MIN_CHARS = 24_000  # >= 5,000 tokens even for a 100k-vocabulary tokenizer on code
PROOFPILE_MAX_CHARS = 48_000
QA_PARAGRAPH_WORDS = 60
SQUAD_ARTICLES = 24
HOTPOTQA_QUESTIONS = 60
# RULER's qa_2 packs *all* context paragraphs of a question (gold and distractors) into the
# prompt: the dev set's 10 paragraphs need ~1,300 tokens, a rehearsal length is 512. Two
# distractors of <= 24 words keep the layout and fit.
HOTPOTQA_DISTRACTORS = 2
HOTPOTQA_PARAGRAPH_WORDS = 24
SEED = 42

_WORD = re.compile(r"\b([A-Za-z]{5,})\b")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def _hash(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _texts():
    from shapelm.data.corpus import code_documents, wiki_documents

    wiki = sorted(wiki_documents(), key=lambda d: _hash("rehearsal/" + d.key))
    if len(wiki) < 2 * PG19_BOOKS:
        raise DataError(f"rehearsal: only {len(wiki)} reference articles in this Python's pydoc_data")
    return wiki[: len(wiki) // 2], wiki[len(wiki) // 2:], code_documents()


def _write_text(path: Path, text: str) -> None:
    files.write_text(path, text)


def write_pg19(root: Path, articles) -> None:
    """deepmind's layout: <split>/<book id>.txt. Articles go, longest first, to the shortest book
    so far (books of similar length); the last two books are validation and test."""
    books: list[list] = [[] for _ in range(PG19_BOOKS)]
    for a in sorted(articles, key=lambda a: (-len(a.text), a.key)):
        min(books, key=lambda b: sum(len(x.text) for x in b)).append(a)
    splits = ["train"] * (PG19_BOOKS - 2) + ["validation", "test"]
    for k, (split, book) in enumerate(zip(splits, books)):
        body = "\n\n".join(a.text.strip() for a in sorted(book, key=lambda a: a.key))
        _write_text(root / split / f"{10000 + k}.txt", f"THE PYTHON LANGUAGE REFERENCE, VOLUME {k + 1}\n\n{body}\n")


def write_proofpile(root: Path, modules) -> None:
    """hoskinson-center/proof-pile's test file: {"text", "meta"} a line, gzipped."""
    long = sorted((m for m in modules if len(m.text) >= PROOFPILE_MIN_CHARS), key=lambda m: _hash("pp/" + m.key))
    if len(long) < PROOFPILE_DOCS:
        raise DataError(f"rehearsal: only {len(long)} stdlib modules of >= {PROOFPILE_MIN_CHARS} characters")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:  # mtime 0: identical bytes every time
        for m in long[:PROOFPILE_DOCS]:
            text = m.text[: m.text.rfind("\n", 0, PROOFPILE_MAX_CHARS) + 1] if len(m.text) > PROOFPILE_MAX_CHARS else m.text
            rec = {"text": text, "meta": {"config": "stdlib", "file": m.name}}
            gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
    files.write_bytes(root / "test" / "proofpile_test.jsonl.gz", buf.getvalue())


def paragraphs(text: str, max_words: int = QA_PARAGRAPH_WORDS) -> list[str]:
    """Prose paragraphs of an article (no code blocks, headings or lists), whole sentences up to
    ``max_words`` words each."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if any(line.startswith((" ", "\t", "*", "-", "=")) for line in lines if line):
            continue  # code, a heading underline, a list
        words = " ".join(block.split())
        if len(words.split()) < 12 or "." not in words:
            continue
        kept, n = [], 0
        for sent in _SENT.split(words):
            w = len(sent.split())
            if kept and n + w > max_words:
                break
            kept.append(sent)
            n += w
        if n <= max_words:
            out.append(" ".join(kept))
    return out


def _cloze(sentence: str, rng: random.Random) -> tuple[str, str] | None:
    """(question, answer) removing one word of >= 5 letters from ``sentence``."""
    words = _WORD.findall(sentence)
    if len(sentence.split()) < 6 or not words:
        return None
    word = rng.choice(words)
    blank = re.sub(rf"\b{re.escape(word)}\b", "___", sentence, count=1)
    return f'Which word is missing from this sentence: "{blank}"?', word


def _title(article) -> str:
    return article.name.split("/", 1)[-1]


def write_squad(path: Path, articles) -> None:
    """SQuAD v2 dev's layout; two cloze questions a paragraph, one unanswerable an article."""
    rng = random.Random(SEED)
    data, n = [], 0
    usable = [(a, paragraphs(a.text)) for a in articles]
    usable = [(a, ps[:4]) for a, ps in usable if ps][:SQUAD_ARTICLES]
    for j, (art, paras) in enumerate(usable):
        out_paras = []
        for context in paras:
            qas = []
            for sent in rng.sample(_SENT.split(context), min(2, len(_SENT.split(context)))):
                q = _cloze(sent, rng)
                if q is None:
                    continue
                start = context.index(sent) + re.search(rf"\b{re.escape(q[1])}\b", sent).start()
                qas.append({"id": _hash(f"squad/{n}")[:24], "question": q[0], "is_impossible": False,
                            "answers": [{"text": q[1], "answer_start": start}]})
                n += 1
            out_paras.append({"context": context, "qas": qas})
        other = usable[(j + 1) % len(usable)][1][0]  # a question this article cannot answer
        q = _cloze(_SENT.split(other)[0], rng)
        if q is not None:
            out_paras[0]["qas"].append({"id": _hash(f"squad/{n}")[:24], "question": q[0], "is_impossible": True,
                                        "answers": [], "plausible_answers": [{"text": q[1], "answer_start": 0}]})
            n += 1
        data.append({"title": _title(art), "paragraphs": out_paras})
    files.write_json(path, {"version": "v2.0", "data": data}, ensure_ascii=False, indent=1)


def _sentences(paragraph: str) -> list[str]:
    """HotpotQA's sentence list: every sentence after the first keeps its leading space."""
    sents = _SENT.split(paragraph)
    return [sents[0]] + [" " + s for s in sents[1:]]


def write_hotpotqa(path: Path, articles) -> None:
    """HotpotQA dev distractor's layout: 2 gold paragraphs (two articles) + distractors."""
    rng = random.Random(SEED)
    pool = [(_title(a), p) for a in articles for p in paragraphs(a.text, HOTPOTQA_PARAGRAPH_WORDS)[:1]]
    if len(pool) < 2 + HOTPOTQA_DISTRACTORS + 2:
        raise DataError(f"rehearsal: only {len(pool)} short paragraphs for HotpotQA questions")
    rows = []
    for i in range(HOTPOTQA_QUESTIONS):
        (t1, p1), (t2, p2) = pool[i % len(pool)], pool[(i + 1) % len(pool)]
        q = _cloze(rng.choice(_SENT.split(p2)), rng)
        if q is None:
            continue
        sid = next(k for k, s in enumerate(_sentences(p2)) if q[1] in s)
        others = [x for x in pool if x[0] not in (t1, t2)]
        context = [[t1, _sentences(p1)], [t2, _sentences(p2)]] + [[t, _sentences(p)] for t, p in rng.sample(others, HOTPOTQA_DISTRACTORS)]
        rng.shuffle(context)
        rows.append({"_id": _hash(f"hotpot/{i}")[:24], "answer": q[1], "question": q[0],
                     "supporting_facts": [[t1, 0], [t2, sid]], "context": context,
                     "type": "bridge", "level": "medium"})
    files.write_json(path, rows, ensure_ascii=False, indent=1)


def write_longctx_inputs(out_dir: Path) -> dict:
    """Write the five inputs under ``out_dir/longctx/``; return the ``longctx`` config overrides
    with ``{root}`` standing for ``out_dir``."""
    root = Path(out_dir) / "longctx"
    books, essays, modules = _texts()
    write_pg19(root / "pg19", books)
    write_proofpile(root / "proofpile", modules)
    essays_text = "\n\n".join(a.text.strip() for a in essays)
    files.write_json(root / "ruler" / "PaulGrahamEssays.json", {"text": essays_text}, ensure_ascii=False, indent=1)
    write_squad(root / "ruler" / "squad.json", essays)
    write_hotpotqa(root / "ruler" / "hotpotqa.json", essays)
    return {"longctx": {
        "pg19": "{root}/longctx/pg19",
        "proofpile": "{root}/longctx/proofpile",
        "essays": "{root}/longctx/ruler/PaulGrahamEssays.json",
        "squad": "{root}/longctx/ruler/squad.json",
        "hotpotqa": "{root}/longctx/ruler/hotpotqa.json",
    }}
