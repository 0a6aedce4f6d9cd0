"""Where ours may differ from a printed value, and why (docs/PAPER_NOTES.md): a cell whose
(table, row, column) is listed here is `documented`, not `MISMATCH`. Tests assert that every
accounting mismatch of configs/paper.yaml is listed.
"""

from __future__ import annotations



# ----------------------------------------------------------------------------- documented gaps

_T2_ATTN = ("Table 2 attention column: conventional cells count the attention-side RMSNorm weights, "
            "hourglass cells do not; ours is the bare matrix count (PAPER_NOTES arXiv 2602.06471 item 3).")
_T4_BATCH = ("Table 4 'Batch Tokens (K)' counts sequences at this scale, not K tokens: this experiment uses "
             "{seqs} sequences of {seq} (PAPER_NOTES 'Table 4 batch size against the FLOPs').")
_T4_SMALL = ("Table 5's 403M FLOPs fit only S = 2048 and 524,288 tokens per step (256 x 2048), 113M's "
             "'512 (K)' with K = 1024 tokens; this experiment trains both small studies so "
             "(PAPER_NOTES 'Table 4 batch size against the FLOPs').")
_ROUNDED_DELTA = ("The paper's FLOPs deltas are ratios of its rounded printed FLOPs (e.g. 3.26/3.34 - 1 = "
                  "-2.40%); ours is the ratio of the exact accounting values.")
_KV_3B = ("The intro prints 35.3%, but equal d_attn in both arms gives 1 - 18/28 = 35.7% "
          "(PAPER_NOTES arXiv 2602.06471 item 1).")
_FROZEN_HG = ("The printed 'Hourglass 403M' shape counts 535.6M non-embedding parameters, not 403M "
              "(PAPER_NOTES arXiv 2602.06471 item 2); it is trained as printed.")

# (table, row, column) -> why ours may differ from the printed value. Tests assert that every
# accounting mismatch of configs/paper.yaml is listed here.
KNOWN_DIFFERENCES: dict[tuple[str, str, str], str] = {
    ("hourglass_table2", "hg906m_conv", "attn_params"): _T2_ATTN,
    ("hourglass_table2", "hg8b_conv", "attn_params"): _T2_ATTN,
    ("hourglass_decode_text", "decode_3b", "kv_reduction_64k"): _KV_3B,
    **{(t, r, c): _ROUNDED_DELTA for t, r, c in (
        ("hourglass_table2", "hg906m_hg", "train_flops_delta"), ("hourglass_table2", "hg3b_hg", "train_flops_delta"),
        ("hourglass_table2", "hg8b_hg", "train_flops_delta"), ("hourglass_table5", "hg906m_conv_l12", "flops_delta"),
        *(("hourglass_table5", r, "flops_delta") for r in ("hg403m_conv_r3", "hg403m_conv_r2", "hg403m_conv_r1p5")))},
    ("lws_table3", "lws_baseline_12l", "params"): (
        "'180M' is the review's round figure (caption: '~180M'); OpenELM counting with untied 50304 "
        "embeddings gives 181.1M (PAPER_NOTES arXiv 2509.06518 'Parameter accounting')."),
    ("hourglass_fig3_906m_sweep", "hg906m_sweep_r0p9", "flops_saving"): (
        "The sweep shapes are not printed (this experiment solves them at the 906M budget, PAPER_NOTES 'Missing "
        "from the papers' text'); the text's '~3%' is approximate."),
    **{("hourglass_table4", f"recipe_{s}", "batch_tokens"): _T4_BATCH.format(seqs=1024, seq=4096)
       for s in ("906m", "3b", "8b")},
    **{("hourglass_table4", r, c): _T4_SMALL for r, c in (
        ("recipe_113m", "batch_tokens"), ("recipe_403m", "batch_tokens"), ("recipe_403m", "seq_len"))},
}


def known_difference(table: str, row: str, col: str) -> str | None:
    return KNOWN_DIFFERENCES.get((table, row, col))
