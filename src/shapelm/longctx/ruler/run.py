"""Generate RULER sample files and evaluate a model on them.

Layout of a generated set ``DIR``::

    DIR/manifest.json                  settings, resources, tokenizer, counts
    DIR/<length>/<task>.jsonl          samples: index, input, answer_prefix, outputs, length, ...

Evaluation feeds ``input + answer_prefix`` to the model, decodes greedily up to the task's
generation budget (stopping at EOS), scores with RULER's metric, and writes
``pred_dir/<length>/<task>.jsonl`` (samples with ``pred``) and a result JSON.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from shapelm import files
from shapelm.errors import ConfigError, DataError
from shapelm.longctx.ruler.qa import read_hotpotqa, read_squad, text_qa
from shapelm.longctx.ruler.scoring import postprocess_pred, ruler_mean, score_task
from shapelm.longctx.ruler.tasks import SEED, TASK_NAMES, Resources, generate_task
from shapelm.longctx.ruler.words import read_word_list, word_source

log = logging.getLogger(__name__)


def _texts(source, tokenizer) -> list[str]:
    from shapelm.longctx.sources import (
        decode,
        is_token_dir,
        iter_texts,
        token_dir_documents,
    )

    if is_token_dir(source):
        if tokenizer is None:
            raise DataError(f"{source}: decoding a token directory needs the tokenizer")
        return [decode(tokenizer, d) for d in token_dir_documents(source)]
    return list(iter_texts(source))


def load_resources(
    *,
    essays=None,
    squad=None,
    hotpotqa=None,
    qa_text=None,
    words=None,
    word_lists: str = "builtin",
    tokenizer=None,
    essay_max_chars: int | None = 2_000_000,
    qa_passage_words: int = 50,
) -> Resources:
    """Local files for the essay and QA tasks; ``qa_text`` substitutes for missing QA files."""
    res = Resources()
    if essays is not None:
        texts = _texts(essays, tokenizer)
        res.essay = "".join(texts) if str(essays).endswith(".json") else "\n\n".join(texts)
        if essay_max_chars:
            res.essay = res.essay[:essay_max_chars]
        res.notes["essays"] = str(essays)
    if squad is not None:
        res.squad = read_squad(squad)
        res.notes["squad"] = str(squad)
    if hotpotqa is not None:
        res.hotpotqa = read_hotpotqa(hotpotqa)
        res.notes["hotpotqa"] = str(hotpotqa)
    if qa_text is not None and (res.squad is None or res.hotpotqa is None):
        texts = _texts(qa_text, tokenizer)
        if res.squad is None:
            res.squad = text_qa(texts, "squad", qa_passage_words)
            res.notes["squad"] = f"substitute: cloze questions from {qa_text}"
        if res.hotpotqa is None:
            res.hotpotqa = text_qa(texts, "hotpotqa", qa_passage_words)
            res.notes["hotpotqa"] = f"substitute: two-passage cloze questions from {qa_text}"
    if words is not None:
        res.word_list = read_word_list(words)
        res.notes["words"] = str(words)
    res.word_lists = word_lists
    res.notes["word_lists"] = word_source(word_lists)
    return res


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with files.atomic_open(path) as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def generate_ruler(
    out_dir,
    tokenizer,
    lengths: list[int],
    num_samples: int,
    *,
    tasks: list[str] | None = None,
    resources: Resources | None = None,
    seed: int = SEED,
    tokenizer_name: str = "",
) -> dict:
    """Write every task x length sample file and the manifest; returns the manifest."""
    tasks = tasks or TASK_NAMES
    unknown = [t for t in tasks if t not in TASK_NAMES]
    if unknown:
        raise ConfigError(f"unknown RULER task(s): {unknown}; known: {TASK_NAMES}")
    out = Path(out_dir)
    res = resources or Resources()
    counts = {}
    for L in lengths:
        for task in tasks:
            rows = generate_task(task, tokenizer, L, num_samples, seed=seed, resources=res)
            write_jsonl(out / str(L) / f"{task}.jsonl", rows)
            counts[f"{L}/{task}"] = len(rows)
            log.info("RULER %s @ %d: %d samples", task, L, len(rows))
    manifest = {
        "format": "shapelm-ruler-v1",
        "seed": seed,
        "lengths": [int(x) for x in lengths],
        "tasks": tasks,
        "num_samples": num_samples,
        "tokenizer": tokenizer_name,
        "resources": res.notes,
        "counts": counts,
    }
    files.write_json(out / "manifest.json", manifest, indent=1)
    return manifest


def evaluate_ruler(
    model,
    tokenizer,
    data_dir,
    *,
    lengths: list[int] | None = None,
    tasks: list[str] | None = None,
    pred_dir=None,
    max_samples: int | None = None,
    eos_id: int | None = None,
    prefill_chunk: int | None = 8192,
    batch_size: int = 8,
) -> dict:
    """Scores {"scores": {length: {task: score, "mean": m}}, "nulls": ...} for a generated set.

    Samples decode `batch_size` at a time. With `pred_dir`, every finished task x length is
    written there at once (atomically) and a rerun reuses it instead of decoding it again, so a
    job that ran out of time resumes at the first unfinished task."""
    from shapelm.model.generate import greedy_generate_batch
    from shapelm.longctx.sources import decode, encode

    data = Path(data_dir)
    mf = data / "manifest.json"
    if not mf.is_file():
        raise DataError(f"{mf}: not a RULER sample set (run `shapelm longctx ruler-generate`)")
    manifest = json.loads(mf.read_text())
    lengths = [int(x) for x in (lengths or manifest["lengths"])]
    tasks = tasks or manifest["tasks"]
    scores: dict[str, dict] = {}
    nulls: dict[str, dict] = {}
    for L in lengths:
        scores[str(L)], nulls[str(L)] = {}, {}
        for task in tasks:
            f = data / str(L) / f"{task}.jsonl"
            if not f.is_file():
                raise DataError(f"{f}: missing (generate it with ruler-generate)")
            rows = read_jsonl(f)[: max_samples or None]
            done = _finished_predictions(pred_dir, L, task, rows)
            if done is not None:
                rows = done
                log.info("RULER %s @ %d: reusing %d predictions from %s", task, L, len(rows), pred_dir)
            else:
                for first in range(0, len(rows), batch_size):
                    batch = rows[first: first + batch_size]
                    outs = greedy_generate_batch(
                        model, [encode(tokenizer, r["input"] + r["answer_prefix"]) for r in batch],
                        [int(r["tokens_to_generate"]) for r in batch], eos_id=eos_id,
                        prefill_chunk=prefill_chunk)
                    for r, out in zip(batch, outs):
                        r["pred"] = decode(tokenizer, out)
                if pred_dir is not None:
                    write_jsonl(Path(pred_dir) / str(L) / f"{task}.jsonl", rows)
            preds = [r["pred"] for r in rows]
            s = score_task(task, preds, [r["outputs"] for r in rows])
            scores[str(L)][task] = s
            nulls[str(L)][task] = f"{sum(len(postprocess_pred(p)) == 0 for p in preds)}/{len(preds)}"
            log.info("RULER %s @ %d: %.2f", task, L, s)
        scores[str(L)]["mean"] = ruler_mean({t: scores[str(L)][t] for t in tasks})
    return {"lengths": lengths, "tasks": tasks, "scores": scores, "nulls": nulls, "data": str(data),
            "complete": sorted(tasks) == sorted(TASK_NAMES)}


def _finished_predictions(pred_dir, length: int, task: str, rows: list[dict]) -> list[dict] | None:
    """The predictions a previous run wrote for exactly these samples, else None."""
    if pred_dir is None:
        return None
    path = Path(pred_dir) / str(length) / f"{task}.jsonl"
    if not path.is_file():
        return None
    done = read_jsonl(path)
    same = len(done) == len(rows) and all(
        "pred" in d and d.get("input") == r.get("input") and d.get("outputs") == r.get("outputs")
        for d, r in zip(done, rows))
    return done if same else None
