"""Data choices per scale, and the plan-time data checks: what each scale trains on, and what
would fail later.

A run's data section is the top-level ``data:`` merged with its scale's ``data:``
(``shapelm.plan.runs.resolve_run``). Keys (docs/DATA.md section 7):

* ``source``: ``olmo`` (fixed-order OLMo-2 stage-1 slices, dolma2 ids) or ``default``.
* ``tokenizer``: the tokenizer of the tokens the run trains and is evaluated on. For ``olmo``
  it defaults to the source's (``data.olmo.tokenizer``, else dolma2).
* ``retokenize: {over_slice: R}``: the run's tokenizer is not the source's, so the scale's slice
  of ``ceil(total_tokens * R)`` source tokens is decoded and re-encoded with it
  (:mod:`shapelm.data.retokenize`), and so are its validation sets.
* ``vocab_size``: the tokenizer's vocabulary when neither its file nor
  :data:`~shapelm.data.tokenizer.KNOWN_VOCAB_SIZES` knows it.

:func:`check_data` returns every problem a config would otherwise hit only once jobs run (a
32K-vocabulary model meeting dolma2 ids at step 0, an eval set the source does not have), each
naming the run or scale and the key to change. The workflow helpers here (``source_tokens``,
``tokenizer_slug``, ...) are what ``workflow/rules/data.smk`` calls.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from pathlib import Path
from typing import Any

SOURCE_KINDS = ("default", "olmo")
DEFAULT_OVER_SLICE = 1.0
DEFAULT_CORPUS_VOCAB = 4096  # the default_corpus rule's default vocab_size


# -- what a scale trains on ---------------------------------------------------------------
def scale_data(raw: dict[str, Any], scale: str) -> dict[str, Any]:
    """The data section a scale's runs get: top-level ``data`` merged with the scale's."""
    from shapelm.config import merge

    return merge(raw.get("data", {}), raw.get("scales", {}).get(scale, {}).get("data", {}))


def source_kind(data: dict[str, Any]) -> str:
    return data.get("source", "default")


def source_tokenizer(data: dict[str, Any]) -> str:
    """The tokenizer the olmo source's ids are in (``data.olmo.tokenizer``, else the shipped
    config's dolma2)."""
    from shapelm.data.validation import load_olmo_config

    return data.get("olmo", {}).get("tokenizer") or load_olmo_config()["tokenizer"]


def run_tokenizer(data: dict[str, Any]) -> str:
    """The tokenizer of the tokens a run trains and is evaluated on (olmo source)."""
    return data.get("tokenizer") or source_tokenizer(data)


def retokenizes(data: dict[str, Any]) -> bool:
    return source_kind(data) == "olmo" and data.get("retokenize") is not None


def over_slice(data: dict[str, Any]) -> float:
    return float((data.get("retokenize") or {}).get("over_slice", DEFAULT_OVER_SLICE))


def heldout_tokens(raw: dict[str, Any], scale: str) -> int:
    """Tokens right after a scale's training budget that its held-out split of the training
    stream takes: ``train.eval_heldout_sequences x seq_len`` (shapelm.train.evaluator)."""
    from shapelm.config import merge

    train = merge(raw.get("train_defaults", {}), raw["scales"][scale].get("train", {}))
    return int(train.get("eval_heldout_sequences", 0) or 0) * int(train.get("seq_len", 4096))


def stream_tokens(raw: dict[str, Any], scale: str) -> int:
    """Tokens a scale's training stream holds: the budget, then the held-out split."""
    return int(float(raw["scales"][scale]["train"]["total_tokens"])) + heldout_tokens(raw, scale)


def source_tokens(raw: dict[str, Any], scale: str) -> int:
    """Source tokens to slice for a scale: its stream (``train.total_tokens`` plus the held-out
    split), times ``over_slice`` when the scale re-tokenizes (the re-encoded stream must hold it;
    32K and 50K tokenizers spend more tokens per byte than dolma2's 100K, so 1.0 is normally
    enough)."""
    total = stream_tokens(raw, scale)
    data = scale_data(raw, scale)
    return math.ceil(total * over_slice(data)) if retokenizes(data) else total


def tokenizer_slug(spec: str) -> str:
    """A directory name for a tokenizer: ``org--name`` for an HF repo id (the HF cache's
    spelling), else a cleaned name plus a short hash of the spec."""
    s = str(spec)
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", s) and not Path(s).exists():
        return s.replace("/", "--")
    import hashlib

    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(s).name or s).strip("-.") or "tokenizer"
    return f"{stem}-{hashlib.sha256(s.encode()).hexdigest()[:8]}"


def source_validation_sets(kind: str) -> list[str]:
    """The validation sets a source kind produces."""
    if kind == "olmo":
        from shapelm.data.validation import load_olmo_config

        return list(load_olmo_config()["validation"]["sets"])
    from shapelm.data.corpus import VAL_SET

    return list(VAL_SET.values())


# -- checks ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _env(env: dict[str, Any]):
    """The experiment's ``env:`` (e.g. a rehearsal's HF_HUB_CACHE) while tokenizers are looked up."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _key(raw: dict[str, Any], scale: str, key: str) -> str:
    """Where a scale's data key comes from: set on the scale, inherited, or unset."""
    def lookup(section: dict) -> Any:
        head, _, tail = key.partition(".")
        value = section.get(head)
        return value.get(tail) if tail and isinstance(value, dict) else (None if tail else value)

    here = f"scales.{scale}.data.{key}"
    if lookup(raw["scales"][scale].get("data", {})) is not None:
        return here
    if lookup(raw.get("data", {})) is not None:
        return f"{here}, inherited from data.{key}"
    return f"{here}, unset"


def _vocab(raw: dict[str, Any], scale: str, data: dict[str, Any], cache: dict) -> tuple[int | None, str, list[str]]:
    """(vocabulary of the data a scale's runs train on, what it is, errors finding it)."""
    from shapelm.data.tokenizer import KNOWN_VOCAB_SIZES, local_vocab_size

    if source_kind(data) == "default":
        n = int(data.get("default_corpus", {}).get("vocab_size", DEFAULT_CORPUS_VOCAB))
        return n, f"the default corpus BPE ({_key(raw, scale, 'default_corpus.vocab_size')})", []
    tok = run_tokenizer(data)
    what = f"tokenizer {tok} ({_key(raw, scale, 'tokenizer')})"
    if tok not in cache:
        cache[tok] = local_vocab_size(tok)
    local, explicit = cache[tok], data.get("vocab_size")
    if explicit is not None:
        if local is not None and local != int(explicit):
            return None, what, [
                f"scales.{scale}: data.vocab_size {explicit} ({_key(raw, scale, 'vocab_size')}) "
                f"disagrees with the {local} ids of {what}'s tokenizer file"
            ]
        return int(explicit), what, []
    n = local if local is not None else KNOWN_VOCAB_SIZES.get(tok)
    if n is None:
        return None, what, [
            f"scales.{scale}: vocabulary of {what} unknown: put its tokenizer.json in the HF "
            f"cache, or set scales.{scale}.data.vocab_size"
        ]
    return n, what, []


def _scale_errors(raw: dict[str, Any], scale: str, data: dict[str, Any]) -> list[str]:
    kind, top_kind = source_kind(data), source_kind(raw.get("data", {}))
    where = f"scales.{scale}"
    if kind not in SOURCE_KINDS:
        return [f"{where}: unknown data source kind {kind!r} ({_key(raw, scale, 'source')}); "
                f"known: {', '.join(SOURCE_KINDS)}"]
    errors = []
    if kind != top_kind:
        errors.append(f"{where}: data source {kind!r} differs from the experiment's {top_kind!r} "
                      f"({_key(raw, scale, 'source')}); one source kind per experiment")
    if kind == "default" and data.get("retokenize") is not None:
        errors.append(f"{where}: data.retokenize needs source olmo; the default corpus is built "
                      f"in its own tokenizer ({_key(raw, scale, 'retokenize')})")
    if kind == "olmo":
        src, tok = source_tokenizer(data), run_tokenizer(data)
        if retokenizes(data) and tok == src:
            errors.append(
                f"{where}: data.retokenize has no target tokenizer: the run tokenizer is the "
                f"source's {src} ({_key(raw, scale, 'tokenizer')}); set scales.{scale}.data.tokenizer "
                "to the tokenizer to re-encode with"
            )
        if not retokenizes(data) and tok != src:
            errors.append(
                f"{where}: data.tokenizer {tok} ({_key(raw, scale, 'tokenizer')}) is not the "
                f"tokenizer of the olmo source ({src}) and nothing re-encodes it; add "
                f"scales.{scale}.data.retokenize: {{over_slice: 1.0}}"
            )
    known = source_validation_sets(kind)
    unknown = [v for v in data.get("validation_sets", []) if v not in known]
    if unknown:
        errors.append(f"{where}: validation set(s) {unknown} are not produced by source {kind} "
                      f"({_key(raw, scale, 'validation_sets')}); it has {known}")
    return errors


def _path_errors(data: dict[str, Any]) -> list[str]:
    from shapelm.data.sources import is_url

    paths = data.get("olmo", {}).get("paths")
    if source_kind(data) == "olmo" and paths and not is_url(paths) and not Path(paths).is_file():
        return [f"data.olmo.paths: path list {paths} not found"]
    return []


def check_data(exp) -> list[str]:
    """Every data problem of an experiment (an ``Experiment`` from ``load_experiment``), as
    messages naming the run or scale and the config key; empty when the data choices are sound."""
    raw = exp.raw
    errors: list[str] = []
    vocab_cache: dict[str, int | None] = {}
    with _env(raw.get("env", {})):
        errors += _path_errors(raw.get("data", {}))
        scales = list(dict.fromkeys(run["scale"] for run in exp.runs.values()))
        vocab: dict[str, tuple[int | None, str]] = {}
        for scale in scales:
            data = scale_data(raw, scale)
            scale_errors = _scale_errors(raw, scale, data)
            errors += scale_errors
            if source_kind(data) not in SOURCE_KINDS:
                vocab[scale] = (None, "")
                continue
            n, what, vocab_errors = _vocab(raw, scale, data, vocab_cache)
            errors += vocab_errors
            vocab[scale] = (n, what)
        for name, run in exp.runs.items():
            n, what = vocab[run["scale"]]
            model = int(run["model"]["vocab_size"])
            if n is not None and model < n:
                name = run.get("seed_group", {}).get("run", name)  # a seed instance: its run's key
                key = (f"runs.{name}.arch.vocab_size" if "vocab_size" in raw["runs"][name]["arch"]
                       else "model_defaults.vocab_size")
                errors.append(
                    f"runs.{name}: model vocab_size {model} ({key}) < data vocabulary {n} of {what}"
                )
    return list(dict.fromkeys(errors))
