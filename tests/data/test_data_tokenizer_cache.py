"""Tokenizers from the local HF hub cache through huggingface_hub: revisions, offline, errors."""

import pytest

from shapelm.data.tokenizer import (
    load_tokenizer,
    resolve_tokenizer_file,
    tokenizer_eos_id,
    train_bpe,
)
from shapelm.errors import DataError


def cache_repo(hub, repo, revisions: dict[str, str], refs: dict[str, str], tokenizers: dict):
    """The layout `hf download` leaves: blobs behind snapshots/<commit>/, refs/<name>."""
    d = hub / ("models--" + repo.replace("/", "--"))
    for commit, tok in tokenizers.items():
        snap = d / "snapshots" / commit
        snap.mkdir(parents=True)
        tok.save(str(snap / "tokenizer.json"))
        (snap / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}')
    (d / "refs").mkdir(parents=True, exist_ok=True)
    for name, commit in refs.items():
        (d / "refs" / name).write_text(commit)
    return d


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    small = train_bpe(["alpha beta gamma " * 40], 270)
    large = train_bpe(["alpha beta gamma delta epsilon zeta " * 40], 300)
    c1, c2 = "a" * 40, "b" * 40
    cache_repo(hub, "org/tok", {}, {"main": c2, "v1": c1}, {c1: small, c2: large})
    return hub, small, large, c1


def test_repo_id_and_revision_resolve_through_the_hub_cache(hub):
    root, small, large, c1 = hub
    assert load_tokenizer("org/tok").get_vocab_size() == large.get_vocab_size()  # refs/main
    assert load_tokenizer("org/tok@v1").get_vocab_size() == small.get_vocab_size()  # a tag/branch ref
    assert load_tokenizer(f"org/tok@{c1}").get_vocab_size() == small.get_vocab_size()  # a commit
    f = resolve_tokenizer_file("org/tok@v1")
    assert f.parent.name == c1 and tokenizer_eos_id(load_tokenizer(f), f) == 0
    # the repo's cache directory given as a path resolves refs/main the same way
    assert resolve_tokenizer_file(root / "models--org--tok").parent.name == "b" * 40


def test_a_revision_or_repo_missing_from_the_cache_is_named(hub):
    with pytest.raises(DataError, match=r"'org/tok@v2': not in the local HF cache at revision 'v2'.*--revision v2"):
        load_tokenizer("org/tok@v2")
    with pytest.raises(DataError, match=r"hf download other/tok\)"):
        load_tokenizer("other/tok")
