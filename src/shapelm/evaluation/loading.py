"""Finding a checkpoint and a tokenizer from what a user passes on the command line."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from shapelm.errors import DataError, EvalError, ShapelmError
from shapelm.model.io import CONFIG, WEIGHTS
from shapelm.records import RecordError, RunManifestRecord

EOS_TOKEN = "<|endoftext|>"


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A run directory (``DIR/final/``) or the weights directory itself."""
    p = Path(path)
    if not p.exists():
        raise EvalError(f"{p}: no such checkpoint directory")
    for cand in (p, p / "final"):
        if (cand / CONFIG).is_file():
            if not (cand / WEIGHTS).is_file():
                raise EvalError(f"{cand / WEIGHTS}: weights file missing beside {CONFIG}")
            return cand
    raise EvalError(f"{p}: not a shapelm checkpoint (no {CONFIG} in it or in {p / 'final'})")


def load_model(path: str | os.PathLike, device: str = "cpu", dtype: torch.dtype | str | None = None):
    """The checkpoint built on meta and materialised in `dtype` on `device` (shapelm.model.io);
    dtype None / "auto": bf16 on CUDA, float32 on CPU."""
    from shapelm.model.io import load_pretrained

    dtype = resolve_dtype(dtype, device)
    ckpt = resolve_checkpoint(path)
    try:
        model = load_pretrained(ckpt, device=device, dtype=dtype)
    except ShapelmError as err:
        raise EvalError(f"checkpoint {ckpt}: {err}") from err
    model.eval()
    return model


def resolve_device(device: str | None) -> str:
    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        # lm-eval's command line passes device="cuda" unless told otherwise
        import logging

        logging.getLogger(__name__).warning("device %s requested but CUDA is unavailable: using cpu", device)
        return "cpu"
    return str(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device = "cpu") -> torch.dtype:
    """None / "auto": bf16 on CUDA (evaluation at the precision the model trained in), float32
    on CPU (where bf16 matmuls are slow and the reference numbers are float32)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise EvalError(f"dtype {dtype!r}: expected one of float32, bfloat16, float16")
    return table[dtype]


class TextTokenizer:
    """One interface over a ``tokenizers.Tokenizer`` file and a transformers tokenizer dir."""

    def __init__(self, spec: str | os.PathLike, hf=None, fast=None, eos_id: int | None = None) -> None:
        self.spec = str(spec)
        self._hf = hf
        self._fast = fast
        if eos_id is not None:
            eos = eos_id
        elif self._fast is not None:
            eos = self._fast.token_to_id(EOS_TOKEN)
        else:
            eos = self._hf.eos_token_id
            if eos is None:
                eos = self._hf.convert_tokens_to_ids(EOS_TOKEN)
        if eos is None:
            raise EvalError(f"tokenizer {spec}: no EOS token ({EOS_TOKEN})")
        self.eos_id = int(eos)

    @classmethod
    def load(cls, spec: str | os.PathLike) -> TextTokenizer:
        p = Path(spec)
        if p.is_dir() and (p / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            try:
                return cls(spec, hf=AutoTokenizer.from_pretrained(str(p)))
            except Exception as err:  # transformers raises many kinds
                raise EvalError(f"tokenizer {p}: cannot load with transformers ({err})") from err
        try:
            from shapelm.data.tokenizer import (
                load_tokenizer,
                resolve_tokenizer_file,
                tokenizer_eos_id,
            )

            fast = load_tokenizer(spec)
            # The repo's own EOS (tokenizer_config.json), e.g. Llama's </s>, not only <|endoftext|>.
            file = None if str(spec).startswith("default") else resolve_tokenizer_file(spec)
            return cls(spec, fast=fast, eos_id=tokenizer_eos_id(fast, file))
        except ImportError:  # the data stage is not installed: accept a plain file/dir
            pass
        except ShapelmError as err:
            raise EvalError(f"tokenizer {spec}: {err}") from err
        from tokenizers import Tokenizer

        f = p / "tokenizer.json" if p.is_dir() else p
        if not f.is_file():
            raise EvalError(f"tokenizer {spec}: no such file (expected a tokenizer.json)")
        return cls(spec, fast=Tokenizer.from_file(str(f)))

    @property
    def vocab_size(self) -> int:
        if self._fast is not None:
            return self._fast.get_vocab_size()
        return len(self._hf)

    def encode(self, text: str) -> list[int]:
        if self._fast is not None:
            return self._fast.encode(text, add_special_tokens=False).ids
        return self._hf.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        if self._fast is not None:
            return self._fast.decode(list(ids), skip_special_tokens=False)
        return self._hf.decode(list(ids), skip_special_tokens=False)

    def tokenizer_file(self) -> Path | None:
        """The tokenizer.json behind a tokenizers-file spec (for export), else None."""
        if self._fast is None:
            return None
        p = Path(self.spec)
        if p.is_file():
            return p
        if p.is_dir() and (p / "tokenizer.json").is_file():
            return p / "tokenizer.json"
        try:
            from shapelm.data.tokenizer import resolve_tokenizer_file

            return resolve_tokenizer_file(self.spec)
        except Exception:
            return None


def find_tokenizer_near(model_path: str | os.PathLike) -> str | None:
    """The tokenizer of a checkpoint: one saved beside it (DIR/tokenizer.json, DIR/final/), the
    manifest's ``tokenizer``, else the one its training tokens are in (the run manifest's
    ``data.dir``, whose token manifest names it: the default corpus' file, a re-encoded scale's
    tokenizer, the OLMo slicer's dolma2); a DAG run directory needs no ``tokenizer=``."""
    p = Path(model_path)
    for cand in (p, p / "final"):
        if (cand / "tokenizer_config.json").is_file() or (cand / "tokenizer.json").is_file():
            return str(cand)
    for manifest in (p / "manifest.json", p.parent / "manifest.json"):  # DIR, or DIR/final given
        try:
            run = RunManifestRecord.read(manifest)
        except RecordError:
            continue  # not a run's manifest: look no further there
        if run is None:
            continue
        if run.tokenizer:
            return run.tokenizer
        if run.token_dir:
            return tokenizer_of_tokens(run.token_dir)
    return None


def tokenizer_of_tokens(token_dir: str | os.PathLike) -> str | None:
    """The tokenizer a token directory's manifest says its ids are in, or None."""
    from shapelm.data.tokens import read_manifest

    d = Path(token_dir)
    try:
        m = read_manifest(d)
    except DataError:
        return None  # not a token directory (moved, or never written): no tokenizer to name
    spec = m.get("tokenizer")
    if isinstance(spec, str):
        for base in (d, d.parent):  # the default corpus names its file, one level up from a split
            if (base / spec).is_file():
                return str(base / spec)
        return spec  # a hub id or a path, as the re-encoding was given it
    if m.get("kind") == "olmo-slice":
        from shapelm.data.validation import load_olmo_config

        return load_olmo_config()["tokenizer"]
    return None
