"""Tokenizers: dolma2 (real runs) from a local file or HF cache, or a small byte-level BPE.

``load_tokenizer(spec)`` returns a ``tokenizers.Tokenizer``:

* a path to a ``tokenizer.json``;
* a directory holding ``tokenizer.json`` (e.g. a downloaded model dir, an HF cache snapshot
  ``.../models--allenai--dolma2-tokenizer/snapshots/<rev>/``, or the repo cache dir
  ``.../models--allenai--dolma2-tokenizer`` whose ``refs/main`` snapshot is used);
* an HF repo id such as ``"allenai/dolma2-tokenizer"``, optionally ``@REVISION`` (a branch, tag
  or commit): looked up in the local HF cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
  ``~/.cache/huggingface/hub``) with ``huggingface_hub.try_to_load_from_cache``, which resolves
  ``refs/<revision>`` the way a download left it; never downloaded (plan-time checks and jobs
  run with ``HF_HUB_OFFLINE=1``: the workflow's ``fetch`` jobs, or ``hf download REPO``, fill the
  cache beforehand);
* ``"default"`` or ``"default:<vocab>"``: the byte-level BPE of the embedded default corpus,
  trained once (:func:`shapelm.data.corpus.default_tokenizer`) and cached.

:func:`train_bpe` trains a byte-level BPE with HF ``tokenizers`` (deterministic; special token
``<|endoftext|>`` is id 0 and serves as EOS).

:func:`tokenizer_eos_id` finds a tokenizer's EOS the way its HF repo declares it
(``tokenizer_config.json`` beside the file), so stand-ins and real tokenizers need no hard-coded
ids; :data:`KNOWN_VOCAB_SIZES` lets plan-time checks know a vocabulary without the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from shapelm import files
from shapelm.errors import DataError

EOS_TOKEN = "<|endoftext|>"
#: EOS spellings tried, in order, when no tokenizer_config.json names one
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>")
#: ids (with added tokens) of the tokenizers the configs name; the file's own size wins if present
KNOWN_VOCAB_SIZES = {
    "allenai/dolma2-tokenizer": 100278,  # OLMo-2; EOS 100257, pad 100277
    "allenai/gpt-neox-olmo-dolma-v1_5": 50280,  # OLMo-1 / LWS; EOS 50279, padded to 50304
    "meta-llama/Llama-2-7b-hf": 32000,  # Llama 2 (Tapered's 32K); EOS </s> = 2
    "mistralai/Mistral-7B-v0.1": 32000,
    "meta-llama/Meta-Llama-3-8B": 128256,  # what Tapered's text names, but 128K, not 32K
    "gpt2": 50257,
}


def _hf_cache_dirs() -> list[Path]:
    """The hub caches searched, in order, read from the environment at call time (huggingface_hub
    reads its own constants once, at import, before a test or a rehearsal sets them)."""
    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def split_revision(spec: str) -> tuple[str, str | None]:
    """``"owner/name@rev"`` -> ``("owner/name", "rev")``; no ``@``: revision None (main)."""
    repo, sep, rev = spec.partition("@")
    return repo, (rev or None) if sep else None


def cached_repo_file(repo: str, filename: str, revision: str | None = None,
                     cache_dirs: list[Path] | None = None) -> Path | None:
    """``filename`` of model repo ``repo`` at ``revision`` in the first local hub cache holding it
    (``huggingface_hub.try_to_load_from_cache``: no network), or None."""
    from huggingface_hub import try_to_load_from_cache

    for cache in cache_dirs if cache_dirs is not None else _hf_cache_dirs():
        found = try_to_load_from_cache(repo, filename, cache_dir=cache, revision=revision)
        if isinstance(found, str):  # None: not cached; a sentinel: cached as absent from the repo
            return Path(found)
    return None


def _find_in_dir(d: Path) -> Path | None:
    if (d / "tokenizer.json").is_file():
        return d / "tokenizer.json"
    if d.name.startswith("models--") and (d / "snapshots").is_dir():  # a repo's cache dir
        repo = d.name[len("models--"):].replace("--", "/")
        return cached_repo_file(repo, "tokenizer.json", cache_dirs=[d.parent])
    return None


def resolve_tokenizer_file(spec: str | os.PathLike) -> Path:
    """Find the ``tokenizer.json`` a file/dir/repo-id spec refers to (see module docstring)."""
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        f = _find_in_dir(p)
        if f is None:
            raise DataError(f"{p}: no tokenizer.json in this directory or its HF snapshots")
        return f
    s = str(spec)
    repo, revision = split_revision(s)
    if "/" in repo and not repo.startswith((".", "/", "~")) and repo.count("/") == 1:
        f = cached_repo_file(repo, "tokenizer.json", revision)
        if f is not None:
            return f
        at = f" at revision {revision!r}" if revision else ""
        raise DataError(
            f"tokenizer {s!r}: not in the local HF cache{at} ({', '.join(map(str, _hf_cache_dirs()))})"
            f"; download it there (the workflow's fetch job, or: hf download {repo}"
            + (f" --revision {revision}" if revision else "") + ") or pass the path of its tokenizer.json"
        )
    raise DataError(f"tokenizer {s!r}: no such file or directory")


def load_tokenizer(spec: str | os.PathLike, cache_dir: str | os.PathLike | None = None):
    """Return a ``tokenizers.Tokenizer`` for ``spec`` (see module docstring)."""
    from tokenizers import Tokenizer

    s = str(spec)
    if s == "default" or s.startswith("default:"):
        from shapelm.data.corpus import DEFAULT_VOCAB, default_tokenizer

        vocab = int(s.split(":", 1)[1]) if ":" in s else DEFAULT_VOCAB
        return default_tokenizer(vocab_size=vocab, cache_dir=cache_dir)
    f = resolve_tokenizer_file(spec)
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:  # tokenizers raises a plain Exception on bad JSON
        raise DataError(f"{f}: not a valid tokenizers JSON file ({e})") from e


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    out_path: str | os.PathLike | None = None,
    *,
    special_tokens: Sequence[str] = (EOS_TOKEN,),
    added_tokens: Sequence[str] = (),
):
    """Train a byte-level BPE on ``texts`` and return it (saved to ``out_path`` if given).

    Byte-level pre-tokenization (GPT-2 regex, no prefix space), every byte in the initial
    alphabet (so any text encodes), ``special_tokens`` first (default ``<|endoftext|>`` = id 0).
    ``added_tokens`` are special tokens appended after the learned vocabulary (ids
    ``vocab_size, vocab_size + 1, ...``), where dolma2 and GPT-NeoX keep their EOS. Training is
    deterministic for the same texts and vocab size.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + len(special_tokens) + 1:
        raise DataError(f"vocab_size {vocab_size} too small for a byte-level BPE (>= 258)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if added_tokens:
        tok.add_special_tokens(list(added_tokens))
    if out_path is not None:
        with files.atomic_path(out_path) as tmp:
            tok.save(str(tmp))
    return tok


def eos_id_of(tok) -> int:
    """The id of ``<|endoftext|>`` (dolma2: 100257)."""
    i = tok.token_to_id(EOS_TOKEN)
    if i is None:
        raise DataError(f"tokenizer has no {EOS_TOKEN} token")
    return int(i)


def tokenizer_eos_id(tok, tokenizer_file: str | os.PathLike | None = None) -> int:
    """The EOS id of ``tok``: the ``eos_token`` of the ``tokenizer_config.json`` beside
    ``tokenizer_file`` (as HF repos ship it), else the first of :data:`EOS_CANDIDATES` present."""
    names = list(EOS_CANDIDATES)
    if tokenizer_file is not None:
        cfg = Path(tokenizer_file).with_name("tokenizer_config.json")
        if cfg.is_file():
            try:
                eos = json.loads(cfg.read_text()).get("eos_token")
            except json.JSONDecodeError as e:
                raise DataError(f"{cfg}: invalid JSON ({e})") from e
            if isinstance(eos, dict):  # older repos store an AddedToken dict
                eos = eos.get("content")
            if eos:
                i = tok.token_to_id(eos)
                if i is None:
                    raise DataError(f"{cfg}: eos_token {eos!r} is not in {tokenizer_file}")
                return int(i)
    for name in names:
        i = tok.token_to_id(name)
        if i is not None:
            return int(i)
    where = tokenizer_file or "tokenizer"
    raise DataError(f"{where}: no EOS token (none of {names}, no tokenizer_config.json eos_token)")


def vocab_size_of(tok) -> int:
    """Number of ids, added (special) tokens included: what a model's embedding must hold."""
    return int(tok.get_vocab_size(with_added_tokens=True))


def local_vocab_size(spec: str) -> int | None:
    """Vocabulary of ``spec`` if its tokenizer.json is found locally (never downloads), else None."""
    if str(spec) == "default" or str(spec).startswith("default:"):
        return None
    try:
        f = resolve_tokenizer_file(spec)
    except DataError:
        return None
    return vocab_size_of(load_tokenizer(f))
