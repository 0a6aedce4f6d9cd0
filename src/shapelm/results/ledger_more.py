"""More entries of the claims ledger (shapelm.results.claims.claims_ledger): the papers' orderings,
trends and ranges that their tables, figures and text state in words.

Each claim is a list of comparisons built by one function from a getter `get(table, row, column)`.
The ledger calls it twice: on our cells (the tables' own readers, so every value is the one the
table shows) for the verdict, and, where the paper prints the cells, on the printed values, whose
tally (`from_paper_values`: how many comparisons hold on the paper's own numbers) shows whether the
paper's numbers bear out its words. A comparison of two cells that both have seeds (n >= 2) is
decided on Welch's 95% t interval of their difference (the seeds' spread: training noise), and is
inconclusive where that interval crosses 0; cells of one run each compare their values, as the
papers ran them (one seed).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from shapelm import reference
from shapelm.results.context import Context
from shapelm.results.intervals import INCONCLUSIVE, t975

Get = Callable[[str, str, str], "float | None"]
Check = "bool | str | None"


class Measured(float):
    """A cell's value with the sample std over its row's seeds and their number (None, 1: one run)."""

    def __new__(cls, value: float, std: float | None = None, n: int | None = None):
        x = super().__new__(cls, value)
        x.std, x.n = std, n or 1
        return x


def _lt(a: float | None, b: float | None) -> bool | str | None:
    """a < b: on Welch's 95% interval of b - a where both have seeds, else on the values."""
    if a is None or b is None:
        return None
    sa, sb = getattr(a, "std", None), getattr(b, "std", None)
    na, nb = getattr(a, "n", 1), getattr(b, "n", 1)
    if sa is None or sb is None or na < 2 or nb < 2:
        return a < b
    va, vb = sa ** 2 / na, sb ** 2 / nb
    if va + vb == 0:
        return a < b
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    half, d = t975(df) * math.sqrt(va + vb), float(b) - float(a)
    return True if d - half > 0 else False if d + half < 0 else INCONCLUSIVE


def printed_getter(table: str, row: str, col: str) -> float | None:
    """A printed cell's value (None where the paper prints none)."""
    try:
        return reference.printed(table, row, col).value
    except KeyError:
        return None


# ---------------------------------------------------------------- Hourglass (arXiv 2602.06471)
T10, T11, T5, T12 = "hourglass_table10", "hourglass_table11", "hourglass_table5", "hourglass_table12"
K_ROWS = [f"hgabl_k{k}_dh418" for k in (1, 2, 4, 6, 8)]
# Table 11's rows from d_h/d_model 0.8 down to 0.1; the last two steps end below 0.4.
RATIO_ROWS = [f"hgabl_k4_dh{d}" for d in (836, 627, 418, 209, 103)]
RATIO_STEPS_ABOVE, RATIO_STEPS_BELOW = (0, 1), (2, 3)
MIXERS = ("mha", "gqa", "mla")  # g = 1, 4, ~10.7 (Table 12's rows, by growing g)
T12_LENGTHS = ("32k", "64k", "128k")
T12_WITHIN = 0.03  # B.1: 'by 128k every mixer is within 0.03x of the layer-count ratio'


def table10_k_improves(get: Get) -> list[Check]:
    """Each step up in K (1, 2, 4, 6, 8) lowers Val Loss and Val PPL."""
    return [_lt(get(T10, b, col), get(T10, a, col)) for a, b in zip(K_ROWS, K_ROWS[1:])
            for col in ("val_loss", "val_ppl")]


def table11_ppl_rises(get: Get) -> list[Check]:
    """Each step down in d_h/d_model (0.8 to 0.1) raises Val PPL."""
    return [_lt(get(T11, a, "val_ppl"), get(T11, b, "val_ppl")) for a, b in zip(RATIO_ROWS, RATIO_ROWS[1:])]


def ratio_jumps(get: Get) -> list[float | None]:
    ppl = [get(T11, r, "val_ppl") for r in RATIO_ROWS]
    return [None if a is None or b is None else b - a for a, b in zip(ppl, ppl[1:])]


def table11_steepest_below_0p4(get: Get) -> list[Check]:
    """The largest Val PPL jump is a step to a ratio below 0.4 (0.4 -> 0.2 or 0.2 -> 0.1)."""
    jumps = ratio_jumps(get)
    if None in jumps:
        return [None]
    return [max(jumps[i] for i in RATIO_STEPS_BELOW) > max(jumps[i] for i in RATIO_STEPS_ABOVE)]


def a2_reduced_depth_worse(get: Get) -> list[Check]:
    """906M conventional L=12: higher Val PPL and higher Avg Downstream PPL than the L=24 standard."""
    return [_lt(get(T5, "hg906m_conv", col), get(T5, "hg906m_conv_l12", col)) for col in ("val_ppl", "avg_ppl")]


def t12_speedups(get: Get, mixer: str) -> list[float | None]:
    return [get(T12, f"decode906m_{mixer}", f"speedup_{n}") for n in T12_LENGTHS]


def table12_rises_toward_ratio(get: Get, ratio: float | None) -> list[Check]:
    """Per mixer: speedup 32k < 64k < 128k, and the 128k speedup not above the layer ratio
    (compared at the paper's two decimals)."""
    out: list[Check] = []
    for m in MIXERS:
        s = t12_speedups(get, m)
        out += [_lt(s[0], s[1]), _lt(s[1], s[2]),
                None if s[2] is None or ratio is None else round(s[2], 2) <= ratio]
    return out


def table12_later_for_larger_g(get: Get) -> list[Check]:
    """At each length, a mixer with larger g is no closer to the asymptote: speedup(MHA) >=
    speedup(GQA) >= speedup(MLA) (compared at the paper's two decimals)."""
    s = {m: t12_speedups(get, m) for m in MIXERS}
    return [None if s[a][i] is None or s[b][i] is None else round(s[a][i], 2) >= round(s[b][i], 2)
            for i in range(len(T12_LENGTHS)) for a, b in zip(MIXERS, MIXERS[1:])]


def table12_within_at_128k(get: Get, ratio: float | None) -> list[Check]:
    """Per mixer: |L_conv/L_hg - speedup at 128k| <= 0.03 (the speedup at two decimals)."""
    return [None if s is None or ratio is None else abs(ratio - round(s, 2)) <= T12_WITHIN + 1e-9
            for s in (t12_speedups(get, m)[2] for m in MIXERS)]


def table12_layer_ratio(ctx: Context) -> float | None:
    """L_conv/L_hg of the decode pair whose runs list Table 12 (906M; the tiny default's own)."""
    listed = set(ctx.runs_for_table(T12))
    pair = next((p for p in ctx.decode_pairs.values() if set(p) <= listed), None)
    if not pair:
        return None
    return ctx.acc(pair[0])["n_attn_layers"] / ctx.acc(pair[1])["n_attn_layers"]


def printed_layer_ratio() -> float:
    shape = reference.row(T12, "decode906m_mha")["shape"]
    return shape["l_conv"] / shape["l_hg"]


def fig6_l12_below_baseline(get: Get, l12_rows: Sequence[str]) -> list[Check]:
    """Every (K, L) = (4, 12) point of the 403M sweep below the conventional baseline's Val PPL."""
    base = get("hourglass_fig6_403m_sweep", "hg403m_conv", "val_ppl")
    return [_lt(get("hourglass_fig6_403m_sweep", r, "val_ppl"), base) for r in l12_rows]


# ---------------------------------------------------------------- Tapered (arXiv 2606.23670)
FIG2 = "tapered_fig2_blocks"
FIG2_ORDER = ["tp440m_blocks_wider_early", "tp440m_uniform", "tp440m_blocks_wider_middle",
              "tp440m_blocks_wider_late"]  # 15.96 < 16.28 < 16.61 < 17.29
T1_RATIOS = ["1p25_0p75", "1p375_0p625", "1p5_0p5", "1p625_0p375", "1p75_0p25"]


def fig2_order(get: Get) -> list[Check]:
    ppl = [get(FIG2, r, "val_ppl") for r in FIG2_ORDER]
    return [_lt(a, b) for a, b in zip(ppl, ppl[1:])]


def cosine_worst_beats_linear_best(get: Get) -> list[Check]:
    """Every cosine cell of Table 1 below every linear cell (so cosine's worst below linear's best)."""
    cos = [get("tapered_table1", f"tp440m_cosine_{r}", "val_ppl") for r in T1_RATIOS]
    lin = [get("tapered_table1", f"tp440m_linear_{r}", "val_ppl") for r in T1_RATIOS]
    return [_lt(c, li) for c in cos for li in lin]


# Section 4's printed ranges of Pearson r (layer index vs rho), kept here as numbers for the checks.
NOVELTY = "tapered_sec4_novelty"


def novelty_measurements(ctx: Context) -> list[tuple[str, float | None, float | None, bool]]:
    """(name, Pearson r of rho^MLP, of rho^block, is a GPT-2 model of the cached analysis) per
    novelty.json: our runs listing tapered_fig4_novelty, then results/analysis/novelty/*.json."""
    from shapelm.results.readers import read_novelty

    paths = [(run, ctx.run_file(run, "novelty.json"), False) for run in ctx.runs_for_table("tapered_fig4_novelty")]
    hf = ctx.results_dir / "analysis" / "novelty"
    paths += [(p.stem, p, "gpt2" in p.stem.lower()) for p in (sorted(hf.glob("*.json")) if hf.is_dir() else [])]
    out = []
    for name, path, gpt2 in paths:
        d = read_novelty(path)
        if d is not None:
            out.append((name, d.get("pearson_r_mlp"), d.get("pearson_r_block"), gpt2))
    return out


def novelty_positive(found) -> list[Check]:
    return [None if r is None else r > 0 for _, rm, rb, _ in found for r in (rm, rb)]


def novelty_in_printed_ranges(found) -> list[Check]:
    """Each GPT-2 model's r (two decimals) inside Section 4's printed range for its quantity."""
    lo_hi = {q: (printed_getter(NOVELTY, f"novelty_rho_{q}", "r_min"), printed_getter(NOVELTY, f"novelty_rho_{q}", "r_max"))
             for q in ("mlp", "block")}
    out: list[Check] = []
    for _, rm, rb, gpt2 in found:
        if gpt2:
            for q, r in (("mlp", rm), ("block", rb)):
                out.append(None if r is None else lo_hi[q][0] <= round(r, 2) <= lo_hi[q][1])
    return out


def novelty_mlp_tighter(found) -> list[Check]:
    """Per model: the MLP's correlation with layer index at least the block's."""
    return [None if rm is None or rb is None else rm >= rb for _, rm, rb, _ in found]


# ---------------------------------------------------------------- LWS (arXiv 2509.06518, via the review)
LWS_18L = ["lws_framed_18l", "lws_vanilla_18l", "lws_reverse_18l", "lws_crown_18l"]


def late_rise(ctx: Context, run: str) -> float | None:
    """The largest rise of in-distribution held-out PPL between consecutive evaluations in the
    second half of training (0 when it only falls; None without two such evaluations)."""
    if not ctx.has_run(run):
        return None
    curve = ctx.val_curve(run)
    if not curve:
        return None
    half = ctx.acc(run)["total_tokens"] / 2
    late = [p for t, p in zip(*curve) if t >= half]
    if len(late) < 2:
        return None
    return max(0.0, max(b - a for a, b in zip(late, late[1:])))


def framed_late_bump(rises: dict[str, float | None]) -> list[Check]:
    """Framed's late rise is a rise, and larger than every other 18L variant's (the others' late
    wiggles stand for the evaluation noise of a curve)."""
    f = rises.get("lws_framed_18l")
    return [None if f is None else f > 0] + [_lt(rises.get(v), f) for v in LWS_18L[1:]]


def more_claims(ctx: Context, ours: Get, verdict: Callable) -> list:
    """The claims the papers state in words, each a `verdict` (shapelm.results.claims.verdict,
    passed in: the ledger imports this module, not the other way round)."""

    def claim(id, text, source, paper, build, *args, note="", paper_args=None, paper_side=True):
        """A verdict on our cells; from_paper: how many comparisons hold on the printed cells."""
        c = verdict(id, text, source, paper, build(ours, *args), note=note)
        if paper_side:
            held = build(printed_getter, *(args if paper_args is None else paper_args))
            if None not in held:
                c.from_paper = float(sum(x is True for x in held))
                c.note += f" On the printed values {c.from_paper:g} of {len(held)} hold."
        return c

    ratio = table12_layer_ratio(ctx)
    sweep = ctx.runs_for_table("hourglass_fig6_403m_sweep")
    l12 = sorted(n for n in sweep if "_l12_" in n)
    jumps = ratio_jumps(printed_getter)
    out = [
        claim("hourglass_table10_k_improves", "Hourglass Table 10: each step up in K (1, 2, 4, 6, 8) lowers Val "
              "Loss and Val PPL", "Appendix A.7.1 ('increasing K consistently improves')", "40.153 -> 32.832",
              table10_k_improves),
        claim("hourglass_table11_ppl_rises", "Hourglass Table 11: Val PPL rises at each step down in d_h/d_model "
              "(0.8 to 0.1)", "Appendix A.7.2, Table 11 caption", "32.788 -> 39.741", table11_ppl_rises),
        claim("hourglass_table11_steepest_below_0p4", "Hourglass Table 11: the largest Val PPL jump is a step to a "
              "ratio below 0.4", "Appendix A.7.2 ('the largest jumps ... below 0.4')", "below 0.4",
              table11_steepest_below_0p4,
              note=f"Derived from printed values: jumps {', '.join(f'{j:+.3f}' for j in jumps)} "
                   "(0.8->0.6, 0.6->0.4, 0.4->0.2, 0.2->0.1)."),
        claim("hourglass_fig6_l12_below_baseline", "Hourglass Figure 6: every (K, L) = (4, 12) point below the "
              "conventional 403M baseline's Val PPL", "Figure 6 caption ('remains below the conventional baseline "
              "across the sweep')", "every ratio", fig6_l12_below_baseline, l12, paper_side=False),
        claim("hourglass_a2_reduced_depth_worse", "Hourglass Table 5: the 906M conventional L=12 has higher Val PPL "
              "and Avg Downstream PPL than the L=24 standard", "Appendix A.2 ('worse validation PPL and average "
              "downstream PPL')", "26.85 vs 26.00; 1.578 vs 1.524", a2_reduced_depth_worse),
        claim("hourglass_table12_rises_toward_ratio", "Hourglass Table 12: per mixer the decode speedup rises "
              "32k < 64k < 128k toward L_conv/L_hg, not above it", "Appendix B.1, Table 12 caption",
              "1.93 -> 1.98 (MHA)", table12_rises_toward_ratio, ratio, paper_args=(printed_layer_ratio(),)),
        claim("hourglass_table12_later_for_larger_g", "Hourglass Table 12: at each length the speedup is no higher "
              "for a larger g (MHA >= GQA >= MLA)", "Appendix B.1 ('does so later for the mixers with larger g')",
              "later for larger g", table12_later_for_larger_g,
              note="At 64k the printed MLA (g~10.7) 1.94x is above GQA (g=4) 1.93x."),
        claim("hourglass_table12_within_0p03_128k", "Hourglass Table 12: at 128k every mixer within 0.03x of "
              "L_conv/L_hg", "Appendix B.1 ('within 0.03x of the layer-count ratio')", "0.03x",
              table12_within_at_128k, ratio, paper_args=(printed_layer_ratio(),)),
        claim("tapered_fig2_order", "Tapered Figure 2: wider-early < uniform < wider-middle < wider-late PPL",
              "Section 1 / Figure 2", "15.96 < 16.28 < 16.61 < 17.29", fig2_order),
        claim("tapered_cosine_worst_beats_linear_best", "Tapered Table 1: every cosine cell below every linear cell "
              "(cosine's worst below linear's best)", "Section 3.2 ('15.49 ... beats linear's best 15.64')",
              "15.49 < 15.64", cosine_worst_beats_linear_best, paper_side=False),
    ]
    found = novelty_measurements(ctx)
    src = "Section 4"
    out += [
        verdict("tapered_novelty_r_positive", "Tapered Section 4: Pearson r of rho^MLP and rho^block with layer "
                "index positive in every measurement", f"{src} ('positive in every measurement')", "r > 0",
                novelty_positive(found) or [None], note="Our runs and the cached GPT-2 models alike."),
        verdict("tapered_novelty_r_ranges", "Tapered Section 4: each GPT-2 model's r inside the printed range "
                "(rho^MLP 0.49-0.71, rho^block 0.27-0.71)", f"{src} (the printed ranges)",
                "0.49-0.71; 0.27-0.71", novelty_in_printed_ranges(found) or [None],
                note="GPT-2 models of results/analysis/novelty only (the paper's family); r at two decimals."),
        verdict("tapered_novelty_mlp_tighter", "Tapered Section 4: per model, rho^MLP's correlation with layer "
                "index at least rho^block's", f"{src} ('consistently tighter for the MLP')", "MLP tighter",
                novelty_mlp_tighter(found) or [None],
                note="Printed ranges: MLP 0.49-0.71 (width 0.22), block 0.27-0.71 (width 0.44)."),
    ]
    rises = {v: late_rise(ctx, v) for v in LWS_18L}
    out.append(verdict("lws_framed_late_bump", "LWS Figure 5: Framed's held-out PPL rises late in training, more "
                       "than any other 18L variant's", "Review of arXiv 2509.06518 ('a late-training PPL bump for "
                       "Framed')", "late bump", framed_late_bump(rises),
                       note="Late: the second half of training tokens; rise: the largest increase between "
                            "consecutive in-distribution evaluations."))
    return out
