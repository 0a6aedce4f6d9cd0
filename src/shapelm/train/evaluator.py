"""Validation during training (`train.eval_every`): loss and PPL on the run's held-out validation
sets and on a held-out split of its own training stream, one "val" record in metrics.jsonl each.

**The in-distribution split** (`train_heldout`) is the `train.eval_heldout_sequences` instances
that follow the last instance the run trains on: global instances [T*B, T*B + n) of the token
stream (T = total_steps, B = batch_sequences). Update s reads only instances [(s-1)*B, s*B), so
the run never trains on them; they depend on the recipe alone, not on the world size, the micro
batch or any resume, and every run of a scale with the same budget shares them. The data rules
slice them with the budget (`shapelm.data.choices.stream_tokens`).

**When**: after update s whenever s * batch_tokens reaches a multiple of eval_every (the first
update at or past each multiple), and after the last update; before that step's checkpoint, so a
checkpoint at step s means the evaluations up to s are written, and a resumed run neither repeats
nor skips one (metrics.jsonl drops records past the resumed step, val records included).

**How**: every rank takes part. Each set is cut into chunks of micro_batch_size instances in
the training layout (seq_len tokens, labels shifted by one with the last position ignored, so
seq_len - 1 predictions per instance as `shapelm eval ppl` scores them; no repetition filter);
chunk c runs on rank c % W, a short last chunk is padded with ignored rows so every forward has
the training shape (no recompilation), and every rank runs the same number of forwards (FSDP
gathers parameters in each). Each chunk's summed cross-entropy lands at index c of a float64
vector; one all-reduce fills it on every rank and the set's loss is summed in chunk order, so
the evaluation of given weights is the same number on 1 or W ranks.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from shapelm.config import TrainRecipe
from shapelm.errors import ConfigError, DataError
from shapelm.evaluation.metrics import aggregate_sets, perplexity, token_weighted_ce
from shapelm.evaluation.ppl import batch_ce_sum, open_token_dir, set_name
from shapelm.train.distributed import DistEnv, all_reduce_sum

log = logging.getLogger(__name__)

#: Name of the in-distribution split in val records and tables.
HELDOUT_SPLIT = "train_heldout"


@dataclass
class EvalSet:
    name: str
    store: object  # shapelm.data.tokens.TokenStore
    first: int  # first instance
    n: int  # instances


def heldout_split(recipe: TrainRecipe) -> tuple[int, int]:
    """(first instance, number of instances) of the in-distribution split."""
    return recipe.total_steps * recipe.batch_sequences, recipe.eval_heldout_sequences


def is_due(step: int, recipe: TrainRecipe, total_steps: int) -> bool:
    """Evaluate after update `step`: it reached a new multiple of eval_every tokens, or it is the
    last update of the run."""
    every = recipe.eval_every
    if every <= 0:
        return False
    if step == total_steps:
        return True
    bt = recipe.batch_tokens
    return (step * bt) // every > ((step - 1) * bt) // every


def due_steps(recipe: TrainRecipe) -> list[int]:
    """Every update after which a run with this recipe evaluates."""
    return [s for s in range(1, recipe.total_steps + 1) if is_due(s, recipe, recipe.total_steps)]


class Evaluator:
    """The run's evaluation sets, opened once; `run(model, step)` returns a "val" record."""

    def __init__(self, recipe: TrainRecipe, train_store, val_dirs, env: DistEnv, vocab_size: int,
                 amp=None) -> None:
        self.recipe, self.env, self.amp = recipe, env, amp
        self.sets: list[EvalSet] = []
        self.seconds = 0.0  # duration of the last evaluation (for the time-limit stop)
        seq = recipe.seq_len
        first, n = heldout_split(recipe)
        if n:
            have = train_store.n_instances(seq)
            if first + n > have:
                raise DataError(
                    f"{train_store.path}: {have:,} instances of seq_len {seq}, but the training "
                    f"budget ({first:,} instances) plus train.eval_heldout_sequences={n:,} needs "
                    f"{first + n:,} ({(first + n) * seq:,} tokens); slice the data with the split "
                    f"(shapelm.data.choices.stream_tokens) or lower train.eval_heldout_sequences"
                )
            self.sets.append(EvalSet(HELDOUT_SPLIT, train_store, first, n))
        taken = {HELDOUT_SPLIT}
        for d in val_dirs or []:
            store = open_token_dir(d)
            if store.vocab_size > vocab_size:
                raise DataError(f"held-out set {d}: vocab_size {store.vocab_size} > model "
                                f"vocab_size {vocab_size} (tokenized with another tokenizer?)")
            count = store.n_instances(seq)
            if recipe.eval_max_instances is not None:
                count = min(count, recipe.eval_max_instances)
            if count == 0:
                raise DataError(f"held-out set {d}: {store.n_tokens} tokens, fewer than one "
                                f"instance of train.seq_len {seq}")
            name = set_name(store.path, taken)
            taken.add(name)
            self.sets.append(EvalSet(name, store, 0, count))
        if recipe.eval_every > 0 and not self.sets:
            raise ConfigError(
                f"train.eval_every={recipe.eval_every} but nothing to evaluate: set "
                "train.eval_heldout_sequences or pass held-out sets (--val)")

    @torch.no_grad()
    def _score(self, model, s: EvalSet) -> dict:
        recipe, env = self.recipe, self.env
        mbs, seq = recipe.micro_batch_size, recipe.seq_len
        n_chunks = math.ceil(s.n / mbs)
        mine = list(range(env.rank, n_chunks, env.world_size))
        rounds = math.ceil(n_chunks / env.world_size)
        sums = torch.zeros(n_chunks, dtype=torch.float64, device=env.device)
        chunk = recipe.loss_chunk_tokens or None
        amp = (lambda: torch.autocast(env.device.type, dtype=self.amp)) if self.amp else None
        for r in range(rounds):
            c = mine[min(r, len(mine) - 1)] if mine else 0  # a rank short of chunks repeats one
            rows = min(mbs, s.n - c * mbs)
            tokens = s.store.read_checked((s.first + c * mbs) * seq, rows * seq).reshape(rows, seq)
            tokens = tokens.astype(np.int64)
            labels = np.full_like(tokens, -100)
            labels[:, :-1] = tokens[:, 1:]
            if rows < mbs:  # padded to the training shape with rows that score nothing
                tokens = np.concatenate([tokens, np.repeat(tokens[:1], mbs - rows, axis=0)])
                labels = np.concatenate([labels, np.full((mbs - rows, seq), -100, dtype=np.int64)])
            count = int((labels != -100).sum())
            x = torch.from_numpy(tokens).to(env.device, non_blocking=True)
            y = torch.from_numpy(labels).to(env.device, non_blocking=True)
            if amp is not None:
                with amp():
                    ce = batch_ce_sum(model, x, y, count, chunk)
            else:
                ce = batch_ce_sum(model, x, y, count, chunk)
            if r < len(mine):
                sums[c] = ce
        all_reduce_sum(sums, env)
        ce_sums = sums.tolist()
        # the counts follow from the layout alone, so every rank knows every chunk's
        counts = [min(mbs, s.n - c * mbs) * (seq - 1) for c in range(n_chunks)]
        loss = token_weighted_ce(ce_sums, counts)
        return {"loss": loss, "ppl": perplexity(loss), "n_instances": s.n, "n_tokens": int(sum(counts))}

    def run(self, model, step: int) -> dict:
        # The model stays in training mode: it has no dropout, and a mode switch would cost
        # compiled blocks one more trace per layer shape.
        t0 = time.perf_counter()
        results = {s.name: self._score(model, s) for s in self.sets}
        record: dict = {"kind": "val", "step": step, "tokens": step * self.recipe.batch_tokens}
        if HELDOUT_SPLIT in results:
            record[HELDOUT_SPLIT] = results.pop(HELDOUT_SPLIT)
        if results:
            record["sets"] = results
            record["aggregate"] = aggregate_sets({k: v["loss"] for k, v in results.items()})
        self.seconds = time.perf_counter() - t0
        record["seconds"] = round(self.seconds, 3)
        record["time"] = time.time()
        return record


def summary_line(record: dict, total_steps: int) -> str:
    """The log line of one evaluation."""
    parts = [f"val step {record['step']}/{total_steps} ({record['tokens']:,} tokens):"]
    if HELDOUT_SPLIT in record:
        h = record[HELDOUT_SPLIT]
        parts.append(f"{HELDOUT_SPLIT} loss {h['loss']:.4f} ppl {h['ppl']:.3f}")
    if "aggregate" in record:
        a = record["aggregate"]
        parts.append(f"held-out sets ({a['n_sets']}) val_loss {a['val_loss']:.4f} "
                     f"val_ppl {a['val_ppl']:.3f}")
    parts.append(f"[{record['seconds']:.1f} s]")
    return " ".join(parts)

