"""`shapelm` as an lm-evaluation-harness model (``@register_model("shapelm")``).

Python::

    from shapelm.evaluation.lm_eval_model import ShapelmLM
    lm_eval.simple_evaluate(model=ShapelmLM(pretrained="runs/x", tokenizer="tokenizer.json"), ...)

Command line: lm-eval 0.4.x has no plugin entry points (models are found only in its own
``MODEL_MAPPING`` or in classes already imported), so the ``lm_eval`` executable cannot see this
class; ``shapelm-lm-eval --model shapelm ...`` (``shapelm.evaluation.lm_eval_cli``) imports this module and
then runs lm-eval's own ``cli_evaluate`` (same arguments).

Scoring follows lm-eval's ``hf`` model: context+continuation encoded together and split at the
context's length, an empty context replaced by EOS, inputs truncated from the left to
``max_length + 1`` tokens; rolling log-likelihood uses lm-eval's disjoint rolling windows.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from shapelm.model.generate import greedy_generate_batch
from shapelm.evaluation.loading import (
    EvalError,
    TextTokenizer,
    find_tokenizer_near,
    load_model,
    resolve_device,
    resolve_dtype,
)

log = logging.getLogger(__name__)

# `get_model` imports lm-eval's own models only while its registry is empty: fill it first so
# registering "shapelm" does not hide "hf" and the rest.
import lm_eval.models  # noqa: E402,F401


@register_model("shapelm")
class ShapelmLM(TemplateLM):
    def __init__(
        self,
        pretrained=None,
        tokenizer=None,
        device: str | None = None,
        dtype: str | torch.dtype | None = "auto",
        batch_size: int | str = 8,
        max_batch_size: int | None = None,
        max_length: int | None = None,
        max_gen_toks: int = 256,
        model=None,
        **kwargs,
    ) -> None:
        super().__init__()
        if kwargs:
            log.warning("ShapelmLM: ignoring unknown arguments %s", sorted(kwargs))
        self._device = torch.device(resolve_device(device))
        self._dtype = resolve_dtype(dtype, self._device)
        if model is None:
            if pretrained is None:
                raise EvalError("ShapelmLM: pass pretrained=<checkpoint dir> (or model=<Transformer>)")
            model = load_model(pretrained, device=str(self._device), dtype=self._dtype)
        else:
            model = model.to(device=self._device, dtype=self._dtype).eval()
        self.model = model
        if tokenizer is None and pretrained is not None:
            tokenizer = find_tokenizer_near(pretrained)
        if tokenizer is None:
            raise EvalError(f"{pretrained}: no tokenizer beside the checkpoint or named by its manifest; "
                            "pass tokenizer=<tokenizer.json, a transformers dir or a hub id>")
        self.tok = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer.load(tokenizer)
        if self.tok.vocab_size > model.config.vocab_size:
            raise EvalError(
                f"tokenizer {self.tok.spec}: {self.tok.vocab_size} tokens > model vocab_size "
                f"{model.config.vocab_size}"
            )
        bs = str(batch_size)
        if bs.startswith("auto"):
            log.warning("ShapelmLM: batch_size=auto is not supported; using 8")
            bs = "8"
        self.batch_size = int(bs)
        self._max_length = int(max_length) if max_length else model.config.max_seq_len
        self.max_gen_toks = int(max_gen_toks)
        self.pretrained = str(pretrained) if pretrained is not None else "<in-memory>"

    # -- TemplateLM plumbing -------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def device(self):
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return self.tok.spec.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        return self.tok.encode(string)

    def tok_decode(self, tokens) -> str:
        return self.tok.decode(tokens)

    def get_model_info(self) -> dict:
        return {"model_pretrained": self.pretrained, "model_dtype": str(self._dtype)}

    @torch.no_grad()
    def _logits(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).logits

    # -- log-likelihood -------------------------------------------------------------------------
    @torch.no_grad()
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        """requests: [((context, continuation), context_enc, continuation_enc)]."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1]) - len(requests[i][2]))
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="shapelm loglikelihood")
        for b in range(0, len(order), self.batch_size):
            chunk = order[b : b + self.batch_size]
            inps, conts = [], []
            for i in chunk:
                _, ctx, cont = requests[i]
                if not cont:
                    raise EvalError(f"empty continuation in request {requests[i][0]!r}")
                inp = (ctx + cont)[-(self.max_length + 1) :][:-1]
                # A continuation longer than the window: score the part the window predicts
                # (its first token would need a context position the window does not hold).
                inps.append(inp)
                conts.append(cont[-len(inp):] if len(cont) > len(inp) else cont)
            width = max(len(x) for x in inps)
            batch = torch.full((len(inps), width), self.eot_token_id, dtype=torch.long)
            for r, inp in enumerate(inps):
                batch[r, : len(inp)] = torch.tensor(inp, dtype=torch.long)
            logprobs = F.log_softmax(self._logits(batch.to(self.device)).float(), dim=-1)
            for r, i in enumerate(chunk):
                n_inp, cont = len(inps[r]), conts[r]
                lp = logprobs[r, n_inp - len(cont) : n_inp]
                target = torch.tensor(cont, dtype=torch.long, device=lp.device)
                greedy = bool((lp.argmax(-1) == target).all())
                ll = float(lp.gather(-1, target[:, None]).sum())
                results[i] = (ll, greedy)
                self.cache_hook.add_partial("loglikelihood", requests[i][0], (ll, greedy))
            bar.update(len(chunk))
        bar.close()
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        from lm_eval import utils

        windows, owners = [], []
        for r, (string,) in enumerate(req.args for req in requests):
            for ctx, cont in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append(((None, None), ctx, cont))
                owners.append(r)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for r, (ll, _) in zip(owners, scores):
            totals[r] += ll
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # -- greedy generation ----------------------------------------------------------------------
    def greedy_generate(self, prompts: list[list[int]], max_new_tokens: int, eos_id: int | None = None) -> list[list[int]]:
        """Greedy continuations of `prompts` decoded together, each ending before `eos_id`: the
        one greedy generator (`shapelm.model.generate`: ragged prompts key-masked in one
        cache; models with a recurrent state one prompt at a time)."""
        return greedy_generate_batch(self.model, prompts, [max_new_tokens] * len(prompts), eos_id=eos_id,
                                     device=self.device)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from lm_eval.models.utils import handle_stop_sequences

        eos_text = self.tok_decode([self.eot_token_id])
        prepared = []
        for context, gen_kwargs in (req.args for req in requests):
            kw = dict(gen_kwargs or {})
            if kw.get("do_sample") and float(kw.get("temperature", 1.0) or 0) > 0:
                log.warning("ShapelmLM.generate_until: sampling requested; decoding greedily")
            until = handle_stop_sequences(kw.get("until"), eos=eos_text)
            max_new = int(kw.get("max_gen_toks", kw.get("max_new_tokens", self.max_gen_toks)))
            max_ctx = max(self.max_length - max_new, 1)
            ids = self.tok_encode(context)[-max_ctx:] or [self.eot_token_id]
            prepared.append((ids, max_new, tuple(until)))
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (ids, max_new, _) in enumerate(prepared):
            groups[(len(ids), max_new)].append(i)
        results: list[str | None] = [None] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc="shapelm generate_until")
        for (_, max_new), idx in sorted(groups.items(), key=lambda kv: -kv[0][0]):
            for b in range(0, len(idx), self.batch_size):
                chunk = idx[b : b + self.batch_size]
                outs = self.greedy_generate([prepared[i][0] for i in chunk], max_new, self.eot_token_id)
                for i, toks in zip(chunk, outs):
                    text = self.tok_decode(toks)
                    for s in prepared[i][2]:
                        if s and s in text:
                            text = text.split(s)[0]
                    results[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(chunk))
        bar.close()
        return results
