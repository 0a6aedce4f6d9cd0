"""Scaling-law fits per shape family, with bootstrap intervals (docs/RESULTS.md "Scaling-law fits").

Two laws, one fitter:

    loss vs compute          L(C)    = E + A / C^alpha
    loss vs params, tokens   L(N, D) = E + A / N^alpha + B / D^beta     (Chinchilla's form)

Method (following Besiroglu et al. 2024's replication of Chinchilla's Approach 3, and OLMo-core's
Chinchilla fitter): minimise the Huber loss (delta 1e-3) between log L and
log(exp(e) + sum_j exp(a_j - alpha_j x_j)), x_j = log N, log D or log C, with L-BFGS-B started
from a grid of initialisations (the grid's best few by objective value; Chinchilla's original
fit stopped at one local optimum); E = exp(e), A_j = exp(a_j). Intervals are percentile
intervals of a nonparametric bootstrap that resamples the fitted points with replacement and
refits from the full-data optimum (the replication found Chinchilla's intervals implausibly
narrow for ~400 points; resampling the points, not assuming a Gaussian around one optimum, is
its remedy). With few points the bootstrap under-covers; a fit needs at least
`n_params + 2` points (`min_points`).

Contract of the table (`scaling_table`): every shape family of the plan has a row per law (one
row when it is planned at a single size) whose status is read from the plan's planned sizes and
the finished runs: "cannot be fitted" when the plan has fewer distinct sizes than the law needs
points (or, for L(N, D), planned parameters and tokens vary together), "pending: N of M planned
points measured" while it waits for runs, else "fitted"; each pair of families a paper compares
has a crossing row with the same three kinds of status. Sizes come from the plan's accounting,
so the verdict "cannot be fitted" holds before any run has trained.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from shapelm.results.plain import PlainTable

HUBER_DELTA = 1e-3
LEVEL = 0.95


def _lse(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log-sum-exp over the last axis and the softmax weights (each term's share of the sum)."""
    m = terms.max(axis=-1, keepdims=True)
    w = np.exp(terms - m)
    s = w.sum(axis=-1, keepdims=True)
    return (m + np.log(s))[..., 0], w / s


def _split(theta: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return theta[..., :1], theta[..., 1:1 + m], theta[..., 1 + m:]


def _residuals(theta: np.ndarray, x: np.ndarray, logy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log residuals (K, n) of K parameter vectors [e, a_1..a_m, alpha_1..alpha_m] and their
    Jacobian (K, n, 1 + 2m); x: (n, m) centred log-variables."""
    m = x.shape[1]
    e, a, alpha = _split(theta, m)
    terms = np.concatenate([a[:, None, :] - alpha[:, None, :] * x[None], np.repeat(e[:, None, :], len(x), 1)],
                           axis=2)
    pred, w = _lse(terms)  # (K, n), (K, n, m + 1): each term's share of the predicted loss
    jac = np.concatenate([w[:, :, m:], w[:, :, :m], -w[:, :, :m] * x[None]], axis=2)
    return pred - logy[None], jac


def _huber(r: np.ndarray, weights: np.ndarray, delta: float) -> np.ndarray:
    """Weighted mean Huber loss per problem (K,)."""
    a = np.abs(r)
    loss = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return (loss * weights).sum(axis=1) / r.shape[1]


def _grid(x: np.ndarray, logy: np.ndarray) -> np.ndarray:
    """Initialisations: E a share of the smallest loss, each power term a share of it at the
    data's centre (x is centred), exponents from shallow to steep."""
    base = float(logy.min())
    es = [base + math.log(f) for f in (0.2, 0.5, 0.8, 0.95)]
    as_ = [base + math.log(f) for f in (0.02, 0.1, 0.4, 1.0)]
    alphas = [0.05, 0.2, 0.5, 1.0]
    m = x.shape[1]
    rows = [[e, *a, *al] for e in es for a in itertools.product(as_, repeat=m)
            for al in itertools.product(alphas, repeat=m)]
    return np.asarray(rows, dtype=float)


def _minimize(theta0: np.ndarray, x: np.ndarray, logy: np.ndarray, weights: np.ndarray, delta: float,
              iters: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Minimise K Huber problems at once (K, p) by iteratively reweighted Levenberg-Marquardt:
    each step solves the K damped normal equations with the Huber weights min(1, delta/|r|);
    a step is kept only where it lowers that problem's objective (else its damping grows).
    Exponents stay in [0, 5]. Returns the optima (K, p) and objectives (K,)."""
    m = x.shape[1]
    theta = theta0.astype(float).copy()
    lam = np.full(len(theta), 1e-3)
    r, jac = _residuals(theta, x, logy)
    obj = _huber(r, weights, delta)
    eye = np.eye(theta.shape[1])
    for _ in range(iters):
        omega = weights * np.minimum(1.0, delta / np.maximum(np.abs(r), 1e-300))
        jw = jac * omega[:, :, None]
        h = np.einsum("knp,knq->kpq", jw, jac)
        g = np.einsum("knp,kn->kp", jw, r)
        damp = h + lam[:, None, None] * (eye * np.diagonal(h, axis1=1, axis2=2)[:, None, :] + 1e-12 * eye)
        step = np.linalg.solve(damp, -g[:, :, None])[:, :, 0]
        cand = theta + step
        cand[:, 1 + m:] = np.clip(cand[:, 1 + m:], 0.0, 5.0)
        r_c, jac_c = _residuals(cand, x, logy)
        obj_c = _huber(r_c, weights, delta)
        better = obj_c < obj
        theta[better], r[better], jac[better], obj[better] = cand[better], r_c[better], jac_c[better], obj_c[better]
        lam = np.where(better, np.maximum(lam / 3, 1e-9), lam * 10)
        if (lam > 1e8).all():
            break
    return theta, obj


@dataclass
class PowerLawFit:
    """A fitted law; `names` of the variables (N, D or C), coefficients in natural units."""
    names: tuple[str, ...]
    E: float
    A: tuple[float, ...]
    alpha: tuple[float, ...]
    n_points: int
    objective: float
    # bootstrap draws, one row per resample: [E, A_1.., alpha_1..]
    draws: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))

    def predict(self, *xs: np.ndarray | float) -> np.ndarray:
        return self.E + sum(A * np.asarray(v, dtype=float) ** -al for A, al, v in zip(self.A, self.alpha, xs))

    def coefficients(self) -> dict[str, float]:
        out = {"E": self.E}
        for i, name in enumerate(self.names):
            out[f"A_{name}"] = self.A[i]
            out[f"alpha_{name}"] = self.alpha[i]
        return out

    def intervals(self, level: float = LEVEL) -> dict[str, tuple[float, float]]:
        """Percentile bootstrap interval of every coefficient ({} without draws)."""
        if self.draws.size == 0:
            return {}
        lo, hi = 50 * (1 - level), 50 * (1 + level)
        m = len(self.names)
        keys = ["E", *(f"A_{v}" for v in self.names), *(f"alpha_{v}" for v in self.names)]  # draws' order
        out = {k: (float(np.percentile(self.draws[:, i], lo)), float(np.percentile(self.draws[:, i], hi)))
               for i, k in enumerate(keys)}
        return {k: out[k] for k in self.coefficients()} if len(keys) == 1 + 2 * m else out


def _to_fit(theta: np.ndarray, centre: np.ndarray, names, n: int, obj: float) -> PowerLawFit:
    m = len(names)
    e, a, alpha = float(theta[0]), theta[1:1 + m], theta[1 + m:]
    # a_j was fitted against centred x_j: A_j / X_j^alpha = exp(a_j + alpha_j c_j) / X_j^alpha at x_j - c_j
    A = np.exp(a + alpha * centre)
    return PowerLawFit(tuple(names), math.exp(e), tuple(float(v) for v in A),
                       tuple(float(v) for v in alpha), n, obj)


def _theta(fit: PowerLawFit, centre: np.ndarray) -> np.ndarray:
    alpha = np.asarray(fit.alpha)
    return np.concatenate([[math.log(fit.E)], np.log(fit.A) - alpha * centre, alpha])


def min_points(n_vars: int) -> int:
    return 2 * n_vars + 1 + 2


def fit_power_law(xs: dict[str, list[float]] | dict[str, np.ndarray], loss: list[float] | np.ndarray,
                  n_boot: int = 200, seed: int = 0, delta: float = HUBER_DELTA, starts: int = 5) -> PowerLawFit:
    """Fit L = E + sum_j A_j / X_j^alpha_j to the points (xs: name -> values, all > 0) and, with
    n_boot > 0, bootstrap it. Raises ValueError for too few points or non-positive values."""
    names = tuple(xs)
    y = np.asarray(loss, dtype=float)
    cols = [np.asarray(xs[k], dtype=float) for k in names]
    if any(c.shape != y.shape for c in cols):
        raise ValueError("every variable needs one value per loss")
    if len(y) < min_points(len(names)):
        raise ValueError(f"{len(y)} points; a fit of {2 * len(names) + 1} coefficients needs at least "
                         f"{min_points(len(names))}")
    if (y <= 0).any() or any((c <= 0).any() for c in cols):
        raise ValueError("losses and variables must be positive")
    logx = np.log(np.stack(cols, axis=1))
    centre = logx.mean(axis=0)
    x = logx - centre
    logy = np.log(y)
    grid = _grid(x, logy)
    ones = np.ones((len(grid), len(y)))
    # The objective at every grid point is cheap; L-BFGS-B runs from the best few.
    values = _huber(_residuals(grid, x, logy)[0], ones, delta)
    starts_theta = grid[np.argsort(values)[:starts]]
    thetas, objs = _minimize(starts_theta, x, logy, ones[:len(starts_theta)], delta)
    best = int(np.argmin(objs))
    best_theta = thetas[best]
    fit = _to_fit(best_theta, centre, names, len(y), float(objs[best]))
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        counts = np.stack([np.bincount(rng.integers(0, len(y), len(y)), minlength=len(y)) for _ in range(n_boot)])
        thetas, objs = _minimize(np.repeat(best_theta[None], n_boot, 0), x, logy, counts.astype(float), delta)
        fit.draws = np.asarray([[b.E, *b.A, *b.alpha] for b in
                                (_to_fit(t, centre, names, len(y), o) for t, o in zip(thetas, objs))])
    return fit


def _draw_fit(fit: PowerLawFit, row: np.ndarray) -> PowerLawFit:
    m = len(fit.names)
    return PowerLawFit(fit.names, float(row[0]), tuple(row[1:1 + m]), tuple(row[1 + m:]), fit.n_points, math.nan)


def crossing(f: PowerLawFit, g: PowerLawFit, lo: float, hi: float, n: int = 2000) -> float | None:
    """The smallest compute in [lo, hi] where two loss-vs-compute fits cross (None: no crossing)."""
    cs = np.logspace(math.log10(lo), math.log10(hi), n)
    d = f.predict(cs) - g.predict(cs)
    change = np.nonzero(np.sign(d[:-1]) * np.sign(d[1:]) < 0)[0]
    if not len(change):
        return None
    i = int(change[0])
    # linear interpolation in log C between the bracketing grid points
    t = d[i] / (d[i] - d[i + 1])
    return float(10 ** (math.log10(cs[i]) + t * (math.log10(cs[i + 1]) - math.log10(cs[i]))))


@dataclass
class Crossing:
    compute: float | None  # of the full-data fits
    interval: tuple[float, float] | None  # percentile interval over draws that cross
    share: float  # fraction of paired draws with a crossing in range


def crossing_interval(f: PowerLawFit, g: PowerLawFit, lo: float, hi: float, level: float = LEVEL) -> Crossing:
    """Crossing compute of two families with an interval: the b-th bootstrap draw of one family
    paired with the b-th of the other (independent resamples, so the pairing is arbitrary)."""
    point = crossing(f, g, lo, hi)
    k = min(len(f.draws), len(g.draws))
    found = [c for c in (crossing(_draw_fit(f, f.draws[i]), _draw_fit(g, g.draws[i]), lo, hi, 400)
                         for i in range(k)) if c is not None]
    if not k:
        return Crossing(point, None, math.nan)
    interval = None
    if found:
        interval = (float(np.percentile(found, 50 * (1 - level))), float(np.percentile(found, 50 * (1 + level))))
    return Crossing(point, interval, len(found) / k)


# ----------------------------------------------------------------------------- the table

TITLE = "Scaling-law fits per shape family, with 95% bootstrap intervals"
CAPTION = ("Per shape family (the runs of one shape across scales): held-out loss against training compute "
           "L = E + A/C^alpha and, where the runs' parameters and tokens vary independently, L = E + A/N^alpha + "
           "B/D^beta (N non-embedding parameters, D training tokens); Huber loss on log L, many initialisations, "
           "percentile intervals of a bootstrap over the points; the compute at which two compared families' "
           "loss-vs-compute fits cross, with its interval. Every family of the plan has a row whose status says "
           "whether its planned sizes can ever be fitted ('cannot be fitted: the plan has only N sizes, a fit "
           "needs M'), are waiting for runs ('pending: N of M planned points measured') or are fitted.")
N_BOOT = 400
# Crossings are searched from 1/1000 of the smallest to 1000 x the largest compute fitted.
CROSS_RANGE = 1e3
COLLINEAR = 0.98  # |corr(log N, log D)| above this: parameters and tokens are not separable

# What the intervals cover, in their headers: which runs were fitted (each run's evaluation and
# seed noise only as far as the points' scatter shows it).
POINTS = "bootstrap over fitted points"

COLUMNS = [("family", "family"), ("law", "law"), ("planned_sizes", "planned sizes"),
           ("needed", "points a fit needs"), ("points", "points measured"), ("runs", "planned runs"),
           *((f"{k}{s}", f"{k}{h}") for k in ("E", "A", "alpha", "B", "beta")
             for s, h in (("", ""), ("_lo", f" 95% lo ({POINTS})"), ("_hi", f" 95% hi ({POINTS})"))),
           ("cross_C", "crossing compute"), ("cross_C_lo", f"crossing 95% lo ({POINTS})"),
           ("cross_C_hi", f"crossing 95% hi ({POINTS})"),
           ("cross_share", "share of draws crossing"), ("status", "status")]

# The two laws: name, the variables fitted (each point's keys) and so how many points a fit needs.
LAWS = (("L(C)", ("C",)), ("L(N, D)", ("N", "D")))
CANNOT = "cannot be fitted"
PENDING = "pending"


@dataclass(frozen=True)
class PlannedFamily:
    """A shape family as the plan has it, before any run finished: its primary runs and their
    planned sizes (non-embedding parameters N, training tokens D, from the plan's accounting)."""
    name: str
    runs: tuple[str, ...]
    sizes: tuple[tuple[float, float], ...]  # distinct planned (N, D)

    def status(self, law: str, measured: int) -> str | None:
        """Why `law` is not fitted with `measured` finished points: it never can be from the planned
        sizes, or it waits for runs; None when enough points are measured to fit it."""
        variables = dict(LAWS)[law]
        needed = min_points(len(variables))
        if len(self.sizes) < needed:
            n = len(self.sizes)
            return f"{CANNOT}: the plan has only {n} size{'s' * (n != 1)}, a fit of {law} needs {needed}"
        if len(variables) == 2:
            logn, logd = (np.log([s[i] for s in self.sizes]) for i in (0, 1))
            if np.ptp(logd) == 0 or abs(np.corrcoef(logn, logd)[0, 1]) > COLLINEAR:
                return (f"{CANNOT}: the planned parameters and tokens vary together (|corr(log N, log D)| > "
                        f"{COLLINEAR}), so A/N^alpha and B/D^beta are not separable")
        if measured < needed:
            return f"{PENDING}: {measured} of {len(self.runs)} planned points measured (a fit needs {needed})"
        return None


def planned_families(ctx) -> dict[str, PlannedFamily]:
    """Every shape family of the plan (its primary runs by family name), in plan order."""
    from shapelm.results.intervals import family

    runs: dict[str, list[str]] = {}
    for run in ctx.plan.runs:
        if ctx.plan.is_primary(run):
            runs.setdefault(family(run), []).append(run)
    out = {}
    for fam, members in runs.items():
        sizes = {(float(ctx.acc(r)["non_embedding"]), float(ctx.acc(r)["total_tokens"])) for r in members}
        out[fam] = PlannedFamily(fam, tuple(members), tuple(sorted(sizes)))
    return out


def family_points(ctx) -> dict[str, list[dict[str, float | str]]]:
    """family -> finished runs' (run, N, D, C, L), for families planned at two or more sizes."""
    out: dict[str, list[dict[str, float | str]]] = {}
    for fam, planned in planned_families(ctx).items():
        if len(planned.sizes) < 2:
            continue  # one size: nothing to fit across
        pts = [pt for pt in (_measured_point(ctx, r) for r in planned.runs) if pt]
        out[fam] = sorted(pts, key=lambda p: p["C"])  # by compute, as the figure's axis and labels read
    return out


def _measured_point(ctx, run: str) -> dict[str, float | str] | None:
    """A finished run's (run, N, D, C, L); None while it has no held-out loss."""
    p, acc = ctx.ppl(run), ctx.acc(run)
    if p is None or p.val_loss is None or not acc:
        return None
    return {"run": run, "N": float(acc["non_embedding"]), "D": float(acc["total_tokens"]),
            "C": float(acc["total_compute"]), "L": float(p.val_loss)}


def _coef_row(fit: PowerLawFit) -> dict[str, float]:
    row: dict[str, float] = {"E": fit.E}
    iv = fit.intervals()
    for key, (name, fkey) in {"A": ("A", 0), "alpha": ("alpha", 0), "B": ("A", 1), "beta": ("alpha", 1)}.items():
        if fkey < len(fit.names):
            coef = f"{name}_{fit.names[fkey]}"
            row[key] = fit.coefficients()[coef]
            if coef in iv:
                row[f"{key}_lo"], row[f"{key}_hi"] = iv[coef]
    if "E" in iv:
        row["E_lo"], row["E_hi"] = iv["E"]
    return row


def _fit_law(planned: PlannedFamily, pts: list[dict], law: str) -> PowerLawFit | str:
    """A family's fit of `law`, or the status saying why there is none."""
    why = planned.status(law, len(pts))
    if why:
        return why
    variables = dict(LAWS)[law]
    try:
        return fit_power_law({v: [p[v] for p in pts] for v in variables}, [p["L"] for p in pts], n_boot=N_BOOT)
    except ValueError as err:
        return f"not fitted: {err}"


def compute_fits(ctx) -> tuple[dict[str, list], dict[str, PowerLawFit | str]]:
    """Measured points and the L(C) fit (or the status saying why none) of every family planned at
    two or more sizes."""
    planned = planned_families(ctx)
    points = family_points(ctx)
    return points, {fam: _fit_law(planned[fam], pts, "L(C)") for fam, pts in points.items()}


def _family_crossing(fa: str, fb: str, fits: dict, points: dict) -> Crossing | None:
    """Where two families' L(C) fits cross, searched around their measured compute; None unless
    both are fitted."""
    f, g = fits[fa], fits[fb]
    if not isinstance(f, PowerLawFit) or not isinstance(g, PowerLawFit):
        return None
    cs = [p["C"] for p in points[fa] + points[fb]]
    return crossing_interval(f, g, min(cs) / CROSS_RANGE, max(cs) * CROSS_RANGE)


def _crossing_row(fa: str, fb: str, fits: dict, points: dict) -> dict:
    row = {"family": f"{fa} vs {fb}", "law": "crossing of L(C)", "points": len(points[fa]) + len(points[fb])}
    cr = _family_crossing(fa, fb, fits, points)
    if cr is None:
        # a crossing needs both fits: it can never be found where either family can never be fitted
        waits = [(fam, str(fits[fam])) for fam in (fa, fb) if not isinstance(fits[fam], PowerLawFit)]
        word = next((w for w in (CANNOT, PENDING) if any(why.startswith(w) for _, why in waits)), "not fitted")
        return {**row, "status": f"{word}: " + "; ".join(f"{fam}, {why.split(': ', 1)[-1]}" for fam, why in waits)}
    return {**row, "cross_C": cr.compute, "cross_C_lo": cr.interval[0] if cr.interval else None,
            "cross_C_hi": cr.interval[1] if cr.interval else None, "cross_share": cr.share,
            "status": "crosses" if cr.compute else "no crossing in range"}


def compared_families(ctx, points: dict) -> list[tuple[str, str]]:
    """(arm family, base family) of the runs a paper compares, both planned at two or more sizes."""
    from shapelm.results.intervals import comparison_base, family

    compared = {(family(a), family(b)) for a in ctx.plan.runs if ctx.plan.is_primary(a)
                and (b := comparison_base(ctx, a))}
    return sorted((fa, fb) for fa, fb in compared if fa in points and fb in points)


def scaling_table(ctx) -> PlainTable:
    planned = planned_families(ctx)
    points, fits = compute_fits(ctx)
    rows: list[dict] = []
    for fam, pts in points.items():
        base = {"family": fam, "planned_sizes": len(planned[fam].sizes), "points": len(pts),
                "runs": " ".join(planned[fam].runs)}
        for law, variables in LAWS:
            fit = fits[fam] if law == "L(C)" else _fit_law(planned[fam], pts, law)
            rows.append({**base, "law": law, "needed": min_points(len(variables)),
                         **(_coef_row(fit) if isinstance(fit, PowerLawFit) else {}),
                         "status": "fitted" if isinstance(fit, PowerLawFit) else fit})
    # families planned at one size: one row each, no law can be fitted across one size
    for fam, fp in planned.items():
        if fam not in points:
            measured = sum(1 for r in fp.runs if _measured_point(ctx, r))
            rows.append({"family": fam, "law": "any", "planned_sizes": len(fp.sizes), "needed": min_points(1),
                         "points": measured, "runs": " ".join(fp.runs), "status": fp.status("L(C)", measured)})
    rows += [_crossing_row(fa, fb, fits, points) for fa, fb in compared_families(ctx, points)]
    # one verdict per family: its L(C) row's (the law needing the fewest points), or its one row
    verdicts = [str(r["status"]).split(":")[0] for r in rows if r["law"] in ("L(C)", "any")]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts)))
    one_size = sum(1 for r in rows if r["law"] == "any")
    notes = [f"Method: docs/RESULTS.md 'Scaling-law fits' ({N_BOOT} bootstrap resamples of the points; a law of "
             "k coefficients needs k + 2 points). L: held-out val_loss (mean over sets); C: training FLOPs "
             "(accounting FLOPs/token x tokens); N: non-embedding parameters; D: training tokens.",
             "A family's runs are its names without the scale (hg906m_hg, hg3b_hg -> hg_hg). Status per family "
             "and law, from the plan's sizes: 'cannot be fitted' when the plan has fewer distinct sizes than the "
             "law needs points (or its parameters and tokens vary together), 'pending' while fewer points than "
             "that are measured, else 'fitted'. A family planned at one size has one row (law 'any').",
             f"{len(planned)} families ({one_size} planned at one size); L(C) per family: {counts}. "
             f"{sum(1 for r in rows if r['law'] == 'crossing of L(C)')} compared pairs of families planned at "
             "two or more sizes have a crossing row."]
    return PlainTable("scaling_fits", TITLE, COLUMNS, rows, notes)


def _family_label(ctx, pts: list[dict]) -> str:
    """A family as a reader knows it: its shape and the scales of its runs (not hg_hg)."""
    runs = [str(p["run"]) for p in pts]
    arch = ctx.plan.runs[runs[0]].get("arch", {})
    kind = " ".join(str(w) for w in (arch.get("kind") or ctx.acc(runs[0]).get("kind", ""), arch.get("schedule"),
                                      arch.get("mixer"), arch.get("variant")) if w)
    scales = [str(ctx.plan.runs[r].get("scale", r)) for r in runs]
    if len(set(scales)) < len(scales):  # one scale name for several sizes (the tiny default): their sizes
        scales = [f"{ctx.acc(r)['total_params'] / 1e6:.3g}M" for r in runs]
    return f"{kind or runs[0]} at {', '.join(scales)}"


def scaling_figure(ctx):
    import matplotlib.pyplot as plt

    points, fits = compute_fits(ctx)
    fig, ax = plt.subplots(figsize=(7, 6))
    shown = fitted = banded = False
    labels: dict[str, str] = {}
    for fam, pts in points.items():
        if pts:
            label = _family_label(ctx, pts)
            labels[fam] = label if label not in labels.values() else f"{label} ({fam})"
    for fam, pts in points.items():
        if not pts:
            continue
        c = np.array([p["C"] for p in pts])
        fit = fits[fam]
        note = "" if isinstance(fit, PowerLawFit) else f" ({fit})"
        line = ax.plot(c, [p["L"] for p in pts], "o", label=labels[fam] + note)[0]
        shown = True
        if isinstance(fit, PowerLawFit):
            fitted = True
            xs = np.logspace(math.log10(c.min()) - 0.3, math.log10(c.max()) + 0.3, 100)
            ax.plot(xs, fit.predict(xs), "-", color=line.get_color(), label="fit L = E + A/C^alpha")
            if fit.draws.size:
                banded = True
                band = np.array([_draw_fit(fit, d).predict(xs) for d in fit.draws])
                ax.fill_between(xs, *np.percentile(band, [2.5, 97.5], axis=0), color=line.get_color(), alpha=0.2,
                                label="95% bootstrap band")
    crossed = False
    for fa, fb in compared_families(ctx, points):
        cr = _family_crossing(fa, fb, fits, points)
        if cr is not None and cr.compute:
            crossed = True
            shapes = " vs ".join(labels[fam].split(" at ")[0] for fam in (fa, fb))  # the scales are listed above
            ax.axvline(cr.compute, color="black", ls="--", lw=1, label=f"{shapes}: fits cross at C = {cr.compute:.3g}")
            if cr.interval:
                ax.axvspan(*cr.interval, color="black", alpha=0.08, label=f"crossing 95% interval ({POINTS})")
    if not shown:
        # nothing measured: say per family whether its plan can ever be fitted, not only "pending"
        lines = [f"{fam}: {fit}" for fam, fit in fits.items()]
        one_size = len(planned_families(ctx)) - len(fits)
        if one_size:
            lines.append(f"and {one_size} families planned at one size: cannot be fitted")
        ax.text(0.02, 0.5, "No family has finished runs. L(C) per family planned at 2+ sizes:\n" + "\n".join(lines),
                ha="left", va="center", transform=ax.transAxes, fontsize=7, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        ax.set_xscale("log")
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("held-out loss (nats/token)")
    drawn = ("fit (line) and 95% bootstrap band (shaded)" if banded else "fit (line); too few points for a band"
             if fitted else f"points only: a fit needs >= {min_points(1)} points per family" if shown
             else "no finished runs; what each family's plan allows")
    if crossed:
        drawn += ";\ndashed: where two compared families' fits cross, grey: its 95% interval"
    ax.set_title(f"Loss vs compute per shape family: {drawn}", fontsize=9)
    if shown:  # below the axes: never over the points
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, frameon=False)
    fig.tight_layout()
    return fig
