"""`shapelm analyze novelty MODEL --text FILE`: load a model (ours or a cached Hugging Face one),
take the first N tokens of a text, measure rho per layer (shapelm.analysis.novelty), write JSON."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from shapelm import files
from shapelm.analysis import novelty
from shapelm.analysis.novelty import AnalysisError
from shapelm.errors import ShapelmError

log = logging.getLogger(__name__)

DEFINITION = ("rho_mlp[l] = mean over tokens of cos(h_{l+1} - z_l, z_l), z_l = the residual after the "
              "token mixer (a layer's sub-MLPs summed); rho_block[l] = mean over tokens of "
              "cos(h_{l+1} - h_l, h_l); Pearson r with layer index over layers 1..L-2")


class LoadedModel:
    def __init__(self, model, kind: str, name: str, taps, forward, tokenizer=None, max_len=None,
                 vocab_size: int | None = None) -> None:
        self.model, self.kind, self.name, self.taps, self.forward = model, kind, name, taps, forward
        self.tokenizer, self.max_len, self.vocab_size = tokenizer, max_len, vocab_size


def _is_shapelm_checkpoint(p: Path) -> bool:
    from shapelm.model.io import CONFIG

    return (p / CONFIG).is_file() or (p / "final" / CONFIG).is_file()


def load_shapelm(path: str | os.PathLike, device: str, dtype) -> LoadedModel:
    from shapelm.evaluation.loading import load_model

    try:
        model = load_model(path, device=device, dtype=dtype)
    except ShapelmError as err:
        raise AnalysisError(str(err)) from err
    return LoadedModel(model, "shapelm", str(path), novelty.shapelm_taps(model),
                       lambda ids: model.hidden_states(ids), vocab_size=model.config.vocab_size,
                       max_len=getattr(model.config, "max_seq_len", None))


def _remote_code(spec: str) -> bool:
    """Whether a local Hugging Face model directory names its own modeling code (auto_map)."""
    try:
        return "auto_map" in json.loads((Path(spec) / "config.json").read_text())
    except (OSError, ValueError):
        return False


def load_hf(spec: str, device: str, dtype, trust_remote_code: bool = False) -> LoadedModel:
    """A Hugging Face causal LM from a local directory or the local cache only (never the hub).
    Remote code runs only when asked (`trust_remote_code`); it is never prompted for."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(spec).is_dir()
    if local and _remote_code(spec) and not trust_remote_code:
        raise AnalysisError(f"model {spec}: its config.json names its own modeling code (auto_map), as shapelm's "
                            "exports of non-stock shapes do; pass --trust-remote-code to run it")
    try:
        model = AutoModelForCausalLM.from_pretrained(spec, local_files_only=True, dtype=dtype,
                                                     trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0]
        if "trust_remote_code" in str(err):
            raise AnalysisError(f"model {spec!r}: it is remote code; pass --trust-remote-code to run it: "
                                f"{first}") from err
        where = f"directory {spec}" if local else f"the local Hugging Face cache ({_hub_cache()})"
        raise AnalysisError(f"model {spec!r}: not loadable from {where} (offline: nothing is downloaded; "
                            f"put it there first): {first}") from err
    model.to(device).eval()
    try:
        tok = AutoTokenizer.from_pretrained(spec, local_files_only=True)
    except (OSError, ValueError):
        tok = None
    cfg = model.config
    max_len = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
    return LoadedModel(model, "hf", spec, novelty.hf_taps(model), lambda ids: model(input_ids=ids, use_cache=False),
                       tokenizer=tok, max_len=max_len, vocab_size=getattr(cfg, "vocab_size", None))


def _hub_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def load_any(spec: str, device: str, dtype, trust_remote_code: bool = False) -> LoadedModel:
    p = Path(spec)
    if p.exists():
        if _is_shapelm_checkpoint(p):
            return load_shapelm(p, device, dtype)
        if (p / "config.json").is_file():
            return load_hf(str(p), device, dtype, trust_remote_code)
        raise AnalysisError(f"{p}: neither a shapelm checkpoint (run dir or weights dir) nor a Hugging Face "
                            "model directory (config.json)")
    if spec.startswith((".", "/")) or spec.count("/") > 1:
        raise AnalysisError(f"{spec}: no such checkpoint directory")
    return load_hf(spec, device, dtype, trust_remote_code)


def _tokenizer(spec: str | None):
    from shapelm.evaluation.loading import EvalError, TextTokenizer

    if spec is None:
        return None
    try:
        return TextTokenizer.load(spec)
    except EvalError as err:
        raise AnalysisError(str(err)) from err


def token_stream(m: LoadedModel, text: str, n_tokens: int, tokenizer: str | None = None,
                 text_tokenizer: str | None = None) -> torch.Tensor:
    """The first n_tokens of `text` in the model's vocabulary.

    A token directory (manifest.json) is read as ids when the model is ours (the validation sets
    are stored in the tokenizer the run trained on); for a Hugging Face model it is decoded with
    `text_tokenizer` and re-encoded. A text file or a directory of text files is encoded with the
    model's tokenizer (`tokenizer`, else the one saved with the model)."""
    from shapelm.evaluation.loading import EvalError, find_tokenizer_near
    from shapelm.evaluation.examples import documents_from_text, documents_from_token_dir

    p = Path(text)
    is_token_dir = (p / "manifest.json").is_file()
    try:
        if is_token_dir and m.kind == "shapelm" and tokenizer is None:
            from shapelm.evaluation.ppl import open_token_dir

            store = open_token_dir(p)
            ids = store.read(0, min(store.n_tokens, n_tokens))
            ids = torch.as_tensor(ids.astype("int64"))
        else:
            if is_token_dir:
                if text_tokenizer is None:
                    raise AnalysisError(f"{p} is a token directory: pass --text-tokenizer (the tokenizer its "
                                        f"ids are in) to decode it for {m.name}")
                docs = documents_from_token_dir(p, _tokenizer(text_tokenizer), max_tokens=max(8 * n_tokens, 65536))
            else:
                docs = documents_from_text(p)
            if m.kind == "hf" and tokenizer is None:
                if m.tokenizer is None:
                    raise AnalysisError(f"model {m.name}: no tokenizer in the cache beside it; pass --tokenizer")
                encode = lambda s: m.tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
            else:
                spec = tokenizer or find_tokenizer_near(m.name)
                if spec is None:
                    raise AnalysisError(f"model {m.name}: no tokenizer saved with it; pass --tokenizer")
                encode = _tokenizer(spec).encode
            out: list[int] = []
            for doc in docs:  # documents joined as WikiText's are: by blank lines
                out += encode(doc + "\n\n")
                if len(out) >= n_tokens:
                    break
            ids = torch.tensor(out[:n_tokens], dtype=torch.long)
    except EvalError as err:
        raise AnalysisError(str(err)) from err
    if ids.numel() < n_tokens:
        raise AnalysisError(f"{text}: only {ids.numel()} tokens, {n_tokens} asked (--tokens)")
    if m.vocab_size is not None and int(ids.max()) >= m.vocab_size:
        raise AnalysisError(f"{text}: token id {int(ids.max())} >= the model's vocabulary ({m.vocab_size}); "
                            "a token directory in another tokenizer? pass --text-tokenizer")
    return ids


def run_novelty(model: str, text: str, n_tokens: int = novelty.PAPER_TOKENS, seq_len: int = 1024,
                tokenizer: str | None = None, text_tokenizer: str | None = None, device: str = "auto",
                dtype: str = "float32", trust_remote_code: bool = False) -> dict[str, Any]:
    from shapelm.evaluation.loading import resolve_device, resolve_dtype

    dev = resolve_device(device)
    try:
        dt = resolve_dtype(dtype, dev)
    except ShapelmError as err:
        raise AnalysisError(str(err)) from err
    if n_tokens < 1 or seq_len < 1:
        raise AnalysisError(f"--tokens and --seq-len must be positive (got {n_tokens}, {seq_len})")
    m = load_any(model, dev, dt, trust_remote_code)
    if m.max_len and seq_len > m.max_len:
        log.info("seq_len %d > %s's context %d: using %d", seq_len, m.name, m.max_len, m.max_len)
        seq_len = m.max_len
    ids = token_stream(m, text, n_tokens, tokenizer, text_tokenizer).to(dev)
    result = novelty.measure(m.model, m.taps, m.forward, ids, seq_len)
    return {"model": m.name, "model_kind": m.kind, "text": str(text), "device": dev, "dtype": str(dt),
            "definition": DEFINITION, **result}


def novelty_cli(args) -> int:
    result = run_novelty(args.model, args.text, n_tokens=args.tokens, seq_len=args.seq_len,
                         tokenizer=args.tokenizer, text_tokenizer=args.text_tokenizer, device=args.device,
                         dtype=args.dtype, trust_remote_code=args.trust_remote_code)
    files.write_json(args.out, result)
    fmt = lambda v: "n/a" if v is None else f"{v:+.3f}"  # noqa: E731
    print(f"{result['model']}: {result['n_layers']} layers, {result['n_tokens']} tokens; Pearson r with layer "
          f"index (layers 1..L-2): MLP {fmt(result['pearson_r_mlp'])}, block {fmt(result['pearson_r_block'])} "
          f"-> {args.out}")
    print(json.dumps({"rho_mlp": result["rho_mlp"], "rho_block": result["rho_block"]}))
    return 0


def run_depth(model: str, text: str, n_tokens: int = novelty.PAPER_TOKENS, seq_len: int = 256,
              device: str = "auto") -> dict[str, Any]:
    """Residual-stream norms and skip losses per layer of one of our checkpoints
    (shapelm.analysis.depth), on the first `n_tokens` of `text`."""
    from shapelm.analysis.depth import measure_depth
    from shapelm.evaluation.loading import resolve_device

    if n_tokens < 2 or seq_len < 1:
        raise AnalysisError(f"--tokens must be at least 2 and --seq-len positive (got {n_tokens}, {seq_len})")
    dev = resolve_device(device)
    if not _is_shapelm_checkpoint(Path(model)):
        raise AnalysisError(f"{model}: not a shapelm checkpoint (run dir or weights dir); the depth analyses "
                            "hook the blocks of our models")
    m = load_shapelm(model, dev, torch.float32)
    ids = token_stream(m, text, n_tokens).to(dev)
    return {"model": m.name, "text": str(text), "device": dev, **measure_depth(m.model, ids, seq_len)}


def depth_cli(args) -> int:
    from shapelm.records import DepthRecord

    result = run_depth(args.model, args.text, n_tokens=args.tokens, seq_len=args.seq_len, device=args.device)
    DepthRecord.from_dict(result, args.out).write(args.out)
    deltas = " ".join(f"{layer['skip_delta']:+.3f}" for layer in result["layers"])
    norms = " ".join(f"{a['residual_norm']:.2f}" for a in result["applied"])
    print(f"{result['model']}: loss {result['loss']:.4f} on {result['tokens']} tokens -> {args.out}\n"
          f"  loss increase when layer l is skipped: {deltas}\n"
          f"  residual-stream norm after each block: {norms}")
    return 0
