"""Prompt and choice functions for shapelm's lm-eval tasks (OLMo's protocol), and OLMo's ce_loss.

This file is copied next to the generated task YAMLs (lm-eval loads ``!function`` modules by
file path), so it must stay self-contained: standard library only, no shapelm imports.

Multiple-choice tasks are scored by lm-eval itself (``acc``, ``acc_norm``: lm-eval's acc_norm
divides by the characters of the choice, which is OLMo's len_norm). Only OLMo's ``ce_loss`` is
defined here, as lm-eval has no such metric: -(log-likelihood of " answer") / characters of the
answer, aggregated as a mean.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------- metrics


def cont_chars(continuation: str) -> int:
    """Characters of a continuation, one leading space excluded (OLMo's cont_str_len)."""
    n = len(continuation) - 1 if continuation.startswith(" ") else len(continuation)
    return max(n, 1)


def _make_ce(answer_fn):
    def process(doc, results):
        ll = float(results[0][0])
        return {"ce_loss": -ll / cont_chars(" " + answer_fn(doc))}

    return process


# ----------------------------------------------------------------------- generic (make-tasks)
# {"context": str, "choices": [str], "gold": int}   and   {"context": str, "answer": str}


def generic_mc_text(doc):
    return doc["context"]


def generic_mc_choices(doc):
    return list(doc["choices"])


def generic_mc_gold(doc):
    return int(doc["gold"])


def generic_ce_text(doc):
    return doc["context"]


def generic_ce_target(doc):
    return " " + doc["answer"]


process_generic_ce = _make_ce(lambda doc: doc["answer"])

# --------------------------------------------------------------------- ARC / CommonsenseQA


def arc_text(doc):
    return "Question: " + doc["question"] + "\nAnswer:"


def arc_choices(doc):
    return list(doc["choices"]["text"])


def arc_gold(doc):
    key = str(doc["answerKey"]).strip()
    key = {"1": "A", "2": "B", "3": "C", "4": "D", "5": "E"}.get(key, key)
    labels = list(doc["choices"].get("label") or ["A", "B", "C", "D", "E"])
    return labels.index(key) if key in labels else ["A", "B", "C", "D", "E"].index(key)


# ----------------------------------------------------------------------------------- SciQ


def sciq_text(doc):
    return doc["support"].strip() + "\nQuestion: " + doc["question"] + "\nAnswer:"


def sciq_choices(doc):
    return [doc["distractor1"], doc["distractor2"], doc["distractor3"], doc["correct_answer"]]


def sciq_gold(doc):
    return 3


# ------------------------------------------------------------------------------ Social IQa


def siqa_text(doc):
    return "Question: " + doc["context"] + " " + doc["question"] + "\nAnswer:"


def siqa_choices(doc):
    return [doc["answerA"], doc["answerB"], doc["answerC"]]


def siqa_gold(doc):
    return int(doc["label"]) - 1


# ---------------------------------------------------------------------------------- BoolQ


def boolq_text(doc):
    return doc["passage"] + "\nQuestion: " + doc["question"] + "?\nAnswer:"


def boolq_choices(doc):
    return ["yes", "no"]


def boolq_gold(doc):
    ans = doc.get("answer", doc.get("label"))
    if isinstance(ans, str):
        ans = ans.strip().lower() in ("true", "yes", "1")
    return 0 if ans else 1


# --------------------------------------------------------------------- TriviaQA / NQ (ce)


def qa_text(doc):
    return "\nQuestion: " + doc["question"] + "\nAnswer:"


triviaqa_text = nq_text = qa_text


def triviaqa_answer(doc):
    ans = doc["answer"]
    return ans["value"] if isinstance(ans, dict) else str(ans)


def nq_answer(doc):
    ans = doc["answer"]
    return ans[0] if isinstance(ans, list) else str(ans)


def triviaqa_target(doc):
    return " " + triviaqa_answer(doc)


def nq_target(doc):
    return " " + nq_answer(doc)


process_triviaqa = _make_ce(triviaqa_answer)
process_nq = _make_ce(nq_answer)


def local_dataset(data_files, **_metadata):
    """A task's local data (lm-eval's ``custom_dataset``): files named relative to this file's
    directory, where shapelm writes the task YAMLs beside it, so the folder can move."""
    import os

    import datasets

    here = os.path.dirname(os.path.abspath(__file__))
    return datasets.load_dataset("json", data_files={split: os.path.join(here, f) for split, f in data_files.items()})
