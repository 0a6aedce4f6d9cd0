"""RULER's 13 synthetic tasks: configurations, templates and sample generation, offline.

Follows NVIDIA/RULER ``scripts/synthetic.yaml`` (task arguments), ``scripts/data/synthetic/
constants.py`` (templates, answer prefixes, generation budgets) and the generators
``niah.py``, ``variable_tracking.py``, ``common_words_extraction.py``,
``freq_words_extraction.py`` and ``qa.py``, with the ``base`` model template (no chat wrapper):

* each sample's length budget is ``max_seq_length`` = prompt tokens (with answer prefix) +
  the task's generation budget; the haystack size is the largest that fits (binary search over
  the haystack unit: noise sentences, essay words, needle sentences, words or documents);
* the prompt is cut at the answer prefix: ``input`` + ``answer_prefix`` is what the model reads;
* seed 42 drives everything (RULER seeds ``random`` and ``numpy`` with it per task script).

Differences (all documented in docs/LONG_CONTEXT.md): word lists are wonderwords' when installed
and built-in lists otherwise; sentences are split with a regex instead of nltk punkt (which needs
a download); the Paul Graham essays and QA files are read from local paths (or substituted
from local text); below RULER's own minimum sizes (contexts of a few hundred tokens) the
search may go below RULER's increments, the variable-tracking in-context example is shortened
to a quarter of the budget, and common-words drops its few-shot example when nothing else fits.
Token counts use the evaluated model's tokenizer.
"""

from __future__ import annotations

import math
import random
import re
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shapelm.errors import ConfigError, DataError
from shapelm.longctx.ruler import words
from shapelm.longctx.ruler.qa import split_sentences
from shapelm.longctx.sources import encode

SEED = 42

#: scripts/synthetic.yaml
TASK_CONFIGS: dict[str, dict] = {
    "niah_single_1": {"task": "niah", "args": dict(type_haystack="noise", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1)},
    "niah_single_2": {"task": "niah", "args": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1)},
    "niah_single_3": {"task": "niah", "args": dict(type_haystack="essay", type_needle_k="words", type_needle_v="uuids", num_needle_k=1, num_needle_v=1, num_needle_q=1)},
    "niah_multikey_1": {"task": "niah", "args": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=4, num_needle_v=1, num_needle_q=1)},
    "niah_multikey_2": {"task": "niah", "args": dict(type_haystack="needle", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=1)},
    "niah_multikey_3": {"task": "niah", "args": dict(type_haystack="needle", type_needle_k="uuids", type_needle_v="uuids", num_needle_k=1, num_needle_v=1, num_needle_q=1)},
    "niah_multivalue": {"task": "niah", "args": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=4, num_needle_q=1)},
    "niah_multiquery": {"task": "niah", "args": dict(type_haystack="essay", type_needle_k="words", type_needle_v="numbers", num_needle_k=1, num_needle_v=1, num_needle_q=4)},
    "vt": {"task": "variable_tracking", "args": dict(type_haystack="noise", num_chains=1, num_hops=4)},
    "cwe": {"task": "common_words_extraction", "args": dict(freq_cw=30, freq_ucw=3, num_cw=10)},
    "fwe": {"task": "freq_words_extraction", "args": dict(alpha=2.0)},
    "qa_1": {"task": "qa", "args": dict(dataset="squad")},
    "qa_2": {"task": "qa", "args": dict(dataset="hotpotqa")},
}
TASK_NAMES = list(TASK_CONFIGS)

#: scripts/data/synthetic/constants.py
TEMPLATES: dict[str, dict] = {
    "niah": {
        "tokens_to_generate": 128,
        "template": "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided text?",
        "answer_prefix": " The special magic {type_needle_v} for {query} mentioned in the provided text are",
    },
    "variable_tracking": {
        "tokens_to_generate": 30,
        "template": "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: Find all variables that are assigned the value {query} in the text above.",
        "answer_prefix": " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the value {query}, they are: ",
    },
    "common_words_extraction": {
        "tokens_to_generate": 120,
        "template": "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?",
        "answer_prefix": " Answer: The top 10 words that appear most often in the list are:",
    },
    "freq_words_extraction": {
        "tokens_to_generate": 50,
        "template": "Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most frequently appeared words in the above coded text?",
        "answer_prefix": " Answer: According to the coded text above, the three most frequently appeared words are:",
    },
    "qa": {
        "tokens_to_generate": 32,
        "template": "Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. Only give me the answer and do not output any other words.\n\nQuestion: {query}",
        "answer_prefix": " Answer:",
    },
}

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
DEPTHS = [int(x) for x in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)]
DOCUMENT_PROMPT = "Document {i}:\n{document}"


def tokens_to_generate(task: str) -> int:
    return TEMPLATES[TASK_CONFIGS[task]["task"]]["tokens_to_generate"]


def full_template(kind: str) -> str:
    """Task template + answer prefix (``base`` model template), as prepare.py passes it."""
    return TEMPLATES[kind]["template"] + TEMPLATES[kind]["answer_prefix"]


@dataclass
class Resources:
    """Local data the essay and QA tasks need (None: tasks that need it raise)."""

    essay: str | None = None  # haystack text (Paul Graham essays or a local substitute)
    squad: tuple[list[dict], list[str]] | None = None
    hotpotqa: tuple[list[dict], list[str]] | None = None
    word_list: list[str] | None = None  # extra words for cwe at long lengths
    word_lists: str = "builtin"  # the noun/adjective/verb lists (words.WORD_LISTS; longctx.ruler_word_lists)
    notes: dict = field(default_factory=dict)


def essay_words(text: str) -> list[str]:
    return re.sub(r"\s+", " ", text).strip().split(" ")


class _Gen:
    """State shared by one task's generation: RNGs seeded once, as each RULER script does."""

    def __init__(self, task: str, tokenizer, max_seq_length: int, seed: int, res: Resources):
        self.task = task
        self.cfg = TASK_CONFIGS[task]
        self.kind = self.cfg["task"]
        self.args = dict(self.cfg["args"])
        self.tok = tokenizer
        self.max_len = int(max_seq_length)
        self.seed = seed
        self.res = res
        self.rng = random.Random(seed)
        self.nprng = np.random.RandomState(seed)
        self.gen_tokens = TEMPLATES[self.kind]["tokens_to_generate"]
        self.template = full_template(self.kind)

    def ntok(self, text: str) -> int:
        return len(encode(self.tok, text))

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, make: Callable[[int], tuple[str, list[str]]], lo: int, probe: int, extra: int = 0) -> int:
        """Largest size in [lo, ...] whose prompt + generation budget fits (RULER's binary search)."""
        text, _ = make(probe)
        per_unit = max(self.ntok(text) / probe, 1e-6)
        hi = max(int(self.max_len / per_unit * 3), lo * 2)
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            text, _ = make(mid)
            if self.ntok(text) + extra + self.gen_tokens <= self.max_len:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        if best is None:
            raise ConfigError(
                f"RULER {self.task}: no sample fits in {self.max_len} tokens (with "
                f"{self.gen_tokens} generated); use a longer length"
            )
        return best

    def draw(self, make, size: int, lo: int, step: int) -> tuple[str, list[str], int]:
        """One sample at ``size``, shrinking by ``step`` while it does not fit (RULER's retry loop)."""
        while True:
            text, answers = make(size)
            length = self.ntok(text) + self.gen_tokens
            if length <= self.max_len:
                return text, answers, length
            if size <= lo:
                raise ConfigError(f"RULER {self.task}: sample does not fit in {self.max_len} tokens")
            size = max(lo, size - step)

    def finish(self, index: int, text: str, answers: list[str], length: int, **meta) -> dict:
        prefix_start = text.rfind(TEMPLATES[self.kind]["answer_prefix"][:10])
        if prefix_start < 0:
            raise DataError(f"RULER {self.task}: answer prefix not found in the prompt")
        return {
            "index": index,
            "task": self.task,
            "input": text[:prefix_start],
            "answer_prefix": text[prefix_start:],
            "outputs": [str(a) for a in answers],
            "length": length,
            "max_seq_length": self.max_len,
            "tokens_to_generate": self.gen_tokens,
            **meta,
        }

    # -- random needles ------------------------------------------------------------------------
    def random_value(self, kind: str) -> str:
        if kind == "numbers":
            return str(self.rng.randint(10**6, 10**7 - 1))
        if kind == "words":
            return self.rng.choice(self._needle_words)
        if kind == "uuids":
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        raise ConfigError(f"unknown needle type {kind!r}")

    # -- NIAH ----------------------------------------------------------------------------------
    def niah(self, num_samples: int) -> list[dict]:
        a = self.args
        a["num_needle_k"] = max(a["num_needle_k"], a["num_needle_q"])
        self._needle_words = words.needle_words(self.res.word_lists)
        kind = a["type_haystack"]
        if kind == "essay":
            if not self.res.essay:
                raise DataError(f"RULER {self.task}: needs an essay haystack (--essays)")
            haystack = essay_words(self.res.essay)
        else:
            haystack = None

        def make(n: int):
            keys, values, needles = [], [], []
            for _ in range(a["num_needle_k"]):
                keys.append(self.random_value(a["type_needle_k"]))
                vals = []
                for _ in range(a["num_needle_v"]):
                    vals.append(self.random_value(a["type_needle_v"]))
                    needles.append(NEEDLE.format(type_needle_v=a["type_needle_v"], key=keys[-1], value=vals[-1]))
                values.append(vals)
            random.Random(self.seed).shuffle(needles)
            if kind == "essay":
                if n <= len(haystack):
                    text = " ".join(haystack[:n])
                else:
                    text = " ".join((haystack * math.ceil(n / len(haystack)))[:n])
                sents = split_sentences(text)
                depths = self.rng.sample(DEPTHS, len(needles))
                pos = [0] + sorted(int(len(sents) * d / 100) for d in depths) + [len(sents)]
                parts = []
                for i in range(1, len(pos)):
                    parts.append(" ".join(sents[pos[i - 1] : pos[i]]))
                    if i - 1 < len(needles):
                        parts.append(needles[i - 1])
                context = " ".join(parts)
            else:
                if kind == "noise":
                    sentences = [NOISE] * n
                else:  # "needle": distractor needles with random keys and values
                    sentences = [
                        NEEDLE.format(
                            type_needle_v=a["type_needle_v"],
                            key=self.random_value(a["type_needle_k"]),
                            value=self.random_value(a["type_needle_v"]),
                        )
                        for _ in range(n)
                    ]
                where = self.rng.sample(range(n), len(needles)) if n >= len(needles) else range(len(needles))
                for index, element in zip(sorted(where, reverse=True), needles):
                    sentences.insert(index, element)
                context = "\n".join(sentences)
            idx = self.rng.sample(range(a["num_needle_k"]), a["num_needle_q"])
            queries = [keys[i] for i in idx]
            answers = [v for i in idx for v in values[i]]
            query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
            template, type_v = self.template, a["type_needle_v"]
            if a["num_needle_q"] * a["num_needle_v"] == 1:
                template = template.replace("Some", "A").replace("are all", "is").replace("are", "is")
                template = template.replace("answers", "answer")
                type_v = type_v[:-1]
            return template.format(type_needle_v=type_v, context=context, query=query), answers

        if kind == "essay":
            step = 500 if self.max_len >= 4096 else 25
        else:
            step = 25 if self.max_len >= 4096 else 5
        lo = 1 if kind == "essay" else 0  # 0: the needles alone (tiny contexts)
        size = self.fit(make, lo, step)
        out = []
        for i in range(num_samples):
            text, answers, length = self.draw(make, size, lo, step)
            out.append(self.finish(i, text, answers, length, haystack_size=size))
        return out

    # -- variable tracking ---------------------------------------------------------------------
    def vt(self, num_samples: int) -> list[dict]:
        a = self.args
        hops, chains_n = a["num_hops"], a["num_chains"]

        def chains(is_icl: bool):
            k = 3 if is_icl else 5
            h = min(10, hops) if is_icl else hops
            names = ["".join(self.rng.choices(string.ascii_uppercase, k=k)) for _ in range((h + 1) * chains_n)]
            while len(set(names)) < chains_n * (h + 1):
                names.append("".join(self.rng.choices(string.ascii_uppercase, k=k)))
            var_sets, chain_sets = [], []
            for i in range(0, len(names), h + 1):
                v = names[i : i + h + 1]
                var_sets.append(v)
                first = "12345" if is_icl else str(self.nprng.randint(10000, 99999))
                c = [f"VAR {v[0]} = {first}"] + [f"VAR {v[j + 1]} = VAR {v[j]} " for j in range(h)]
                chain_sets.append(c)
            return var_sets, chain_sets

        def make_base(n: int, is_icl: bool):
            var_sets, chain_sets = chains(is_icl)
            value = chain_sets[0][0].split("=")[-1].strip()
            sentences = [NOISE] * n
            for chain in chain_sets:
                positions = sorted(self.rng.sample(range(len(sentences)), len(chain))) if len(sentences) >= len(chain) else [0] * len(chain)
                for p, j in zip(positions, range(len(chain))):
                    sentences.insert(p + j, chain[j])
            context = "\n".join(sentences).replace(". \n", ".\n")
            h = min(10, hops) if is_icl else hops
            return self.template.format(context=context, query=value, num_v=h + 1), var_sets[0]

        # the in-context example: RULER builds it with a 500-token budget and no generation budget
        icl_budget = 500 if self.max_len >= 4096 else max(64, self.max_len // 4)
        saved_len, saved_gen = self.max_len, self.gen_tokens
        self.max_len, self.gen_tokens = icl_budget, 0
        try:
            icl_size = self.fit(lambda n: make_base(n, True), 1, 5)
        except ConfigError:
            icl_size = 1
        icl_text, icl_out = make_base(icl_size, True)
        self.max_len, self.gen_tokens = saved_len, saved_gen
        icl = icl_text + " " + " ".join(icl_out) + "\n"
        example_tokens = self.ntok(icl)

        def randomize_icl(example: str) -> str:
            for item in example.strip().split()[-hops - 1 :]:
                example = example.replace(item, "".join(self.rng.choices(string.ascii_uppercase, k=len(item))))
            return example.replace("12345", str(self.nprng.randint(10000, 99999)))

        use_icl = True

        def make(n: int):
            text, answers = make_base(n, False)
            if not use_icl:
                return text, answers
            cut = text.index(TEMPLATES["variable_tracking"]["template"][:20])
            return text[:cut] + randomize_icl(icl) + "\n" + text[cut:], answers

        step = 10 if self.max_len >= 4096 else 5
        try:
            size = self.fit(lambda n: make_base(n, False), 1, step, extra=example_tokens)
        except ConfigError:
            use_icl = False  # below RULER's sizes: no room for the in-context example
            size = self.fit(lambda n: make_base(n, False), 1, step)
        out = []
        for i in range(num_samples):
            text, answers, length = self.draw(make, size, 1, step)
            out.append(self.finish(i, text, answers, length, haystack_size=size, fewshot=use_icl))
        return out

    # -- common words extraction ---------------------------------------------------------------
    def cwe(self, num_samples: int) -> list[dict]:
        a = self.args
        num_cw = a["num_cw"]
        vocabulary = words.common_words(self.res.word_lists)
        random.Random(self.seed).shuffle(vocabulary)
        big = sorted(set(self.res.word_list or []) | set(vocabulary))

        def example(num_words: int, common_rep: int, uncommon_rep: int):
            pool = vocabulary
            if num_words > len(pool):
                pool = big
                if num_words > len(pool):
                    pool = pool + words.pseudo_words(num_words - len(pool), set(pool))
            full = self.rng.sample(pool, num_words)
            common, uncommon = full[:num_cw], full[num_cw:]
            lst = common * common_rep + uncommon * uncommon_rep
            random.Random(self.seed).shuffle(lst)
            return " ".join(f"{i + 1}. {w}" for i, w in enumerate(lst)), common

        small = self.max_len < 4096
        # (few-shot example?, common repeats, uncommon repeats): RULER's setting first, then the
        # reductions used only when nothing fits (contexts of a few hundred tokens)
        settings = [(True, 6, 1), (False, 6, 1), (False, 3, 1)] if small else [(True, a["freq_cw"], a["freq_ucw"])]
        setting = settings[0]

        def make(n: int):
            shots = []
            if setting[0]:
                ctx, ans = example(20, 3, 1) if small else example(40, 10, 3)
                shots.append(
                    self.template.format(num_cw=num_cw, context=ctx, query="")
                    + " "
                    + " ".join(f"{i + 1}. {w}" for i, w in enumerate(ans))
                )
            ctx, ans = example(n, setting[1], setting[2])
            text = self.template.format(num_cw=num_cw, context=ctx, query="")
            return "\n".join(shots) + "\n" + text, ans

        size = None
        for setting in settings:
            try:
                size = self.fit(make, num_cw, max(num_cw, min(4096, self.max_len // 4)))
                break
            except ConfigError:
                if setting == settings[-1]:
                    raise
        out = []
        for i in range(num_samples):
            text, answers, length = self.draw(make, size, num_cw, 10)
            out.append(self.finish(i, text, answers, length, num_words=size, fewshot=setting[0],
                                   repeats=[setting[1], setting[2]]))
        return out

    # -- frequent words extraction -------------------------------------------------------------
    def fwe(self, num_samples: int) -> list[dict]:
        alpha = float(self.args["alpha"])
        coded_len = 6
        max_len = self.max_len - self.gen_tokens
        vocab_size = max(max_len // 50, 5)
        z = _zeta(alpha)

        def build(max_tokens: int, num_words: int = -1, incremental: int = 10):
            vocab = ["".join(self.rng.choices(string.ascii_lowercase, k=coded_len)) for _ in range(vocab_size)]
            while len(set(vocab)) < vocab_size:
                vocab.append("".join(self.rng.choices(string.ascii_lowercase, k=coded_len)))
            vocab = sorted(set(vocab))
            random.Random(self.seed).shuffle(vocab)
            vocab[0] = "..."  # the top-ranked word is noise

            def gen_text(n: int):
                k = np.arange(1, len(vocab) + 1)
                counts = (n * (k ** -alpha) / z).astype(int)
                sampled = [w for w, c in zip(vocab, counts) for _ in range(c)]
                random.Random(self.seed).shuffle(sampled)
                return self.template.format(context=" ".join(sampled), query=""), vocab[1:4]

            if num_words > 0:
                text, ans = gen_text(num_words)
                while self.ntok(text) > max_tokens and num_words > incremental:
                    num_words -= incremental
                    text, ans = gen_text(num_words)
            else:
                num_words = max_tokens // coded_len
                text, ans = gen_text(num_words)
                while self.ntok(text) < max_tokens:
                    num_words += incremental
                    text, ans = gen_text(num_words)
                num_words -= incremental
            text, ans = gen_text(num_words)
            return text, ans, num_words

        inc = max(1, max_len // 32)
        _, _, n_words = build(max_len, incremental=inc)
        out = []
        for i in range(num_samples):
            text, ans, _ = build(max_len, num_words=n_words, incremental=inc)
            length = self.ntok(text) + self.gen_tokens
            if length > self.max_len:
                raise ConfigError(f"RULER fwe: sample does not fit in {self.max_len} tokens")
            out.append(self.finish(i, text, ans, length, num_words=n_words))
        return out

    # -- QA ------------------------------------------------------------------------------------
    def qa(self, num_samples: int) -> list[dict]:
        name = self.args["dataset"]
        data = self.res.squad if name == "squad" else self.res.hotpotqa
        if data is None:
            raise DataError(f"RULER {self.task}: needs {name} data (--{name} FILE or a QA text substitute)")
        qas, docs = data
        if num_samples > len(qas):
            raise DataError(f"RULER {self.task}: {num_samples} samples requested, {len(qas)} questions available")

        def make_for(index: int):
            def make(n: int):
                q = qas[index]
                cur, more = list(q["context"]), list(q.get("more_context", []))
                if n < len(docs):
                    if n - len(cur) > len(more):
                        pool = sorted(set(range(len(docs))) - set(cur) - set(more))
                        chosen = cur + more + self.rng.sample(pool, max(0, n - len(cur) - len(more)))
                    else:
                        chosen = cur + self.rng.sample(more, max(0, n - len(cur)))
                    all_docs = [docs[i] for i in chosen]
                else:
                    all_docs = (docs * math.ceil(n / len(docs)))[:n]
                random.Random(self.seed).shuffle(all_docs)
                context = "\n\n".join(DOCUMENT_PROMPT.format(i=i + 1, document=d) for i, d in enumerate(all_docs))
                return self.template.format(context=context, query=q["query"]), q["outputs"]

            return make

        step = 10 if self.max_len >= 4096 else 1
        size = None
        for q0 in range(min(len(qas), 50)):  # RULER fits on question 0; skip ones that cannot fit
            lo = len(qas[q0]["context"])
            try:
                size = self.fit(make_for(q0), lo, min(10, max(lo, len(docs))))
                break
            except ConfigError:
                continue
        if size is None:
            raise ConfigError(f"RULER {self.task}: no question fits in {self.max_len} tokens")
        out = []
        q = 0
        while len(out) < num_samples:
            if q >= len(qas):
                raise DataError(f"RULER {self.task}: only {len(out)} questions fit in {self.max_len} tokens")
            lo_q = len(qas[q]["context"])
            try:
                text, answers, length = self.draw(make_for(q), max(size, lo_q), lo_q, step)
            except ConfigError:  # its gold documents alone are too long: take the next question
                q += 1
                continue
            out.append(self.finish(len(out), text, answers, length, num_docs=size, question_index=q))
            q += 1
        return out


def _zeta(alpha: float) -> float:
    """Riemann zeta(alpha), alpha > 1 (scipy.special.zeta when available)."""
    try:
        from scipy.special import zeta

        return float(zeta(alpha))
    except ImportError:
        n = 100_000
        k = np.arange(1, n + 1, dtype=np.float64)
        return float(np.sum(k**-alpha) + n ** (1 - alpha) / (alpha - 1) - 0.5 * n**-alpha)


def generate_task(
    task: str,
    tokenizer,
    max_seq_length: int,
    num_samples: int,
    *,
    seed: int = SEED,
    resources: Resources | None = None,
) -> list[dict]:
    """``num_samples`` samples of ``task`` at ``max_seq_length`` tokens (prompt + generation budget)."""
    if task not in TASK_CONFIGS:
        raise ConfigError(f"unknown RULER task {task!r}; known: {', '.join(TASK_NAMES)}")
    if num_samples <= 0:
        raise ConfigError(f"num_samples must be positive, got {num_samples}")
    g = _Gen(task, tokenizer, max_seq_length, seed, resources or Resources())
    kind = g.kind
    if kind == "niah":
        return g.niah(num_samples)
    if kind == "variable_tracking":
        return g.vt(num_samples)
    if kind == "common_words_extraction":
        return g.cwe(num_samples)
    if kind == "freq_words_extraction":
        return g.fwe(num_samples)
    return g.qa(num_samples)
