"""Paired differences with bootstrap intervals (docs/RESULTS.md "Paired differences").

For every pair a paper compares (an hourglass run against the conventional run of its scale and
ablation, a tapered schedule against the uniform run of its backbone and scale, an LWS variant
against the baseline of its depth), the difference arm - base in held-out loss and PPL with a
paired bootstrap over the evaluation instances both arms were scored on (ppl.json's per-instance
losses: the same token windows, resampled jointly, within each held-out set), the downstream
accuracy difference over lm-eval's items (its per-item samples, paired by doc_id), and where the
arm has seeds, the seed-to-seed spread of each arm.

Every interval names the noise it covers. The bootstrap over evaluation windows covers which
instances were scored, not which seed was trained (on a second machine, training noise flipped 2
of 7 evaluation-only signs). The verdict has three states, `holds` / `inconclusive` / `against`
(the interval on the claimed side / across 0 / on the opposite side), and is taken on an
interval that covers seeds too where both arms have at least two finished seeds
(`seed_aware_interval`: Welch's t over the seeds' held-out losses, combined with the evaluation
interval). A pair with one seed on either side is at most `inconclusive (one seed)`; the side its
evaluation-only interval lies on is shown beside it (`eval_side`), never as the verdict.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shapelm import records
from shapelm.plan.paths import run_under
from shapelm.results.plain import PlainTable

LEVEL = 0.95
N_BOOT = 2000

TITLE = "Paired differences with 95% intervals (arm - base) and three-state verdicts"
CAPTION = ("Held-out loss and PPL differences with a paired bootstrap over evaluation windows "
           f"({N_BOOT} resamples; both arms scored on the same windows: evaluation noise only), downstream "
           "accuracy differences with a bootstrap over lm-eval items (item noise only), the seed spread where "
           "seeds exist, and a verdict on the paper's claimed sign: holds / inconclusive / against (the 95% "
           "interval on the claimed side / across 0 / on the opposite side), taken on an interval over "
           "evaluation windows and seeds where both arms have two or more seeds; a pair with one seed is at "
           "most 'inconclusive (one seed)', its evaluation-only side shown beside it. Seeds vary the "
           "initialisation only: every run reads the same fixed data order, so no interval covers data order.")

# The three verdict states (and the one-seed cap), their colours in every figure.
HOLDS, INCONCLUSIVE, AGAINST = "holds", "inconclusive", "against"
ONE_SEED = "inconclusive (one seed)"
VERDICT_COLOURS = {HOLDS: "tab:green", INCONCLUSIVE: "tab:gray", AGAINST: "tab:red", ONE_SEED: "tab:gray"}
# What an interval covers (named in every column and caption that shows one).
EVAL_WINDOWS, ITEMS, SEEDS = "evaluation windows", "lm-eval items", "seeds"

#: The runs of the field's shapes (configs/field.yaml, configs/field-paper.yaml): field_GROUP_SHAPE,
#: each compared with field_GROUP_uniform.
FIELD_PREFIX = "field_"
FIELD_RUN = re.compile(rf"({FIELD_PREFIX}[a-z0-9]+)_(\w+)")
_SCALE = re.compile(r"^(hg|tp)(\d+(?:p\d+)?[mb])_")


# ----------------------------------------------------------------------------- statistics


@dataclass
class Interval:
    estimate: float
    lo: float
    hi: float
    n: int  # units resampled (evaluation instances or lm-eval items)

    def holds(self, sign: int) -> bool:
        """The whole interval on the side of `sign` (-1: below zero, +1: above)."""
        return self.hi < 0 if sign < 0 else self.lo > 0

    def side(self, sign: int) -> str:
        """HOLDS (the whole interval on the side of `sign`), AGAINST (the whole interval on the
        other side) or INCONCLUSIVE (it crosses 0)."""
        return HOLDS if self.holds(sign) else AGAINST if self.holds(-sign) else INCONCLUSIVE


# Two-sided 95% Student t quantiles by degrees of freedom (1..30; beyond: 1.96 at infinity).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t at `df` degrees of freedom, rounded down (conservative)."""
    k = int(math.floor(df))
    return _T975[max(k, 1) - 1] if k <= len(_T975) else 1.96


def seed_aware_interval(evaluation: Interval, arm_seeds, base_seeds) -> Interval | None:
    """An interval of arm - base that covers seed-to-seed variation too: Welch's t interval over the
    two arms' per-seed values (each seed's held-out loss), its half-width combined in quadrature
    with each side of the evaluation-window interval (the seeds share the evaluation windows, so
    their spread does not hold that noise). Centred on the evaluation estimate (the seeds' mean
    of per-window means). None unless both arms have at least two finite per-seed values. 95% only.
    `n` is the number of seeds (arm + base)."""
    a = np.array([v for v in arm_seeds if v is not None and math.isfinite(v)], float)
    b = np.array([v for v in base_seeds if v is not None and math.isfinite(v)], float)
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se2 = va + vb
    df = se2 ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se2 > 0 else len(a) + len(b) - 2
    seed_half2 = (t975(df)) ** 2 * se2
    est = evaluation.estimate
    return Interval(est, est - math.sqrt(seed_half2 + (est - evaluation.lo) ** 2),
                    est + math.sqrt(seed_half2 + (evaluation.hi - est) ** 2), len(a) + len(b))


def verdict(evaluation: Interval | None, seeded: Interval | None, sign: int) -> str | None:
    """The verdict on the claimed `sign`: the side of the seed-aware interval where there is one;
    ONE_SEED where only the evaluation-only interval exists (it can never say HOLDS); None
    (pending) where neither does."""
    if seeded is not None:
        return seeded.side(sign)
    return ONE_SEED if evaluation is not None else None


def _percentiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    return float(np.percentile(draws, 50 * (1 - level))), float(np.percentile(draws, 50 * (1 + level)))


@dataclass
class SetAggregates:
    """Each arm's aggregate at the full data and at every paired bootstrap draw: over held-out
    sets, "loss" and "ppl" (the mean over sets of each set's token-weighted loss, of each set's
    PPL); over downstream tasks, "avg" (the mean over tasks of each task's mean item metric)."""
    point: dict[str, tuple[float, float]]  # aggregate -> (arm, base)
    draws: dict[str, tuple[np.ndarray, np.ndarray]]  # aggregate -> (arm draws, base draws)
    units: int

    def difference(self, measure: str, level: float = LEVEL) -> Interval:
        (a, b), (da, db) = self.point[measure], self.draws[measure]
        return Interval(a - b, *_percentiles(da - db, level), self.units)

    def relative(self, measure: str, level: float = LEVEL) -> Interval:
        """arm / base - 1, the papers' "relative change" columns."""
        (a, b), (da, db) = self.point[measure], self.draws[measure]
        return Interval(a / b - 1.0, *_percentiles(da / db - 1.0, level), self.units)


def paired_set_aggregates(arm: list[tuple[np.ndarray, np.ndarray]], base: list[tuple[np.ndarray, np.ndarray]],
                          n_boot: int = N_BOOT, seed: int = 0) -> SetAggregates:
    """arm, base: per held-out set (same order), (unit losses, unit token counts); the units of one
    set are the same token windows in both arms, so one index draw resamples both."""
    rng = np.random.default_rng(seed)
    sums = {key: np.zeros(n_boot) for key in ("loss_a", "loss_b", "ppl_a", "ppl_b")}
    point = dict.fromkeys(sums, 0.0)
    units = 0
    for (la, ta), (lb, tb) in zip(arm, base):
        if len(la) != len(lb) or not np.array_equal(ta, tb):
            raise ValueError("the two arms were not scored on the same evaluation units")
        units += len(la)
        idx = rng.integers(0, len(la), (n_boot, len(la)))
        w = ta[idx]
        ma = (la[idx] * w).sum(1) / w.sum(1)
        mb = (lb[idx] * w).sum(1) / w.sum(1)
        fa, fb = float((la * ta).sum() / ta.sum()), float((lb * tb).sum() / tb.sum())
        for key, draw, full in (("loss_a", ma, fa), ("loss_b", mb, fb)):
            sums[key] += draw
            point[key] += full
            sums[key.replace("loss", "ppl")] += np.exp(draw)
            point[key.replace("loss", "ppl")] += math.exp(full)
    k = len(arm)
    return SetAggregates({m: (point[f"{m}_a"] / k, point[f"{m}_b"] / k) for m in ("loss", "ppl")},
                         {m: (sums[f"{m}_a"] / k, sums[f"{m}_b"] / k) for m in ("loss", "ppl")}, units)


def paired_set_bootstrap(arm: list[tuple[np.ndarray, np.ndarray]], base: list[tuple[np.ndarray, np.ndarray]],
                         n_boot: int = N_BOOT, seed: int = 0,
                         level: float = LEVEL) -> tuple[Interval, Interval]:
    """Difference arm - base of the mean over sets of each set's token-weighted loss, and of the
    mean over sets of each set's PPL (exp of its loss), with percentile intervals
    (arm, base as in `paired_set_aggregates`)."""
    agg = paired_set_aggregates(arm, base, n_boot, seed)
    return agg.difference("loss", level), agg.difference("ppl", level)


def paired_mean_bootstrap(arm: np.ndarray, base: np.ndarray, n_boot: int = N_BOOT, seed: int = 0,
                          level: float = LEVEL) -> Interval:
    """Mean of arm - base over paired items (e.g. per-question accuracy), with an interval."""
    d = np.asarray(arm, float) - np.asarray(base, float)
    rng = np.random.default_rng(seed)
    draws = d[rng.integers(0, len(d), (n_boot, len(d)))].mean(1)
    return Interval(float(d.mean()), *_percentiles(draws, level), len(d))


@dataclass
class LineBand:
    """A bootstrap band of Acc = a + b log10(C) (Hourglass Figure 4's fit)."""
    slope: Interval  # b: accuracy per decade of compute
    grid: np.ndarray  # log10 C at which the band is given
    lo: np.ndarray
    hi: np.ndarray


def log_compute_fit_band(compute, acc, stderr, grid, n_boot: int = N_BOOT, seed: int = 0,
                         level: float = LEVEL) -> LineBand | None:
    """The line refitted to `n_boot` draws of the points, each point's accuracy drawn from a normal
    at its value with its standard error (the evaluation items' noise, lm-eval's stderr): the
    percentile band of the line at `grid` (log10 C) and the interval of its slope. None for fewer
    than two distinct computes or a point without a standard error (no band is invented)."""
    if len(compute) < 2 or any(s is None or not math.isfinite(s) for s in stderr):
        return None
    x, y, se = np.log10(np.asarray(compute, float)), np.asarray(acc, float), np.asarray(stderr, float)
    if np.ptp(x) == 0:
        return None
    ys = y + np.random.default_rng(seed).standard_normal((n_boot, len(y))) * se
    b, a = np.polyfit(x, ys.T, 1)  # one line per draw
    lines = a[:, None] + b[:, None] * np.asarray(grid, float)[None, :]
    lo, hi = np.percentile(lines, [50 * (1 - level), 50 * (1 + level)], axis=0)
    return LineBand(Interval(float(np.polyfit(x, y, 1)[0]), *_percentiles(b, level), len(y)),
                    np.asarray(grid, float), lo, hi)


# ----------------------------------------------------------------------------- the pairs


def comparison_base(ctx, run: str) -> str | None:
    """The run a paper compares `run` against, or None (the base itself, or no counterpart)."""
    plan = ctx.plan
    if run.startswith("lws_"):
        m = re.fullmatch(r"lws_(\w+?)_(\d+l)", run)
        if m and m.group(1) != "baseline" and ctx.has_run(f"lws_baseline_{m.group(2)}"):
            return f"lws_baseline_{m.group(2)}"
        return None
    if m := FIELD_RUN.fullmatch(run):  # the field's shapes: each arm against the uniform run of its group
        base = f"{m.group(1)}_uniform"
        return base if m.group(2) != "uniform" and ctx.has_run(base) else None
    kind = (plan.runs[run].get("arch") or {}).get("kind")
    if run.startswith("tp"):
        m = re.fullmatch(r"(tp\w+?m(?:_(?:ga|titans|hope))?)_(\w+)", run)
        if m and m.group(2) != "uniform" and ctx.has_run(f"{m.group(1)}_uniform"):
            return f"{m.group(1)}_uniform"
        return None
    if run.startswith("hg") and kind == "hourglass":
        prefix = run.split("_", 1)[0]
        for cand in (run.replace("_hg", "_conv", 1), re.sub(r"_hg(_k\d+)?$", "_conv", run), f"{prefix}_conv"):
            if cand != run and ctx.has_run(cand) and (plan.runs[cand].get("arch") or {}).get("kind") == "conventional":
                return cand
    return None


def pairs(ctx) -> list[tuple[str, str]]:
    """(arm, base) for every primary run with a comparison base, in config order."""
    return [(r, b) for r in ctx.plan.runs if ctx.plan.is_primary(r) and (b := comparison_base(ctx, r))]


def family(run: str) -> str:
    """A run's shape family: its name without the scale (hg906m_hg -> hg_hg)."""
    return _SCALE.sub(r"\1_", run)


def _printed_loss(run: str) -> tuple[float, str] | None:
    from shapelm import reference

    for t in reference.tables():
        for row in reference.table(t):
            if row.get("run") != run:
                continue
            values = row.get("values") or {}
            for col in ("val_loss", "val_ppl"):
                if col in values:
                    try:
                        return reference.printed(t, run, col).value, f"{t}.{col}"
                    except (KeyError, ValueError):
                        continue
    return None


def claimed_sign(arm: str, base: str) -> tuple[int, str]:
    """The sign the paper reports for arm - base loss: from its printed values of both rows where
    it prints them (in the same column), else -1 (each paper proposes the arm as the better shape)."""
    a, b = _printed_loss(arm), _printed_loss(base)
    if a and b and a[1] == b[1] and a[0] != b[0]:
        return (1 if a[0] > b[0] else -1), f"printed ({a[1]})"
    return -1, "paper's claim (proposed shape lower)"


# ----------------------------------------------------------------------------- reading units


def _units(ctx, run: str) -> list[tuple[str, np.ndarray, np.ndarray]] | None:
    """(set, per-unit losses, token counts) of a run, averaged unit by unit over its finished seeds;
    None where ppl.json has no per-unit losses (written before they were recorded)."""
    per_seed = []
    for inst in ctx.instances(run):
        rec = records.PplRecord.read(ctx.run_file(inst, "ppl.json"))
        if rec is None:
            continue
        sets = []
        for name, s in sorted(rec.sets.items()):
            if not isinstance(s, dict) or not s.get("instance_losses"):
                return None
            sets.append((name, np.asarray(s["instance_losses"], float), np.asarray(s["instance_tokens"], float)))
        per_seed.append(sets)
    if not per_seed:
        return None
    first = per_seed[0]
    out = []
    for i, (name, _, tokens) in enumerate(first):
        losses = [seed[i][1] for seed in per_seed if len(seed) > i and seed[i][0] == name
                  and np.array_equal(seed[i][2], tokens)]
        out.append((name, np.mean(losses, axis=0), tokens))
    return out


def _items(ctx, run: str, fields: dict[str, str] | None = None,
           instance: str | None = None) -> dict[tuple[str, Any], float]:
    """(lm-eval task, doc_id) -> the item's metric from a run's per-item samples (its first seed,
    or `instance`): `fields` maps each lm-eval task to the field read (None: "acc" of every task)."""
    out: dict[tuple[str, Any], float] = {}
    folder = run_under(ctx.results_dir, instance or ctx.instances(run)[0]) / "downstream_lm_eval"
    for path in sorted(Path(folder).glob("samples_*.jsonl")) if folder.is_dir() else []:
        task = path.stem.removeprefix("samples_")
        field = "acc" if fields is None else fields.get(task)
        if field is None:
            continue
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get(field), (int, float)):
                out[(task, rec.get("doc_id"))] = float(rec[field])
    return out


DOWNSTREAM_AVERAGES = {"avg_acc": "acc_tasks", "avg_ppl": "ce_tasks"}  # Downstream field -> its tasks


def _task_items(ctx, run: str, average: str) -> dict[str, dict[Any, float]] | None:
    """lm-eval task -> doc_id -> the item's primary metric, averaged over the run's seeds, for the
    tasks downstream.json averages into `average` ("avg_acc" or "avg_ppl"); None where one has no
    samples. The tasks' mean of the item means must give downstream's own average (else None:
    the samples are not what that number was computed from)."""
    head = ctx.downstream_json(run)
    details = head.get("details") if isinstance(head.get("details"), dict) else {}
    fields = {}
    for task in head.get(DOWNSTREAM_AVERAGES[average]) or ():
        d = details.get(task)
        if not isinstance(d, dict) or not d.get("lm_eval_task") or not d.get("primary"):
            return None
        fields[d["lm_eval_task"]] = d["primary"]
    per_seed = [_items(ctx, run, fields, inst) for inst in ctx.instances(run)]
    per_seed = [items for items in per_seed if items]
    if not fields or not per_seed:
        return None
    out: dict[str, dict[Any, float]] = {}
    for key in set.intersection(*(set(items) for items in per_seed)):
        out.setdefault(key[0], {})[key[1]] = float(np.mean([items[key] for items in per_seed]))
    summary = getattr(ctx.downstream(run), average, None)
    if set(out) != set(fields) or summary is None:
        return None
    if not math.isclose(float(np.mean([np.mean(list(v.values())) for v in out.values()])), summary,
                        rel_tol=1e-6, abs_tol=1e-9):
        return None
    return out


def task_mean_aggregates(ctx, arm: str, base: str, average: str, n_boot: int = N_BOOT,
                         seed: int = 0) -> SetAggregates | None:
    """Paired bootstrap of downstream's `average` (the mean over tasks of each task's mean item
    metric) of two runs: items paired by task and doc_id, resampled jointly within each task.
    None where either run's samples are missing or do not reproduce its average."""
    ia, ib = _task_items(ctx, arm, average), _task_items(ctx, base, average)
    if ia is None or ib is None or set(ia) != set(ib):
        return None
    rng = np.random.default_rng(seed)
    draws, point, units = np.zeros((2, n_boot)), np.zeros(2), 0
    for task in sorted(ia):
        docs = sorted(set(ia[task]) & set(ib[task]), key=str)
        if not docs:
            return None
        units += len(docs)
        vals = np.array([[ia[task][d] for d in docs], [ib[task][d] for d in docs]])
        idx = rng.integers(0, len(docs), (n_boot, len(docs)))
        draws += vals[:, idx].mean(-1)
        point += vals.mean(-1)
    k = len(ia)
    return SetAggregates({"avg": (point[0] / k, point[1] / k)}, {"avg": (draws[0] / k, draws[1] / k)}, units)


def _seed_losses(ctx, run: str) -> list[float | None]:
    """Each seed's held-out loss (None: not evaluated)."""
    return [p.val_loss if (p := ctx.single.ppl(n)) else None for n in ctx.instances(run)]


def _seed_spread(ctx, run: str) -> tuple[float | None, int]:
    from shapelm.results.seeds import spread

    s = spread(_seed_losses(ctx, run))
    return s.std, s.n


# ----------------------------------------------------------------------------- table


COLUMNS = [
    ("arm", "arm"), ("base", "base"), ("paper", "paper"), ("units", "evaluation windows"),
    ("d_loss", "Δ loss"), ("d_loss_lo", f"Δ loss 95% lo ({EVAL_WINDOWS})"),
    ("d_loss_hi", f"Δ loss 95% hi ({EVAL_WINDOWS})"),
    ("d_ppl", "Δ PPL"), ("d_ppl_lo", f"Δ PPL 95% lo ({EVAL_WINDOWS})"), ("d_ppl_hi", f"Δ PPL 95% hi ({EVAL_WINDOWS})"),
    ("claimed_sign", "claimed sign of Δ loss"), ("claim_source", "claim from"),
    ("eval_side", f"Δ loss interval ({EVAL_WINDOWS} only) vs the claimed sign"),
    ("d_loss_seeds_lo", f"Δ loss 95% lo ({EVAL_WINDOWS} + {SEEDS})"),
    ("d_loss_seeds_hi", f"Δ loss 95% hi ({EVAL_WINDOWS} + {SEEDS})"),
    ("verdict", "verdict (holds / inconclusive / against)"), ("verdict_noise", "verdict's interval covers"),
    ("items", "downstream items"), ("d_acc", "Δ acc"), ("d_acc_lo", f"Δ acc 95% lo ({ITEMS})"),
    ("d_acc_hi", f"Δ acc 95% hi ({ITEMS})"),
    ("seed_std_arm", "seed std loss (arm)"), ("seed_std_base", "seed std loss (base)"), ("seeds", "seeds arm/base"),
    ("status", "status"),
]


def _paper(run: str) -> str:
    if run.startswith(FIELD_PREFIX):
        return "field"
    return "Hourglass" if run.startswith("hg") else "Tapered" if run.startswith("tp") else "LWS"


NO_UNITS = "no per-unit losses in ppl.json (rerun eval_ppl)"
NO_ITEMS = "no per-item lm-eval samples that give downstream.json's average"


def pair_aggregates(ctx, arm: str, base: str, seed: int = 0) -> tuple[SetAggregates | None, str]:
    """The paired bootstrap of two runs' held-out aggregates (each run's per-unit losses averaged
    over its finished seeds), or None and why not: "pending", "RUN diverged at step N", NO_UNITS,
    different sets."""
    for run in (arm, base):
        if why := ctx.divergence(run):
            return None, f"{run} {why}"
    ua, ub = _units(ctx, arm), _units(ctx, base)
    if ua is None or ub is None:
        return None, NO_UNITS if ctx.ppl(arm) is not None and ctx.ppl(base) is not None else "pending"
    if [n for n, *_ in ua] != [n for n, *_ in ub]:
        return None, "different held-out sets"
    try:
        return paired_set_aggregates([(a, t) for _, a, t in ua], [(b, t) for _, b, t in ub], seed=seed), "measured"
    except ValueError as err:
        return None, str(err)


def pair_row(ctx, arm: str, base: str, seed: int = 0) -> dict[str, Any]:
    sign, source = claimed_sign(arm, base)
    row: dict[str, Any] = {"arm": arm, "base": base, "paper": _paper(arm), "claimed_sign": "-" if sign < 0 else "+",
                           "claim_source": source}
    agg, row["status"] = pair_aggregates(ctx, arm, base, seed)
    if agg is not None:
        loss, ppl = agg.difference("loss"), agg.difference("ppl")
        seeded = seed_aware_interval(loss, _seed_losses(ctx, arm), _seed_losses(ctx, base))
        row.update(units=loss.n, d_loss=loss.estimate, d_loss_lo=loss.lo, d_loss_hi=loss.hi,
                   d_ppl=ppl.estimate, d_ppl_lo=ppl.lo, d_ppl_hi=ppl.hi, eval_side=loss.side(sign),
                   verdict=verdict(loss, seeded, sign),
                   verdict_noise=f"{EVAL_WINDOWS} + {SEEDS}" if seeded else f"{EVAL_WINDOWS} only (one seed)")
        if seeded is not None:
            row.update(d_loss_seeds_lo=seeded.lo, d_loss_seeds_hi=seeded.hi)
    elif row["status"] == NO_UNITS:
        row["d_loss"] = ctx.ppl(arm).val_loss - ctx.ppl(base).val_loss
    ia, ib = _items(ctx, arm), _items(ctx, base)
    common = sorted(set(ia) & set(ib), key=str)
    if common:
        acc = paired_mean_bootstrap(np.array([ia[k] for k in common]), np.array([ib[k] for k in common]), seed=seed)
        row.update(items=acc.n, d_acc=acc.estimate, d_acc_lo=acc.lo, d_acc_hi=acc.hi)
    sa, na = _seed_spread(ctx, arm)
    sb, nb = _seed_spread(ctx, base)
    row.update(seed_std_arm=sa, seed_std_base=sb, seeds=f"{na}/{nb}")
    return row


def paired_table(ctx) -> PlainTable:
    rows = [pair_row(ctx, a, b) for a, b in pairs(ctx)]
    notes = [
        f"Δ loss / Δ PPL intervals ({EVAL_WINDOWS}): percentile bootstrap over evaluation windows (token windows "
        "of a held-out set), resampled jointly for both arms within each set; Δ loss is the change of the mean "
        "over sets of each set's loss (the papers' aggregate). They cover evaluation noise only, not training "
        "noise (which seed was trained).",
        f"Verdict: {HOLDS} / {INCONCLUSIVE} / {AGAINST} = the 95% interval on the paper's claimed side / across 0 / "
        f"on the opposite side. Where both arms have two or more seeds it is taken on the interval over "
        f"{EVAL_WINDOWS} + {SEEDS} (Welch's t over the seeds' held-out losses, combined in quadrature with the "
        f"evaluation interval); with one seed on either side it is at most '{ONE_SEED}', and the side of the "
        "evaluation-only interval is shown in its own column, not as a verdict.",
        "Seed std: sample std (ddof 1) of each arm's held-out loss over its finished seeds. A seed varies the "
        "initialisation only (every run reads the same fixed data order): no interval here covers data order.",
        f"Δ acc ({ITEMS}): mean over lm-eval items (all accuracy tasks pooled, paired by task and doc_id) of "
        "the arm's minus the base's per-item accuracy; item noise only.",
    ]
    return PlainTable("paired_differences", TITLE, COLUMNS, rows, notes)


def _verdict_style(row: dict[str, Any]) -> tuple[str, str, str]:
    """(colour, marker face, legend label) of a measured pair in the figure: colour by the side of
    the interval drawn; filled for a verdict on seeds, hollow for a one-seed pair."""
    if row.get("verdict") == ONE_SEED:
        side = row["eval_side"]
        text = {HOLDS: "on the claimed side", INCONCLUSIVE: "crosses 0", AGAINST: "against the claim"}[side]
        return VERDICT_COLOURS[side], "white", f"{ONE_SEED}: {EVAL_WINDOWS}-only interval {text}"
    v = row["verdict"]
    text = {HOLDS: "interval on the claimed side", INCONCLUSIVE: "interval crosses 0",
            AGAINST: "interval on the opposite side"}[v]
    return VERDICT_COLOURS[v], VERDICT_COLOURS[v], f"{v} ({EVAL_WINDOWS} + {SEEDS}: {text})"


def paired_figure(ctx):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from shapelm.results.figures.common import pending_panel, zero_line_axis

    every = paired_table(ctx).rows
    rows = [r for r in every if r.get("d_loss_lo") is not None]
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(rows), 4) + 2.6))
    if not rows:
        # The measured figure's axes, unscaled: one row per pair would list every configured pair
        # with nothing on it, so the panel counts them and the table lists them.
        zero_line_axis(ax)
        ax.set_xlabel(f"Δ held-out loss (arm − base, nats/token), 95% intervals over {EVAL_WINDOWS}", fontsize=8)
        ax.set_ylabel("pair (arm − base)", fontsize=8)
        ax.set_title("Verdict on the paper's claimed sign: holds / inconclusive / against", fontsize=9)
        pending_panel(ax, f"pending: none of the {len(every)} configured pairs has per-unit held-out losses yet\n"
                      "(the pairs: the paired_differences table)" if every else
                      f"no pairs configured in experiment '{ctx.plan.name}'")
        fig.tight_layout()
        return fig
    ys = np.arange(len(rows))
    legend: dict[str, Line2D] = {}
    for y, r in zip(ys, rows):
        color, face, label = _verdict_style(r)
        if r.get("d_loss_seeds_lo") is not None:  # the verdict's interval, under the evaluation-only one
            ax.plot([r["d_loss_seeds_lo"], r["d_loss_seeds_hi"]], [y, y], color=color, lw=4, alpha=0.35,
                    solid_capstyle="butt")
        ax.errorbar(r["d_loss"], y, xerr=[[r["d_loss"] - r["d_loss_lo"]], [r["d_loss_hi"] - r["d_loss"]]],
                    fmt="o", color=color, mfc=face, capsize=3)
        legend.setdefault(label, Line2D([], [], marker="o", color=color, mfc=face, lw=1))
    order = [HOLDS, INCONCLUSIVE, AGAINST]  # seed verdicts first, then one-seed pairs, each in this order
    rank = {label: (ONE_SEED in label, next(i for i, v in enumerate(order) if VERDICT_COLOURS[v] == h.get_color()))
            for label, h in legend.items()}
    shaded = any(r.get("d_loss_seeds_lo") is not None for r in rows)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(ys, [f"{r['arm']} − {r['base']} (claim {r['claimed_sign']})" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"Δ held-out loss (arm − base, nats/token), 95% intervals:\nbars over {EVAL_WINDOWS} only"
                  + (f", shaded over {EVAL_WINDOWS} + {SEEDS}" if shaded else " (every pair has one seed)"),
                  fontsize=8)
    ax.set_title("Verdict on the paper's claimed sign: holds / inconclusive / against", fontsize=9)
    labels = sorted(legend, key=rank.__getitem__)
    ax.legend([legend[k] for k in labels], labels, loc="upper center", bbox_to_anchor=(0.5, -0.27), fontsize=7,
              frameon=False, ncol=1)
    fig.tight_layout()
    return fig
