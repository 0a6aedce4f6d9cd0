"""OLMo's repetition filter, checked against a direct implementation of its definition."""

import numpy as np
import pytest

from shapelm.data.repetition import longest_repeat, passes_repetition_filter, repetition_mask


def _naive_times(arr, period):
    best = 1 if len(arr) else 0
    for start in range(len(arr)):
        times = 1
        while start + (times + 1) * period <= len(arr) and np.array_equal(
            arr[start + (times - 1) * period:start + times * period],
            arr[start + times * period:start + (times + 1) * period],
        ):
            times += 1
        best = max(best, times)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_longest_repeat_matches_naive_definition(seed):
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, 5, size=rng.integers(1, 5))
    arr = np.concatenate([rng.integers(0, 5, 7), np.tile(pattern, rng.integers(1, 9)), rng.integers(0, 5, 6)])
    for period in range(1, 6):
        assert longest_repeat(arr, period) == _naive_times(arr, period)


def test_filter_threshold_and_mask():
    rng = np.random.default_rng(0)
    clean = rng.permutation(4096)[:1024]
    assert passes_repetition_filter(clean)
    spam = clean.copy()
    spam[100:100 + 3 * 32] = np.tile([7, 8, 9], 32)  # period 3, 32 times: masked
    assert not passes_repetition_filter(spam)
    almost = clean.copy()
    almost[100:100 + 3 * 31] = np.tile([7, 8, 9], 31)  # 31 times: kept
    assert passes_repetition_filter(almost)
    long_period = clean.copy()
    long_period[0:14 * 40] = np.tile(np.arange(14), 40)  # period 14 is beyond OLMo's 13
    assert passes_repetition_filter(long_period)
    assert repetition_mask(np.stack([clean, spam, almost])).tolist() == [True, False, True]


def test_training_batches_mask_repetitive_instances():
    from shapelm.config import TrainRecipe
    from shapelm.train.distributed import DistEnv
    from shapelm.train.loop import micro_batches

    rng = np.random.default_rng(1)
    rows = [rng.integers(0, 1000, 128), np.tile([5, 6], 64), rng.integers(0, 1000, 128), rng.integers(0, 1000, 128)]
    stream = np.concatenate(rows).astype(np.uint32)

    class Store:  # the loop reads through TokenStore.read_checked (ids checked per batch)
        def read_checked(self, start, length):
            return stream[start:start + length]

    recipe = TrainRecipe(batch_tokens=512, seq_len=128, total_tokens=512, micro_batch_size=4, lr=1e-3)
    (batch,), count = micro_batches(Store(), 1, recipe, DistEnv(), 1)
    labels = batch[1]
    assert (labels[1] == -100).all() and (labels[0, :-1] != -100).all()
    assert count == 3 * 127
    off = TrainRecipe(**{**recipe.to_dict(), "betas": (0.9, 0.95), "repetition_filter": False})
    (_, labels_off), = micro_batches(Store(), 1, off, DistEnv(), 1)[0]
    assert (labels_off[1, :-1] != -100).all()
