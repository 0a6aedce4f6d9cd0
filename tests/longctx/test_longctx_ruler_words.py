"""RULER's word lists: the paper config's needles and common-words task draw on wonderwords'
nouns, adjectives and verbs as NVIDIA's RULER does, with no invented word at 65,536 tokens; the
tiny default keeps its built-in lists (its RULER data unchanged) whether or not wonderwords is
installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shapelm.errors import ConfigError
from shapelm.longctx.plan import longctx_settings
from shapelm.longctx.ruler import words as W
from shapelm.longctx.ruler.run import load_resources
from shapelm.longctx.ruler.tasks import Resources, generate_task
from shapelm.plan.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]
_ENTRY = re.compile(r"\d+\. (.+?)(?= \d+\. |\n|$)")


def _listed(text: str) -> set[str]:
    """The words of a cwe prompt's numbered lists (wonderwords has some two-word nouns)."""
    return {m.group(1).strip() for m in _ENTRY.finditer(text)}


def test_configs_choose_their_lists():
    assert longctx_settings(load_experiment(ROOT / "configs" / "paper.yaml"))["ruler_word_lists"] == W.WONDERWORDS
    assert longctx_settings(load_experiment(ROOT / "configs" / "default.yaml"))["ruler_word_lists"] == W.BUILTIN


def test_wonderwords_lists_as_ruler_reads_them(monkeypatch):
    from wonderwords import random_word

    get = random_word._get_words_from_text_file
    nouns, adjs, verbs = get("nounlist.txt"), get("adjectivelist.txt"), get("verblist.txt")
    assert W.common_words(W.WONDERWORDS) == sorted(set(nouns + adjs + verbs))
    assert len(W.common_words(W.WONDERWORDS)) > 8000
    assert load_resources(word_lists=W.WONDERWORDS).notes["word_lists"] == "wonderwords"
    # the needles, as RULER's niah.py builds them (every adjective-noun pair, sorted, once each),
    # on every 7th noun and adjective: the whole lists' 6.2M keys take ~9 s to build and sort
    nouns, adjs = nouns[::7], adjs[::7]
    monkeypatch.setattr(W, "_wonderwords", lambda: (nouns, adjs, verbs))
    W._needle_words.cache_clear()
    try:
        assert W.needle_words(W.WONDERWORDS) == sorted({f"{a}-{n}" for a in adjs for n in nouns})
        assert len(W.needle_words(W.WONDERWORDS)) > 100_000
    finally:
        W._needle_words.cache_clear()


def test_default_keeps_the_builtin_lists():
    """Installed or not, wonderwords is used only when chosen: the default's words are the built-in ones."""
    builtin = sorted(set(W.NOUNS + W.ADJECTIVES + W.VERBS))
    assert W.common_words() == builtin and Resources().word_lists == W.BUILTIN
    res = load_resources()
    assert res.word_lists == W.BUILTIN and res.notes["word_lists"] == "built-in"
    with pytest.raises(ConfigError, match="ruler_word_lists"):
        W.common_words("english")


@pytest.fixture(scope="module")
def compact_tokenizer():
    """A BPE that writes most list entries in one or two tokens: the most words a 65,536-token
    prompt can ask for (a real tokenizer spends more tokens a word, so needs fewer)."""
    from shapelm.data.tokenizer import train_bpe

    words = W.common_words(W.WONDERWORDS)
    return train_bpe([" ".join(f"{i + 1}. {w}" for i, w in enumerate(words))] * 3, 16000)


def test_paper_cwe_at_64k_has_no_invented_word(compact_tokenizer):
    paper = longctx_settings(load_experiment(ROOT / "configs" / "paper.yaml"))
    length = 65536
    assert length in paper["lengths"]
    res = Resources(word_lists=paper["ruler_word_lists"])
    sample = generate_task("cwe", compact_tokenizer, length, 1, resources=res)[0]
    listed = _listed(sample["input"])
    assert len(listed) > 4000  # a long list, drawn from the real lists
    assert listed <= set(W.common_words(W.WONDERWORDS))
    # the built-in lists would need invented words at this length
    builtin = _listed(generate_task("cwe", compact_tokenizer, length, 1, resources=Resources())[0]["input"])
    assert builtin - set(W.common_words())


def test_builtin_lists_refused_where_they_run_out(compact_tokenizer):
    """At BUILTIN_WORDS_MAX_LENGTH the built-in lists still suffice; beyond it a plan on them is refused."""
    from shapelm.longctx.plan import BUILTIN_WORDS_MAX_LENGTH, check_longctx

    at = _listed(generate_task("cwe", compact_tokenizer, BUILTIN_WORDS_MAX_LENGTH, 1, resources=Resources())[0]["input"])
    assert at <= set(W.common_words())
    paper = load_experiment(ROOT / "configs" / "paper.yaml")
    assert not [e for e in check_longctx(paper) if "ruler_word_lists" in e]
    paper.raw["longctx"]["ruler_word_lists"] = "builtin"
    assert [e for e in check_longctx(paper) if "ruler_word_lists: builtin holds cwe up to 8192" in e]
