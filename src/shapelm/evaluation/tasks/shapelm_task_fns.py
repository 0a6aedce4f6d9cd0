"""Prompt, choice and metric functions for shapelm's lm-eval tasks (OLMo's protocol).

This file is copied next to the generated task YAMLs (lm-eval loads ``!function`` modules by
file path), so it must stay self-contained: standard library only, no shapelm imports.

Definitions follow OLMo's olmo/eval/downstream.py:

* ``acc``: argmax of summed log-likelihood;
* ``len_norm``: argmax of log-likelihood / characters of the continuation without its leading
  space (not lm-eval's ``acc_norm``, which divides by UTF-8 bytes including the space);
* ``ce_loss``: -(log-likelihood of " answer") / characters of the answer; aggregated as a mean.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------- metrics


def cont_chars(continuation: str) -> int:
    """Characters of a continuation, one leading space excluded (OLMo's cont_str_len)."""
    n = len(continuation) - 1 if continuation.startswith(" ") else len(continuation)
    return max(n, 1)


def _argmax(xs):
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def mc_metrics(lls, continuations, gold):
    """acc and len_norm for one multiple-choice question (continuations with leading space)."""
    norm = [ll / cont_chars(c) for ll, c in zip(lls, continuations)]
    return {
        "acc": 1.0 if _argmax(lls) == gold else 0.0,
        "len_norm": 1.0 if _argmax(norm) == gold else 0.0,
    }


def _lls(results):
    return [float(r[0]) for r in results]


def _make_mc(choices_fn, gold_fn):
    def process(doc, results):
        conts = [" " + c for c in choices_fn(doc)]
        return mc_metrics(_lls(results), conts, gold_fn(doc))

    return process


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


process_generic_mc = _make_mc(generic_mc_choices, generic_mc_gold)
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


process_arc = _make_mc(arc_choices, arc_gold)

# ------------------------------------------------------------------------------ HellaSwag


def hellaswag_preprocess(text):
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def hellaswag_text(doc):
    return hellaswag_preprocess(
        doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    )


def hellaswag_choices(doc):
    return [hellaswag_preprocess(e) for e in doc["endings"]]


def hellaswag_gold(doc):
    return int(doc["label"])


process_hellaswag = _make_mc(hellaswag_choices, hellaswag_gold)

# ----------------------------------------------------------------------------------- PIQA


def piqa_text(doc):
    return "Question: " + doc["goal"] + "\nAnswer:"


def piqa_choices(doc):
    return [doc["sol1"], doc["sol2"]]


def piqa_gold(doc):
    return int(doc["label"])


process_piqa = _make_mc(piqa_choices, piqa_gold)

# ----------------------------------------------------------------------------------- SciQ


def sciq_text(doc):
    return doc["support"].strip() + "\nQuestion: " + doc["question"] + "\nAnswer:"


def sciq_choices(doc):
    return [doc["distractor1"], doc["distractor2"], doc["distractor3"], doc["correct_answer"]]


def sciq_gold(doc):
    return 3


process_sciq = _make_mc(sciq_choices, sciq_gold)

# ------------------------------------------------------------------------------ Social IQa


def siqa_text(doc):
    return "Question: " + doc["context"] + " " + doc["question"] + "\nAnswer:"


def siqa_choices(doc):
    return [doc["answerA"], doc["answerB"], doc["answerC"]]


def siqa_gold(doc):
    return int(doc["label"]) - 1


process_siqa = _make_mc(siqa_choices, siqa_gold)

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


process_boolq = _make_mc(boolq_choices, boolq_gold)

# ----------------------------------------------------------------------------- WinoGrande
# OLMo: two contexts (sentence up to "_" with each option), one shared continuation.


def winogrande_text(doc):  # lm-eval's multiple-input mode: doc_to_text = gold index
    return int(doc["answer"]) - 1


def winogrande_choices(doc):  # ... and doc_to_choice = the contexts
    idx = doc["sentence"].index("_")
    return [doc["sentence"][:idx] + opt for opt in (doc["option1"], doc["option2"])]


def winogrande_target(doc):
    idx = doc["sentence"].index("_") + 1
    return doc["sentence"][idx:].strip()


def process_winogrande(doc, results):
    cont = " " + winogrande_target(doc)
    return mc_metrics(_lls(results), [cont, cont], winogrande_text(doc))


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

# -------------------------------------------------------------------------------- LAMBADA


def lambada_text(doc):
    return " ".join(doc["text"].split(" ")[:-1])


def lambada_target(doc):
    return " " + doc["text"].split(" ")[-1]


def process_lambada(doc, results):
    ll, greedy = results[0]
    return {"ppl": float(ll), "acc": 1.0 if greedy else 0.0}


# ------------------------------------------------------------------------------- WikiText
# As lm-eval's wikitext task: detokenized page, words counted on the original page.


def wikitext_detokenizer(doc):
    string = doc["page"]
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    string = string.replace(" : ", ": ")
    string = string.replace(" ; ", "; ")
    string = string.replace(" . ", ". ")
    string = string.replace(" ! ", "! ")
    string = string.replace(" ? ", "? ")
    string = string.replace(" , ", ", ")
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")
    return string


def process_wikitext(doc, results):
    (loglikelihood,) = results
    words = len(re.split(r"\s+", doc["page"]))
    nbytes = len(doc["page"].encode("utf-8"))
    return {
        "word_perplexity": (loglikelihood, words),
        "byte_perplexity": (loglikelihood, nbytes),
        "bits_per_byte": (loglikelihood, nbytes),
    }
