"""Proof-pile perplexity at several context lengths (YaRN paper protocol, docs/PAPER_NOTES.md protocol 9).

Documents of at least ``min_tokens`` tokens (default 131,072) from the test split, the first
``num_docs`` (10); for every evaluated length L each document is truncated to its first L tokens
and scored in a single window (L - 1 predicted tokens). PPL(L) = exp(mean over documents of the
per-document mean NLL). The mean of per-document PPLs (what jquesnelle/yarn's script prints) is
reported beside it as ``mean_doc_ppl``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import torch

from shapelm import files
from shapelm.errors import ConfigError


@torch.no_grad()
def document_nll(model, tokens: np.ndarray, *, loss_chunk_tokens: int = 4096, device=None) -> float:
    """Mean next-token NLL of one window (no [tokens, vocab] logits are kept)."""
    device = device or next(model.parameters()).device
    t = torch.from_numpy(np.asarray(tokens, dtype=np.int64))[None].to(device)
    out = model(t[:, :-1], t[:, 1:], return_logits=False, loss_chunk_tokens=loss_chunk_tokens)
    return float(out.ce_loss)


def proofpile_perplexity(
    model,
    documents: list[np.ndarray],
    lengths: list[int],
    *,
    loss_chunk_tokens: int = 4096,
    partial: Path | None = None,
) -> dict:
    """{"lengths", "ppl", "nll", "mean_doc_ppl", "per_document_nll"} keyed by str(length).

    With `partial`, each finished length is saved there (atomically) and a rerun over the same
    documents starts at the first unfinished one; the file is removed once all are done."""
    if not documents:
        raise ConfigError("proofpile: no documents")
    lengths = sorted(int(x) for x in lengths)
    if lengths[0] < 2:
        raise ConfigError("proofpile: lengths must be >= 2")
    short = [i for i, d in enumerate(documents) if d.size < lengths[-1]]
    if short:
        raise ConfigError(
            f"proofpile: document(s) {short} shorter than the longest length {lengths[-1]}"
        )
    was_training = model.training
    model.eval()
    res = {"lengths": lengths, "ppl": {}, "nll": {}, "mean_doc_ppl": {}, "per_document_nll": {}}
    identity = hashlib.sha256(b"".join(d[: lengths[-1]].tobytes() for d in documents)).hexdigest()
    done = _read_partial(partial, identity)
    try:
        for L in lengths:
            if str(L) in done:
                nlls = done[str(L)]
            else:
                nlls = [document_nll(model, d[:L], loss_chunk_tokens=loss_chunk_tokens) for d in documents]
                done[str(L)] = nlls
                _write_partial(partial, identity, done)
            mean = float(np.mean(nlls))
            res["nll"][str(L)] = mean
            res["ppl"][str(L)] = math.exp(mean)
            res["mean_doc_ppl"][str(L)] = float(np.mean([math.exp(x) for x in nlls]))
            res["per_document_nll"][str(L)] = nlls
    finally:
        model.train(was_training)
    if partial is not None:
        Path(partial).unlink(missing_ok=True)
    return res


def _read_partial(path: Path | None, identity: str) -> dict[str, list[float]]:
    """Per-length NLLs a previous run saved for the same documents ({} if none or others)."""
    if path is None or not Path(path).is_file():
        return {}
    saved = json.loads(Path(path).read_text())
    return saved["nll"] if saved.get("documents") == identity else {}


def _write_partial(path: Path | None, identity: str, done: dict) -> None:
    if path is None:
        return
    files.write_json(path, {"documents": identity, "nll": done}, indent=None, newline=False)
