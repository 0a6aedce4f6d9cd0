"""The papers' derived claims, recomputed from the paper's printed values and from ours.

Figure 4 (arXiv 2602.06471 Section 4.5): per architecture a least-squares fit Acc = a + b log10 C over the
(total training compute, average accuracy) points, its R^2, and the matched-accuracy compute
saving. The paper does not say at which accuracy the saving is read off; here it is evaluated at
the mean accuracy of all fitted points: saving = 1 - C_hg(A) / C_conv(A) with
C_x(A) = 10^((A - a_x) / b_x). On the paper's printed Table 2 values this gives 8.6% (printed 8.7%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from shapelm import reference
from shapelm.results import fmt
from shapelm.results import intervals
from shapelm.results.context import Context

TOKENS_PER_STEP_PAPER = 4_194_304  # 1024 x 4096, the per-step unit of Table 2's FLOPs


@dataclass
class Fit:
    a: float
    b: float
    r2: float
    n: int


def fit_log_compute(compute: Sequence[float], acc: Sequence[float]) -> Fit | None:
    """Least squares Acc = a + b log10(C); None for fewer than two points or equal C."""
    pts = [(math.log10(c), y) for c, y in zip(compute, acc) if c and c > 0 and y is not None]
    n = len(pts)
    if n < 2:
        return None
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for _, y in pts)
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in pts)
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return Fit(a, b, r2, n)


def compute_saving(conv: Fit, hg: Fit, acc: float) -> float:
    """1 - C_hg / C_conv at matched accuracy `acc`."""
    return 1 - 10 ** ((acc - hg.a) / hg.b - (acc - conv.a) / conv.b)


TABLE4_TOKENS = {"906m": 18e9, "3b": 60e9, "8b": 160e9}


def fig4_points_paper(tokens: dict[str, float] | None = None) -> dict[str, tuple[list[float], list[float]]]:
    """Paper points: C = printed per-step FLOPs x (tokens / 4,194,304), Acc = Table 2's.

    `tokens` per scale defaults to Table 4's; shapelm.reference.recipes passes the released code's."""
    tokens = TABLE4_TOKENS if tokens is None else tokens
    out: dict[str, tuple[list[float], list[float]]] = {"conv": ([], []), "hg": ([], [])}
    for arch in ("conv", "hg"):
        for s, tok in tokens.items():
            run = f"hg{s}_{arch}"
            c = reference.printed("hourglass_table2", run, "train_flops").value * tok / TOKENS_PER_STEP_PAPER
            out[arch][0].append(c)
            out[arch][1].append(reference.printed("hourglass_table2", run, "avg_acc").value)
    return out


def fig4_points_ours(ctx: Context, table: str = "hourglass_fig4_compute_fit") -> dict[str, tuple[list, list, list]]:
    """Ours: (C from the run config's accounting, measured Avg Acc, run names) per architecture."""
    out: dict[str, tuple[list, list, list]] = {"conv": ([], [], []), "hg": ([], [], [])}
    for name in ctx.runs_for_table(table):
        acc = ctx.acc(name)
        d = ctx.downstream(name)
        if not acc or not d or d.avg_acc is None:
            continue
        arch = "conv" if acc["kind"] == "conventional" else "hg"
        out[arch][0].append(acc["total_compute"])
        out[arch][1].append(d.avg_acc)
        out[arch][2].append(name)
    return out


def fig4_fits(points: dict) -> tuple[Fit | None, Fit | None, float | None]:
    conv = fit_log_compute(points["conv"][0], points["conv"][1])
    hg = fit_log_compute(points["hg"][0], points["hg"][1])
    saving = None
    if conv and hg and conv.b and hg.b:
        accs = list(points["conv"][1]) + list(points["hg"][1])
        saving = compute_saving(conv, hg, sum(accs) / len(accs))
    return conv, hg, saving


@dataclass
class Claim:
    id: str
    claim: str
    source: str
    paper: str  # printed text, or n/a
    from_paper: float | None  # recomputed from the paper's own printed inputs
    ours: float | None
    style: str = "g"
    kind: str = "metric"  # shape: ours from accounting (should reproduce); metric: measured
    note: str = ""
    status: str = field(default="")


def _printed(table: str, run: str, col: str):
    try:
        return reference.printed(table, run, col)
    except KeyError:
        return None


def _status(c: Claim) -> str:
    if c.kind == "verdict":  # the claims ledger decides its own status
        return c.status or fmt.PENDING
    if c.ours is None:
        return fmt.PENDING
    if c.kind == "computed":
        return "computed"
    p = None
    if c.paper not in (fmt.NOT_IN_SEED, fmt.NO_PAPER, ""):
        try:
            p = reference.PrintedNumber.parse(c.paper)
        except ValueError:
            p = None
    if p is None:
        return "measured" if c.kind == "metric" else "computed"
    if c.kind == "shape":
        if p.matches(c.ours):
            return "match"
        return "documented" if c.note else "MISMATCH"
    return "measured"


def derived_claims(ctx: Context) -> list[Claim]:
    claims: list[Claim] = []
    add = claims.append

    # ---- Figure 4 fits
    pp = fig4_points_paper()
    pconv, phg, psave = fig4_fits(pp)
    oconv, ohg, osave = fig4_fits(fig4_points_ours(ctx))
    for arch, label, pf, of in (("conv", "conventional", pconv, oconv), ("hg", "hourglass", phg, ohg)):
        col = "r2_first" if arch == "conv" else "r2_second"
        add(Claim(f"fig4_{arch}_r2", f"Figure 4 fit R^2, {label} (Acc = a + b log10 C)", "Figure 4 caption",
                  _printed("hourglass_fig4_compute_fit", "fit_acc_vs_log_compute", col).text,
                  pf.r2 if pf else None, of.r2 if of and of.n >= 3 else None, "f4",
                  note="The caption does not say which fit has 0.996 and which 0.997; the paper's own "
                       "points give conventional 0.9961, hourglass 0.9968."))
        add(Claim(f"fig4_{arch}_a", f"Figure 4 fit intercept a, {label}", "Figure 4 (not printed)", fmt.NOT_IN_SEED,
                  pf.a if pf else None, of.a if of else None, "f4"))
        add(Claim(f"fig4_{arch}_b", f"Figure 4 fit slope b per decade of C, {label}", "Figure 4 (not printed)",
                  fmt.NOT_IN_SEED, pf.b if pf else None, of.b if of else None, "f4"))
    add(Claim("fig4_compute_saving", "less training compute at matched average accuracy (hourglass vs conventional)",
              "Abstract, Section 4.5", _printed("hourglass_fig4_compute_fit", "fit_acc_vs_log_compute",
                                                "compute_saving").text,
              psave, osave, "pct_plain",
              note="Read off at the mean accuracy of the fitted points (the paper does not state where); "
                   "from the printed values this gives 8.6%."))

    # ---- decode: asymptotes, KV reductions, 64k speedups
    for s, (cname, hname) in sorted(ctx.decode_pairs.items(), key=lambda kv: ctx.acc(kv[1][0])["non_embedding"]):
        conv, hg = ctx.acc(cname), ctx.acc(hname)
        S = ctx.plan.runs[cname]["scale"]
        row = f"decode_{s}"
        shape = (reference.row("hourglass_decode_text", row).get("shape") or {}) if _has_row(row) else {}
        asym = conv["n_attn_layers"] / hg["n_attn_layers"]
        p_asym = _printed("hourglass_decode_text", row, "speedup_asymptote")
        add(Claim(f"decode_asymptote_{s}", f"{S}: asymptotic decode speedup L_conv/L_hg", "Section 4.7",
                  p_asym.text if p_asym else fmt.NOT_IN_SEED,
                  shape["l_conv"] / shape["l_hg"] if shape else None, asym, "x", kind="shape"))
        kv = 1 - hg["kv_bytes_per_token"] / conv["kv_bytes_per_token"]
        p_kv = _printed("hourglass_decode_text", row, "kv_reduction_64k")
        add(Claim(f"kv_reduction_{s}", f"{S}: KV-cache reduction 1 - L_hg/L_conv (equal d_attn)", "Section 1",
                  p_kv.text if p_kv else fmt.NOT_IN_SEED,
                  1 - shape["l_hg"] / shape["l_conv"] if shape else None, kv, "pct_plain", kind="shape",
                  note=("Printed 35.3% but 1 - 18/28 = 35.7% (PAPER_NOTES arXiv 2602.06471 item 1)." if s == "3b" else "")))
        p_sp = _printed("hourglass_decode_text", row, "speedup_64k")
        t2 = _printed("hourglass_table2", hname, "decode_latency_64k")
        add(Claim(f"decode_speedup_64k_{s}", f"{S}: token-decode speedup at 64k (MHA)", "Section 1",
                  p_sp.text if p_sp else fmt.NOT_IN_SEED, 1 / t2.value if t2 else None,
                  ctx.speedup(s, "mha", 65536), "x"))

    # ---- parameter matching within 0.5% (Section 4.1) and tokens per parameter (A.1.1)
    pairs = [(s, c, h) for s, (c, h) in ctx.decode_pairs.items()]
    for s, c, h in sorted(pairs, key=lambda t: ctx.acc(t[1])["non_embedding"]):
        dev = ctx.acc(h)["non_embedding"] / ctx.acc(c)["non_embedding"] - 1
        add(Claim(f"param_match_{s}", f"{ctx.plan.runs[c]['scale']}: hourglass non-embedding params vs conventional (|dev| <= 0.5%)",
                  "Section 4.1", "0.5%", None, dev, "pct", kind="computed",
                  note="" if abs(dev) <= 0.005 else "outside the 0.5% rule"))
    for s, c, _ in sorted(pairs, key=lambda t: ctx.acc(t[1])["non_embedding"]):
        a = ctx.acc(c)
        add(Claim(f"tokens_per_param_{s}", f"{ctx.plan.runs[c]['scale']}: trained tokens per non-embedding parameter", "Appendix A.1.1",
                  "~20", None, a["total_tokens"] / a["non_embedding"], "f1", kind="computed"))

    # ---- A.2: reduced-depth 906M saves ~10% FLOPs; Figure 3: ratio ~0.9 saves up to ~3%
    if ctx.has_run("hg906m_conv_l12") and ctx.has_run("hg906m_conv"):
        sv = 1 - ctx.acc("hg906m_conv_l12")["flops_step"] / ctx.acc("hg906m_conv")["flops_step"]
        p = _printed("hourglass_table5", "hg906m_conv_l12", "flops_delta")
        add(Claim("reduced_depth_flops_saving", "906M conventional L=12: training FLOPs saving vs L=24",
                  "Appendix A.2 ('about 10%'; Table 5 -9.88%)", "~10%", -p.value if p else None, sv,
                  "pct_plain", kind="computed"))
    sweep = [n for n in ctx.runs_for_table("hourglass_fig3_906m_sweep") if "_r0p9_" in n]
    if sweep and ctx.has_run("hg906m_conv"):
        base = ctx.acc("hg906m_conv")["flops_step"]
        sv = max(1 - ctx.acc(n)["flops_step"] / base for n in sweep)
        add(Claim("fig3_flops_saving_r0p9", "906M sweep, d_h/d_model ~0.9: largest training FLOPs saving",
                  "Section 4.4", "~3%", None, sv, "pct_plain", kind="computed"))

    # ---- Table 8: 'roughly half' the degradation
    def deg(run: str, base: str, attr: str) -> float | None:
        a, b = ctx.ppl(run), ctx.ppl(base)
        return getattr(a, attr) - getattr(b, attr) if a and b and getattr(a, attr) and getattr(b, attr) else None

    for attr, col in (("val_loss", "val_loss_delta"), ("val_ppl", "val_ppl_delta")):
        dc, dh = deg("hg906m_conv_attn0p9", "hg906m_conv", attr), deg("hg906m_hg_attn0p9", "hg906m_hg", attr)
        pc, ph = _printed("hourglass_table8", "hg906m_conv_attn0p9", col), _printed("hourglass_table8", "hg906m_hg_attn0p9", col)
        add(Claim(f"table8_degradation_ratio_{attr}", f"Table 8: hourglass / conventional {attr} degradation at 0.9 d_attn",
                  "Table 8 caption ('roughly half')", "roughly half", ph.value / pc.value if pc and ph else None,
                  dh / dc if dc and dh is not None else None, "f2"))

    # ---- Tapered: the best cosine taper vs uniform; LWS: best 18L variant vs the 18L baseline.
    # Both papers report the in-distribution held-out split (Tapered Table 1, LWS Table 3).
    ppl = indist_ppl(ctx)

    u, c = ppl("tp440m_uniform"), ppl("tp440m_cosine_1p5_0p5")
    add(Claim("tapered_best_vs_uniform", "Tapered 440M: cosine 1.5/0.5 PPL minus uniform PPL", "Section 3.2",
              fmt.NOT_IN_SEED, 14.44 - 16.28, c - u if c and u else None, "f2",
              note="From the prose: 14.44 vs 16.28."))
    b18, crown = ppl("lws_baseline_18l"), ppl("lws_crown_18l")
    pb, pcr = _printed("lws_table3", "lws_baseline_18l", "val_ppl"), _printed("lws_table3", "lws_crown_18l", "val_ppl")
    add(Claim("lws_crown_vs_baseline18", "LWS: Crown 18L PPL / isotropic 18L baseline - 1", "Review ('gains around 5-6%')",
              "5-6% (review)", pcr.value / pb.value - 1 if pb and pcr else None,
              crown / b18 - 1 if crown and b18 else None, "pct"))

    claims += lws_throughput_claims(ctx)
    claims += claims_ledger(ctx)
    for cl in claims:
        cl.status = _status(cl)
    return claims


#: Our reading of "without a substantial decrease in training throughput" (LWS abstract): a
#: variant within 5% of its baseline's tokens/s. The paper prints no throughput numbers.
LWS_THROUGHPUT_TOLERANCE = 0.05


def lws_throughput_claims(ctx: Context) -> list[Claim]:
    """Per LWS variant: its training tokens/s over the isotropic baseline's at the same depth
    (each the median of its logged steps, averaged over seeds), and the smallest such ratio."""
    from shapelm.results.tables.lws import throughput_base, throughput_ratio

    lws = [n for n, r in ctx.plan.runs.items() if r["arch"].get("kind") == "lws" and ctx.plan.is_primary(n)]
    out, ratios = [], []
    source = "Abstract ('without a substantial decrease in training throughput')"
    for name in lws:
        base = throughput_base(ctx, name, lws)
        if base is None or base == name:
            continue
        ratio = throughput_ratio(ctx, name, lws)
        if ratio is not None:
            ratios.append(ratio)
        out.append(Claim(f"lws_throughput_{name}", f"LWS: {name} training tokens/s / {base}'s (same depth)",
                         source, "no substantial loss", None, ratio, "f3",
                         note=_throughput_note(ratio)))
    if out:
        worst = min(ratios) if len(ratios) == len(out) else None
        out.append(Claim("lws_throughput_min", "LWS: smallest variant tokens/s / baseline tokens/s (same depth)",
                         source, "no substantial loss", None, worst, "f3",
                         note=_throughput_note(worst) if worst is not None else
                         "pending until every variant and its baseline have a training log."))
    return out


def _throughput_note(ratio: float | None) -> str:
    tol = f"{LWS_THROUGHPUT_TOLERANCE:.0%}"
    if ratio is None:
        return f"holds if >= {1 - LWS_THROUGHPUT_TOLERANCE:.2f} (our reading: within {tol})."
    verdict = "holds" if ratio >= 1 - LWS_THROUGHPUT_TOLERANCE else "against"
    return f"{verdict} (our reading: within {tol} of the baseline)."


def indist_ppl(ctx: Context):
    """run -> its final PPL on the in-distribution held-out split, the mean over its seeds
    (None until evaluated)."""
    from shapelm.results.tables.cells import indist_mean

    return lambda run: indist_mean(ctx, run)


# The ledger's three verdict states (shapelm.results.intervals' own), and pending before any is measured.
HOLDS, INCONCLUSIVE, AGAINST = intervals.HOLDS, intervals.INCONCLUSIVE, intervals.AGAINST
FAILS = AGAINST
STATUS_LEGEND = (f"Status: *{HOLDS}* (the measured comparisons reach the claim), *{INCONCLUSIVE}* (they reach "
                 "it only if the comparisons inside their noise go its way: an interval across 0 or a pair with "
                 f"one seed), *{AGAINST}* (they cannot reach it whichever way those go), *{fmt.PENDING}* (none "
                 "measured yet).")


def verdict(id: str, claim: str, source: str, paper: str, checks: Sequence[bool | str | None],
            need: float = 1.0, note: str = "") -> Claim:
    """A ledger entry: `checks` holds one comparison per pair/ratio/length the claim covers (None:
    not measured yet; INCONCLUSIVE: measured, its interval across 0 or one seed). Of the
    measured ones, it holds when at least `need` hold, is against when at least `need` cannot
    hold even with every inconclusive one, and is inconclusive in between; pending until one is
    measured. `ours` is how many hold."""
    done = [c for c in checks if c is not None]
    held = sum(c is True for c in done)
    unsure = sum(c == INCONCLUSIVE for c in done)
    tally = (f"{held} of {len(done)} measured comparisons hold" + (f", {unsure} inconclusive" if unsure else "")
             + f" ({len(checks)} in all)" if done else f"none of {len(checks)} comparisons measured yet")
    if not done:
        status = fmt.PENDING
    elif held >= need * len(done):
        status = HOLDS
    elif held + unsure >= need * len(done):
        status = INCONCLUSIVE
    else:
        status = AGAINST
    return Claim(id, claim, source, paper, None, float(held) if done else None, "g", kind="verdict",
                 note=f"{tally}. {note}".strip(), status=status)


def _pair_check(row: dict) -> bool | str | None:
    """A paired_differences row as a ledger check: its verdict (one seed: inconclusive)."""
    v = row.get("verdict")
    return None if v is None else True if v == HOLDS else False if v == AGAINST else INCONCLUSIVE


def paired_claims(ctx: Context) -> list[Claim]:
    """Per paper, its claimed sign over every compared pair (paired_differences' verdicts, on an
    interval over evaluation windows and seeds; a one-seed pair counts as inconclusive)."""
    rows = [intervals.pair_row(ctx, a, b) for a, b in intervals.pairs(ctx)]
    out = []
    for paper in ("Hourglass", "Tapered", "LWS"):
        mine = [r for r in rows if r["paper"] == paper]
        if mine:
            out.append(verdict(f"{paper.lower()}_paired_signs", f"{paper}: each proposed shape beats its "
                               "comparison run (the claimed sign of Δ held-out loss, every pair)",
                               "paired_differences", "every pair", [_pair_check(r) for r in mine],
                               note="Verdicts on intervals over evaluation windows + seeds; a one-seed pair is "
                                    "inconclusive."))
    return out


def _less(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a < b


def claims_ledger(ctx: Context) -> list[Claim]:
    """Every checkable claim of the three papers, with holds / inconclusive / against / pending computed
    from whatever runs exist (through the tables' own readers: in-distribution PPL for Tapered
    Table 1 and LWS Table 3, the Avg of Tapered Table 2, ...)."""
    from shapelm.results.tables import build_table

    built: dict = {}

    def ours(table: str, row: str, col: str) -> float | None:
        if table not in built:
            built[table] = build_table(ctx, table)
        cell = built[table].cells.get((row, col))
        return cell.ours if cell else None

    out: list[Claim] = []
    # ---- Tapered (arXiv 2606.23670): Table 2, every backbone x scale pair, cosine 1.5/0.5 vs uniform
    pairs = [(n, n.replace("_uniform", "_cosine_1p5_0p5")) for n in ctx.runs_for_table("tapered_table2")
             if n.endswith("_uniform") and n.replace("_uniform", "_cosine_1p5_0p5") in ctx.plan.runs]
    t2 = "tapered_table2"
    out.append(verdict("tapered_avg_acc_8of8", "Tapered Table 2: tapering raises Avg accuracy in every pair",
                       "Section 3.3 ('8/8')", "8/8",
                       [_less(ours(t2, u, "avg_acc"), ours(t2, t, "avg_acc")) for u, t in pairs]))
    out.append(verdict("tapered_lambada_8of8", "Tapered Table 2: tapering lowers LAMBADA PPL in every pair",
                       "Section 3.3 ('8/8')", "8/8",
                       [_less(ours(t2, t, "lambada_ppl"), ours(t2, u, "lambada_ppl")) for u, t in pairs]))
    out.append(verdict("tapered_wikitext_7of8", "Tapered Table 2: tapering lowers WikiText PPL in 7 of 8 pairs",
                       "Section 3.3 ('7/8')", "7/8",
                       [_less(ours(t2, t, "wikitext_ppl"), ours(t2, u, "wikitext_ppl")) for u, t in pairs],
                       need=7 / 8))
    ratios = ["1p25_0p75", "1p375_0p625", "1p5_0p5", "1p625_0p375", "1p75_0p25"]
    t1 = "tapered_table1"

    def t1_ppl(schedule: str, r: str) -> float | None:
        return ours(t1, f"tp440m_{schedule}_{r}", "val_ppl")

    order = []
    for r in ratios:
        c, li, sg = t1_ppl("cosine", r), t1_ppl("linear", r), t1_ppl("sigmoid", r)
        order.append(None if None in (c, li, sg) else c < li < sg)
    out.append(verdict("tapered_schedule_order", "Tapered Table 1: cosine < linear < sigmoid PPL at every ratio",
                       "Section 3.2", "every ratio", order))
    cos = [t1_ppl("cosine", r) for r in ratios]
    out.append(verdict("tapered_cosine_u_shape", "Tapered Table 1: cosine PPL is U-shaped over the ratios, "
                       "lowest at 1.5/0.5 and rising on either side", "Section 3.2 ('a clean U-shape')", "U-shape",
                       [_less(cos[1], cos[0]), _less(cos[2], cos[1]), _less(cos[2], cos[3]), _less(cos[3], cos[4])]))
    # ---- Hourglass (arXiv 2602.06471)
    t = "hourglass_table1"
    hg_rows = [n for n in ctx.runs_for_table(t) if ctx.acc(n)["kind"] == "hourglass"]
    out.append(verdict("hourglass_table1_lower", "Hourglass Table 1: every hourglass K row has lower Val Loss and "
                       "Val PPL than the conventional 113M", "Section 4.2 ('consistently achieves lower')",
                       "every row", [_less(ours(t, h, c), ours(t, "hg113m_conv", c))
                                     for h in hg_rows for c in ("val_loss", "val_ppl")]))
    t = "hourglass_table5"
    std = ours(t, "hg403m_conv", "flops")
    out.append(verdict("hourglass_table5_ratio4_cheapest", "Hourglass Table 5: the standard d_h/d_model = 4 has the "
                       "lowest training FLOPs among the 403M FFN-ratio variants", "Appendix A.2", "lowest",
                       [_less(std, ours(t, r, "flops")) for r in ("hg403m_conv_r3", "hg403m_conv_r2",
                                                                  "hg403m_conv_r1p5")]))
    t = "hourglass_table2"
    out.append(verdict("hourglass_table2_fewer_flops", "Hourglass Table 2: the hourglass trains with fewer FLOPs "
                       "than its conventional pair at every scale", "Section 4.5 ('modestly fewer training FLOPs')",
                       "every scale", [_less(ours(t, f"hg{s}_hg", "train_flops"), ours(t, f"hg{s}_conv", "train_flops"))
                                       for s in ("906m", "3b", "8b") if ctx.has_run(f"hg{s}_hg")]))
    t = "hourglass_fig3_906m_sweep"
    base = next((n for n in ctx.runs_for_table(t) if ctx.acc(n)["kind"] == "conventional"), None)
    out.append(verdict("hourglass_fig3_r0p6_beat_baseline", "Hourglass Figure 3: the (0.6, 12) and (0.6, 16) points "
                       "below the conventional 906M Val PPL", "Section 4.4 ('exceed the baseline by 0.5%')",
                       "0.5% better", [_less(ours(t, r, "val_ppl"), ours(t, base, "val_ppl")) if base else None
                                       for r in ("hg906m_sweep_r0p6_l12", "hg906m_sweep_r0p6_l16")],
                       note="The text names no metric; read as Val PPL (PAPER_NOTES)."))
    t = "hourglass_fig2_frozen_head"
    loss = {r: ours(t, r, "final_train_loss") for r in ("hg403m_frozen_hg", "hg403m_frozen_conv_wide",
                                                         "hg403m_frozen_conv")}
    out.append(verdict("hourglass_fig2_order", "Hourglass Figure 2 (frozen head): hourglass < wider conventional "
                       "< standard conventional final loss", "Section 4.3, Figure 2 caption", "hg < wide < conv",
                       [_less(loss["hg403m_frozen_hg"], loss["hg403m_frozen_conv_wide"]),
                        _less(loss["hg403m_frozen_conv_wide"], loss["hg403m_frozen_conv"])]))
    t = "hourglass_fig6_403m_sweep"
    sweep = ctx.runs_for_table(t)
    shared = sorted({n.rsplit("_", 1)[-1] for n in sweep if "_l12_" in n} & {n.rsplit("_", 1)[-1] for n in sweep
                                                                               if "_l24_" in n})
    out.append(verdict("hourglass_fig6_l12_below_l24", "Hourglass Figure 6: (K, L) = (4, 12) below (4, 24) at "
                       "every shared ratio (Val PPL)", "Section 4.4 / Figure 6", "every ratio",
                       [_less(ours(t, f"hg403m_sweep_l12_{r}", "val_ppl"), ours(t, f"hg403m_sweep_l24_{r}", "val_ppl"))
                        for r in shared]))
    t = "hourglass_longctx"
    lc = built.setdefault(t, build_table(ctx, t))
    by_kind = {ctx.acc(n)["kind"]: n for n in reversed(ctx.runs_for_table(t))}  # the 8B pair (tiny: its own)
    lc_conv, lc_hg = by_kind.get("conventional", "hg8b_conv"), by_kind.get("hourglass", "hg8b_hg")
    lc_checks = []
    for col in lc.columns:
        conv, hg = ours(t, lc_conv, col.name), ours(t, lc_hg, col.name)
        if col.name.startswith("proofpile_ppl_"):
            lc_checks.append(_less(hg, conv))
        elif col.name.startswith("ruler_"):
            lc_checks.append(_less(conv, hg))
    out.append(verdict("hourglass_longctx_every_length", "Hourglass 8B after YaRN: lower Proof-pile PPL and higher "
                       "RULER than the conventional 8B at every length", "Section 4.6", "every length", lc_checks))
    # ---- LWS (arXiv 2509.06518, via the review): Table 3 on the in-distribution split
    t = "lws_table3"
    variants = [f"lws_{v}_18l" for v in ("vanilla", "framed", "reverse", "crown")]
    v18 = {v: ours(t, v, "val_ppl") for v in variants}
    b18, b12 = ours(t, "lws_baseline_18l", "val_ppl"), ours(t, "lws_baseline_12l", "val_ppl")
    out.append(verdict("lws_variants_beat_baseline18", "LWS: every 18L variant below the 18L isotropic baseline",
                       "Review summary ('all 18-layer LWS variants outperform')", "4/4",
                       [_less(v18[v], b18) for v in variants]))
    measured = sorted(x for x in v18.values() if x is not None)
    spread3 = (measured[2] - measured[0]) / measured[0] if len(measured) == 4 else None
    out.append(verdict("lws_best_three_within_0p04", "LWS: the best three 18L variants within 0.04 PPL "
                       "(0.04 / 5.057 = 0.79% of the best, relative)", "Review ('cluster within 0.04')", "0.04",
                       [None if spread3 is None else spread3 <= 0.04 / 5.057],
                       note="" if spread3 is None else f"best three span {spread3:.2%} of the best."))
    out.append(verdict("lws_baseline12_best", "LWS: the 12L isotropic baseline below every 18L variant and the 12L "
                       "vanilla", "Review ('the 12-layer uniform baseline remains best')", "best",
                       [_less(b12, ours(t, v, "val_ppl")) for v in [*variants, "lws_vanilla_12l"]]))
    out.append(verdict("lws_no_2x_data_efficiency", "LWS: vanilla LWS does not reach its isotropic baseline's final "
                       "PPL in half the tokens (no 2x data efficiency)", "Review summary", "no 2x",
                       [_no_2x(ctx, v, b) for v, b in (("lws_vanilla_18l", "lws_baseline_18l"),
                                                       ("lws_vanilla_12l", "lws_baseline_12l"))]))
    from shapelm.results.ledger_more import Measured, more_claims

    def measured(table: str, row: str, col: str) -> Measured | None:
        """A cell's value with its seeds' std and count, for comparisons that weigh seed noise."""
        ours(table, row, col)  # builds the table once
        cell = built[table].cells.get((row, col))
        return None if cell is None or cell.ours is None else Measured(cell.ours, cell.std, cell.n)

    return out + more_claims(ctx, measured, verdict) + paired_claims(ctx)


def _no_2x(ctx: Context, variant: str, baseline: str) -> bool | None:
    """True when `variant`'s in-distribution curve first reaches `baseline`'s final PPL after
    half the training tokens (or never): no 2x data efficiency."""
    from shapelm.results.tables.cells import indist_mean

    if not (ctx.has_run(variant) and ctx.has_run(baseline)):
        return None
    target, curve = indist_mean(ctx, baseline), ctx.val_curve(variant)
    if target is None or not curve or indist_mean(ctx, variant) is None:
        return None
    half = ctx.acc(variant)["total_tokens"] / 2
    reached = [tok for tok, ppl in zip(*curve) if ppl <= target]
    return not reached or reached[0] > half


def _has_row(row: str) -> bool:
    try:
        reference.row("hourglass_decode_text", row)
        return True
    except KeyError:
        return False


CLAIM_COLUMNS = ["id", "claim", "source", "paper", "from_paper_values", "ours", "ours_value", "status", "note"]


def _fmt_claim(x: float | None, c: Claim) -> str:
    if x is None:
        return fmt.PENDING
    if c.kind == "verdict":  # a count of comparisons that hold
        return f"{x:g}"
    try:
        return fmt.fmt_like(x, reference.PrintedNumber.parse(c.paper), extra=1)
    except ValueError:
        return fmt.fmt_default(x, c.style)


def claims_rows(claims: list[Claim]) -> list[dict[str, str]]:
    out = []
    for c in claims:
        out.append({
            "id": c.id, "claim": c.claim, "source": c.source, "paper": c.paper,
            "from_paper_values": "" if c.from_paper is None else _fmt_claim(c.from_paper, c),
            "ours": _fmt_claim(c.ours, c), "ours_value": "" if c.ours is None else repr(float(c.ours)),
            "status": c.status, "note": c.note,
        })
    return out
