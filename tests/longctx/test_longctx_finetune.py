"""YaRN finetune: schedule, a tiny run, resumption equals an uninterrupted run."""

import json

import numpy as np
import pytest
import torch

from shapelm.data.tokens import write_token_dir
from shapelm.errors import ConfigError
from shapelm.train import checkpoint as ckpt
from shapelm.longctx.finetune import FinetuneConfig, lr_factor, yarn_finetune
from tiny_longctx import tiny_model
from shapelm.model import load_pretrained, save_pretrained


def test_lr_schedule_linear_and_constant():
    f = [lr_factor(s, 20, 400, "linear") for s in range(400)]
    assert f[0] == 0.0 and f[10] == 0.5 and f[20] == 1.0
    assert f[210] == pytest.approx(0.5) and f[399] == pytest.approx(1 / 380)
    c = [lr_factor(s, 20, 400, "constant") for s in range(400)]
    assert c[19] == pytest.approx(0.95) and c[20:] == [1.0] * 380


@pytest.fixture()
def setup(tmp_path):
    model = tiny_model(vocab_size=300, max_seq_len=32)
    save_pretrained(model, tmp_path / "base")
    rng = np.random.default_rng(0)
    write_token_dir(tmp_path / "tokens", rng.integers(1, 300, size=20 * 64, dtype=np.uint32), 300, 0)
    cfg = dict(steps=4, lr=1e-3, batch=4, micro_batch=2, seq_len=64, factor=2.0, original=32, warmup=2,
               loss_chunk_tokens=16, checkpoint_every=2, device="cpu")
    return tmp_path, cfg


def test_finetune_and_resume_match_uninterrupted(setup):
    tmp, cfg = setup
    result = yarn_finetune(tmp / "base", tmp / "tokens", tmp / "full", FinetuneConfig(**cfg))
    assert result.status == "completed" and result.exit_code == 0
    full = result.path
    assert (full / "model.safetensors").is_file()
    m_full = load_pretrained(full)
    assert m_full.config.rope_scaling == {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}
    assert m_full.config.max_seq_len == 64
    recs = [json.loads(x) for x in (tmp / "full" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [1, 2, 3, 4]
    assert [r["lr"] for r in recs] == pytest.approx([0.0, 5e-4, 1e-3, 5e-4])

    # interrupted after 1 step (checkpoint written on stop), then resumed to the end
    yarn_finetune(tmp / "base", tmp / "tokens", tmp / "res", FinetuneConfig(**cfg), max_steps_this_call=1)
    [(step, path)] = ckpt.list_checkpoints(tmp / "res")
    assert step == 1 and ckpt.is_valid(path, verify=True)  # pretraining's verified layout
    trainer = ckpt.load_torch(path / "trainer.pt")
    assert trainer["step"] == 1 and trainer["scheduler"]["kind"] == "yarn_linear"
    assert trainer["scheduler"]["last_lr"] == 0.0  # the first update's lr
    # optimizer state keyed by parameter name, as pretraining's (world-size independent)
    assert "exp_avg" in ckpt.load_torch(path / "optimizer.pt")["state"]["layers.0.attn.q_proj.weight"]
    yarn_finetune(tmp / "base", tmp / "tokens", tmp / "res", FinetuneConfig(**cfg), max_steps_this_call=2)
    resumed = yarn_finetune(tmp / "base", tmp / "tokens", tmp / "res", FinetuneConfig(**cfg)).path
    m_res = load_pretrained(resumed)
    for (k, a), b in zip(m_full.state_dict().items(), m_res.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)
    base = load_pretrained(tmp / "base")
    assert not torch.equal(base.state_dict()["layers.0.attn.q_proj.weight"], m_full.state_dict()["layers.0.attn.q_proj.weight"])
    # finished runs are not redone; a changed config is refused on resume
    again = yarn_finetune(tmp / "base", tmp / "tokens", tmp / "res", FinetuneConfig(**cfg))
    assert again.status == "already_complete" and again.path == resumed
    yarn_finetune(tmp / "base", tmp / "tokens", tmp / "other", FinetuneConfig(**cfg), max_steps_this_call=1)
    with pytest.raises(ConfigError, match="lr"):
        yarn_finetune(tmp / "base", tmp / "tokens", tmp / "other", FinetuneConfig(**dict(cfg, lr=5e-4)))


def test_finetune_from_text_source(tmp_path):
    from tiny_longctx import english_text, tiny_tokenizer

    tok = tiny_tokenizer()
    save_pretrained(tiny_model(vocab_size=tok.get_vocab_size(), max_seq_len=32), tmp_path / "base")
    (tmp_path / "pg19").mkdir()
    for i in range(3):
        (tmp_path / "pg19" / f"book{i}.txt").write_text(english_text(60, seed=i))
    out = yarn_finetune(tmp_path / "base", tmp_path / "pg19", tmp_path / "ft",
                        FinetuneConfig(steps=1, batch=2, seq_len=64, factor=2, original=32, warmup=0,
                                       device="cpu", loss_chunk_tokens=32),
                        tokenizer=tok).path
    assert (out / "model.safetensors").is_file()
    man = json.loads((tmp_path / "ft" / "data" / "manifest.json").read_text())
    assert man["seq_len"] == 64 and man["n_tokens"] % 64 == 0


def test_finetune_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        FinetuneConfig(batch=6, micro_batch=4).validate()
    with pytest.raises(ConfigError):
        FinetuneConfig(schedule="cosine").validate()


def test_prepare_reads_the_train_split_and_stops_at_max_segments(tmp_path):
    from shapelm.cli import main
    from shapelm.data.tokens import TokenStore
    from tiny_longctx import english_text, tiny_tokenizer

    for split, seed in (("train", 0), ("train", 1), ("test", 2)):  # deepmind's PG19 layout
        (tmp_path / "pg19" / split).mkdir(parents=True, exist_ok=True)
        (tmp_path / "pg19" / split / f"{seed}.txt").write_text(english_text(200, seed=seed))
    tok = tiny_tokenizer()
    tok.save(str(tmp_path / "tokenizer.json"))
    assert main(["longctx", "prepare", "--source", str(tmp_path / "pg19"), "--tokenizer", str(tmp_path / "tokenizer.json"),
                 "--seq-len", "64", "--max-segments", "5", "--out", str(tmp_path / "seg")]) == 0
    store = TokenStore(tmp_path / "seg")
    assert store.n_tokens == 5 * 64 and store.manifest["split"] == "train"
    first = tok.encode(english_text(200, seed=0)).ids[:64]
    assert store.read(0, 64).tolist() == first  # the train books, in order


def test_finetune_makes_the_updates_of_plain_adamw_on_its_segments(setup):
    """The finetune's trajectory equals a plain PyTorch loop written from its recipe alone: the
    YaRN model from the base weights, AdamW, the warm-up/linear-decay lr, each step's whole
    batch of segments (micro-batches, checkpointing and chunked loss change no number)."""
    from shapelm.longctx.finetune import SegmentData
    from shapelm.longctx.yarn import yarn_model_config
    from shapelm.model import build_model

    tmp, cfg = setup
    ft = FinetuneConfig(**cfg)
    result = yarn_finetune(tmp / "base", tmp / "tokens", tmp / "ft", ft)
    losses = [json.loads(x)["loss"] for x in (tmp / "ft" / "metrics.jsonl").read_text().splitlines()]

    base = load_pretrained(tmp / "base")
    model = build_model(yarn_model_config(base.config, ft.scaling()), "cpu")
    model.load_state_dict(base.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=ft.lr, betas=(ft.beta1, ft.beta2), eps=ft.eps,
                            weight_decay=0.0)
    segments = SegmentData(tmp / "tokens", ft.seq_len, ft.seed)
    expected = []
    for step in range(ft.steps):
        for group in opt.param_groups:
            group["lr"] = ft.lr * lr_factor(step, ft.warmup, ft.steps, ft.schedule)
        batch = np.stack([segments.sample(step * ft.batch + i) for i in range(ft.batch)])
        tokens = torch.from_numpy(batch.astype(np.int64))
        loss = model(tokens[:, :-1], tokens[:, 1:], return_logits=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        expected.append(float(loss.detach()))
    assert losses == pytest.approx(expected, rel=1e-5)
    assert len(set(expected)) == ft.steps  # every step saw other segments
    finetuned = load_pretrained(result.path).state_dict()
    for name, want in model.state_dict().items():
        torch.testing.assert_close(finetuned[name], want, rtol=1e-4, atol=1e-6, msg=name)


def test_one_module_steps_an_optimizer():
    """Pretraining and the finetune update weights through one function (train.steps.update):
    no other module of the package calls an optimizer's step()."""
    import ast
    from pathlib import Path

    import shapelm

    root = Path(shapelm.__file__).parent
    stepping = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step" and "opt" in ast.unparse(node.func.value).lower()):
                stepping.add(path.relative_to(root).as_posix())
    assert stepping == {"train/steps.py"}


def test_finetune_defaults_live_in_the_schema_and_the_config():
    """The schema's `longctx:` defaults are FinetuneConfig's, and the CLI's options default to
    FinetuneConfig's (and the schema's): one home per default."""
    import argparse

    from shapelm.config import section_defaults
    from shapelm.longctx import cli

    d = section_defaults("longctx")
    cfg = FinetuneConfig()
    assert (cfg.steps, cfg.batch, cfg.micro_batch, cfg.factor, cfg.checkpoint_every) == (
        d["finetune_steps"], d["finetune_batch"], d["micro_batch"], d["factor"], d["checkpoint_every"])
    assert isinstance(cfg.factor, float)  # a resumed finetune's fingerprint holds 16.0

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers())
    args = parser.parse_args(["longctx", "finetune", "--model", "m", "--data", "d", "--out", "o"])
    assert cli.finetune_config(args) == cfg
    args = parser.parse_args(["longctx", "finetune", "--model", "m", "--data", "d", "--out", "o",
                              "--steps", "7", "--factor", "4", "--no-activation-checkpointing"])
    assert cli.finetune_config(args) == FinetuneConfig(steps=7, factor=4.0, activation_checkpointing=False)
    pp = parser.parse_args(["longctx", "proofpile", "--model", "m", "--docs", "d", "--out", "o"])
    assert (pp.lengths, pp.min_tokens, pp.num_docs) == (
        d["lengths"], d["proofpile_min_tokens"], d["proofpile_num_docs"])
    gen = parser.parse_args(["longctx", "ruler-generate", "--tokenizer", "t", "--out", "o"])
    assert (gen.lengths, gen.samples) == (d["lengths"], d["ruler_samples"])


def test_one_step_loop_runs_pretraining_and_the_finetune():
    """The finetune is a recipe handed to pretraining's step loop (train.steps.run_steps): no
    module but train/steps.py calls `update` or `agree_to_stop`, and both trainers call
    run_steps."""
    import ast
    from pathlib import Path

    import shapelm

    def called(node) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        f = node.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute) and (f.attr != "update" or ast.unparse(f.value) == "steps"):
            return f.attr
        return None

    root = Path(shapelm.__file__).parent
    by_name: dict[str, set[str]] = {"update": set(), "agree_to_stop": set(), "run_steps": set()}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = called(node)
            if name in by_name:
                by_name[name].add(path.relative_to(root).as_posix())
    assert by_name["update"] == by_name["agree_to_stop"] == {"train/steps.py"}
    assert by_name["run_steps"] == {"train/loop.py", "longctx/finetune.py"}
