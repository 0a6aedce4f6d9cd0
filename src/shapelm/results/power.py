"""How many seeds a pair needs: the power of paired_differences' seed-aware verdict.

A pair's verdict *holds* when the seed-aware interval (shapelm.results.intervals.seed_aware_interval:
Welch's t over the arms' per-seed held-out losses, t at the Welch-Satterthwaite df rounded down)
lies wholly on the claimed side of 0. `verdict_power` is the probability of that for a true
difference `delta` (in loss) and a seed-to-seed standard deviation `sigma`, with `n_arm` and
`n_base` seeds: Monte Carlo over normal per-seed losses, the interval computed as the verdict
computes it. The evaluation-window part of the interval is left out (it only widens it; at the
one-GPU sizes it is a few thousandths of a loss, below sigma). `min_detectable` inverts it.

configs/one-gpu.yaml chooses its pairs and seeds with these at sigma = 0.011 in loss: the only seed
spread any of the three papers prints, LWS Table 3's std of 0.0595 PPL over five 18-layer
baselines at PPL 5.400 (arXiv 2509.06518, via its review), as log-PPL.
"""

from __future__ import annotations

import numpy as np

from shapelm.results.intervals import t975

TARGET_POWER = 0.8
N_SIM = 20_000


def verdict_power(delta: float, sigma: float, n_arm: int, n_base: int, n_sim: int = N_SIM, seed: int = 0) -> float:
    """P(the seed-aware 95% interval of arm - base excludes 0 on delta's side)."""
    if n_arm < 2 or n_base < 2:
        return 0.0  # one seed: the verdict is at most "inconclusive (one seed)"
    rng = np.random.default_rng(seed)
    a = rng.normal(delta, sigma, (n_sim, n_arm))
    b = rng.normal(0.0, sigma, (n_sim, n_base))
    va, vb = a.var(axis=1, ddof=1) / n_arm, b.var(axis=1, ddof=1) / n_base
    se = np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (n_arm - 1) + vb ** 2 / (n_base - 1))
    half = np.array([t975(d) for d in df]) * se
    est = a.mean(axis=1) - b.mean(axis=1)
    held = est + half < 0 if delta < 0 else est - half > 0
    return float(held.mean())


def min_detectable(sigma: float, n_arm: int, n_base: int, power: float = TARGET_POWER) -> float:
    """The smallest |delta| (loss) detected with `power` (bisection on verdict_power)."""
    lo, hi = 0.0, 20 * sigma
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if verdict_power(-mid, sigma, n_arm, n_base, n_sim=4000) >= power else (mid, hi)
    return hi


def printed_seed_sigma() -> float:
    """LWS Table 3's printed seed std of the 18L baseline, in loss (log-PPL) units (delta method:
    std(log PPL) ~ std(PPL) / PPL = 0.0595 / 5.400 = 0.0110)."""
    from shapelm import reference

    std = reference.printed("lws_table3", "lws_baseline_18l", "val_ppl_std").value
    return std / reference.printed("lws_table3", "lws_baseline_18l", "val_ppl").value
