"""Held-out perplexity (docs/PAPER_NOTES.md protocol 6): `shapelm eval ppl`.

Each held-out set is a token directory read through `TokenStore`; it is cut into fixed-length,
non-overlapping instances of ``seq_len`` tokens (the remainder dropped), each scored as
``seq_len - 1`` next-token predictions. Per set: token-weighted mean cross-entropy and
PPL = exp(mean). Aggregate: mean of the losses, arithmetic mean of the PPLs (the paper's
Val PPL) and exp(mean loss) beside them.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from shapelm.errors import ShapelmError
from shapelm.evaluation.loading import EvalError, load_model
from shapelm.evaluation.metrics import aggregate_sets, perplexity, token_weighted_ce
from shapelm.records import PplRecord

log = logging.getLogger(__name__)


def open_token_dir(path: str | os.PathLike):
    from shapelm.data.tokens import TokenStore

    try:
        return TokenStore(path)
    except ShapelmError as err:
        raise EvalError(f"held-out set {path}: {err}") from err


def set_name(path: str | os.PathLike, taken: set[str]) -> str:
    p = Path(path).resolve()
    name = p.name
    if name in taken:
        name = f"{p.parent.name}/{p.name}"
    return name


def batch_ce_sum(model, inputs: torch.Tensor, labels: torch.Tensor, count,
                 loss_chunk_tokens: int | None = 4096) -> torch.Tensor:
    """Summed next-token cross-entropy of one batch, a float64 tensor left on the device (no
    sync): the model's token-mean CE over the `count` labelled positions (labels -100 are
    ignored) times `count`. Shared with validation during training (shapelm.train.evaluator)."""
    out = model(inputs, labels, return_logits=False, loss_chunk_tokens=loss_chunk_tokens)
    return out.ce_loss.detach().double() * count


def instance_ce_sums(model, inputs: torch.Tensor, labels: torch.Tensor,
                     loss_chunk_tokens: int | None = 4096) -> torch.Tensor:
    """Summed next-token cross-entropy of each instance of a batch (float64, on the device): one
    batched forward to the final hidden states, then the vocabulary projection and CE instance by
    instance in token chunks (the model's own chunked loss), so per-instance values cost no
    second forward and never hold [batch, tokens, vocab] logits."""
    from shapelm.model.transformer import _chunked_loss_sums

    h = model.hidden_states(inputs, None, 0)
    chunk = loss_chunk_tokens or h.shape[1]
    return torch.stack([_chunked_loss_sums(h[i], model.lm_head.weight, labels[i], chunk)[0].double()
                        for i in range(h.shape[0])])


@torch.no_grad()
def evaluate_store(
    model,
    store,
    seq_len: int,
    batch_size: int = 1,
    max_instances: int | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
    desc: str = "",
) -> dict:
    """Token-weighted mean CE over a store's first ``max_instances`` instances."""
    from tqdm import tqdm

    if seq_len < 2:
        raise EvalError(f"seq_len must be at least 2, got {seq_len}")
    n = store.n_instances(seq_len)
    if max_instances is not None:
        n = min(n, max_instances)
    if n == 0:
        raise EvalError(
            f"held-out set {store.path}: empty dataset: {store.n_tokens} tokens, fewer than one "
            f"instance of seq_len {seq_len}"
        )
    vocab = model.config.vocab_size
    if store.vocab_size > vocab:
        raise EvalError(
            f"held-out set {store.path}: vocab_size {store.vocab_size} > model vocab_size {vocab} "
            "(tokenized with a different tokenizer?)"
        )
    ce_sums: list[float] = []
    counts: list[int] = []
    bar = tqdm(total=n, desc=desc or str(store.path), unit="inst", disable=not progress)
    for start in range(0, n, batch_size):
        idx = range(start, min(start + batch_size, n))
        block = np.stack([store.instance(i, seq_len) for i in idx]).astype(np.int64)
        tokens = torch.from_numpy(block).to(device)
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        # per instance: the units of a paired bootstrap between two models (shapelm.results.intervals)
        ce_sums += [float(x) for x in instance_ce_sums(model, inputs, labels)]
        counts += [int(labels.shape[1])] * len(idx)
        bar.update(len(idx))
    bar.close()
    loss = token_weighted_ce(ce_sums, counts)
    return {
        "path": str(store.path),
        "n_instances": n,
        "n_tokens": int(sum(counts)),
        "loss": loss,
        "ppl": perplexity(loss),
        # Per instance (token window), in order: the units a paired bootstrap resamples to put
        # an interval on the difference between two models scored on the same instances
        # (shapelm.results.intervals).
        "instance_losses": [s / c for s, c in zip(ce_sums, counts)],
        "instance_tokens": counts,
    }


def evaluate_perplexity(
    model,
    data: list[str | os.PathLike],
    seq_len: int = 4096,
    batch_size: int = 1,
    max_instances: int | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict:
    """Score every held-out set and aggregate as the paper does."""
    if not data:
        raise EvalError("no held-out sets given (--data)")
    max_len = model.config.max_seq_len
    if seq_len > max_len:
        log.warning("seq_len %d exceeds the model's max_seq_len %d", seq_len, max_len)
    stores = [open_token_dir(d) for d in data]
    sets: dict[str, dict] = {}
    t0 = time.time()
    for store in stores:
        name = set_name(store.path, set(sets))
        sets[name] = evaluate_store(
            model, store, seq_len, batch_size, max_instances, device, progress, desc=name
        )
        log.info("%s: loss %.4f ppl %.3f (%d instances)", name, sets[name]["loss"],
                 sets[name]["ppl"], sets[name]["n_instances"])
    agg = aggregate_sets({k: v["loss"] for k, v in sets.items()})
    return {
        "seq_len": seq_len,
        "max_instances": max_instances,
        "sets": sets,
        "aggregate": agg,
        "seconds": round(time.time() - t0, 3),
    }


def run_ppl(args) -> int:
    from shapelm.evaluation.loading import resolve_device, resolve_dtype

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    model = load_model(args.model, device=device, dtype=dtype)
    result = evaluate_perplexity(
        model, args.data, seq_len=args.seq_len, batch_size=args.batch_size,
        max_instances=args.max_instances, device=device, progress=not args.no_progress,
    )
    result = {"model": str(args.model), "dtype": str(dtype).removeprefix("torch."), **result}
    PplRecord.from_dict(result, args.out).write(args.out)
    agg = result["aggregate"]
    print(f"val_loss {agg['val_loss']:.4f}  val_ppl {agg['val_ppl']:.3f}  "
          f"exp(mean loss) {agg['exp_mean_loss']:.3f}  -> {args.out}")
    return 0
