"""The training loop on CPU, in process: learning, outputs, resume, NaN, checkpoints."""

from __future__ import annotations

import json

import pytest
import torch

from shapelm.model import load_pretrained
from shapelm.model.transformer import Transformer
from shapelm.train import NonFiniteLossError, train
from shapelm.train import checkpoint as ckpt
from train_helpers import load_final, make_tokens, metrics, run_config


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return make_tokens(tmp_path_factory.mktemp("tokens") / "tok")


@pytest.fixture(scope="module")
def full_run(tokens, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    result = train(run_config(), out, data_dir=tokens, progress=False)
    return out, result


def test_loss_falls_and_outputs(full_run):
    out, result = full_run
    assert result.status == "completed" and result.exit_code == 0 and result.step == 20
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 21))
    first, last = rows[0], rows[-1]
    assert last["loss"] < first["loss"] - 0.8, (first["loss"], last["loss"])
    for key in ("step", "tokens", "loss", "ce_loss", "z_loss", "lr", "grad_norm", "tokens_per_s",
                "mfu", "max_mem_gb", "max_rss_gb"):
        assert key in last
    assert last["tokens"] == 20 * 128
    assert last["mfu"] is None  # CPU, no --peak-flops
    assert last["loss"] == pytest.approx(last["ce_loss"] + last["z_loss"])
    assert 0 < last["z_loss"] < 1e-2
    assert last["lr"] == pytest.approx(3e-4)  # final = 0.1 x peak
    # final model loads through the public API
    model = load_pretrained(out / "final")
    assert model.config.d_model == 32
    state = json.loads((out / "final" / "train_state.json").read_text())
    assert state["step"] == 20
    manifest = json.loads((out / "manifest.json").read_text())
    for key in ("run_config", "config_hash", "recipe_hash", "git", "versions", "hardware"):
        assert key in manifest
    assert manifest["hardware"]["world_size"] == 1
    assert manifest["recipe"]["grad_accumulation"] == 2
    assert manifest["versions"]["torch"] == torch.__version__
    # keep_last=2: steps 10 and 15 kept (no periodic save at the last step, final/ instead)
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [10, 15]
    files = sorted(p.name for p in (out / "checkpoints" / "step-00000015").iterdir())
    assert files == ["meta.json", "model.pt", "optimizer.pt", "rng-rank00000.pt", "trainer.pt"]
    for name in ("model.pt", "optimizer.pt", "trainer.pt", "rng-rank00000.pt"):
        torch.load(out / "checkpoints" / "step-00000015" / name, weights_only=True)
    trainer = torch.load(out / "checkpoints" / "step-00000015" / "trainer.pt", weights_only=True)
    assert trainer["step"] == 15 and trainer["next_instance"] == 15 * 8


def test_rerun_after_completion_is_a_no_op(full_run, tokens):
    out, _ = full_run
    before = (out / "final" / "model.safetensors").stat().st_mtime_ns
    again = train(run_config(), out, data_dir=tokens, progress=False)
    assert again.status == "already_complete"
    assert (out / "final" / "model.safetensors").stat().st_mtime_ns == before


def test_changed_recipe_refuses_to_resume(full_run, tokens, tmp_path):
    out, _ = full_run
    with pytest.raises(Exception, match="different recipe"):
        train(run_config(lr=1e-3), out, data_dir=tokens, progress=False)


def test_stop_and_resume_is_bitwise(full_run, tokens, tmp_path):
    out_full, _ = full_run
    out = tmp_path / "run"
    first = train(run_config(), out, data_dir=tokens, progress=False, max_steps=7)
    assert first.status == "stopped" and first.step == 7 and first.exit_code == 0
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [5, 7]
    again = train(run_config(), out, data_dir=tokens, progress=False, max_steps=6)
    assert again.status == "stopped" and again.step == 7  # nothing to do, nothing rolled back
    # a half-written checkpoint from a killed writer is ignored and cleaned
    junk = out / "checkpoints" / ".tmp-step-00000009"
    junk.mkdir()
    (junk / "model.pt").write_bytes(b"garbage")
    # metrics logged after the checkpoint the run resumes from are dropped
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 8, "loss": 123.0}) + "\n")
    second = train(run_config(), out, data_dir=tokens, progress=False)
    assert second.status == "completed"
    assert not junk.exists()
    a, b = load_final(out_full), load_final(out)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert [r["loss"] for r in rows] == [r["loss"] for r in metrics(out_full)]


def test_corrupt_latest_checkpoint_falls_back(full_run, tokens, tmp_path):
    out = tmp_path / "run"
    train(run_config(), out, data_dir=tokens, progress=False, max_steps=10)
    (out / "checkpoints" / "step-00000010" / "optimizer.pt").write_bytes(b"truncated")
    result = train(run_config(), out, data_dir=tokens, progress=False, max_steps=12)
    assert result.step == 12
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 13))
    ref = metrics(full_run[0])
    assert [r["loss"] for r in rows] == [r["loss"] for r in ref[:12]]


def test_nonfinite_loss_stops_and_keeps_last_checkpoint(tokens, tmp_path, monkeypatch):
    out = tmp_path / "run"
    poison = {"on": False}
    original = Transformer.forward

    def forward(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if poison["on"]:
            result = result._replace(loss=result.loss * float("nan"))
        return result

    monkeypatch.setattr(Transformer, "forward", forward)

    def on_step(record):
        if record["step"] == 6:
            poison["on"] = True

    with pytest.raises(NonFiniteLossError, match="step 7") as err:
        train(run_config(), out, data_dir=tokens, progress=False, on_step=on_step)
    assert "step-00000005" in str(err.value)
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [5]
    assert metrics(out)[-1]["nonfinite"] is True
    # the NaN error goes through the CLI as a clean error (exit 2)
    assert issubclass(NonFiniteLossError, __import__("shapelm.errors").errors.ShapelmError)
    monkeypatch.setattr(Transformer, "forward", original)
    result = train(run_config(), out, data_dir=tokens, progress=False, max_steps=8)
    assert result.step == 8


def test_frozen_lm_head(tokens, tmp_path):
    from shapelm.config import TrainRecipe
    from shapelm.model.config import ModelConfig
    from shapelm.train.parallel import initial_state

    cfg = run_config(steps=4, frozen_lm_head=True)
    out = tmp_path / "run"
    train(cfg, out, data_dir=tokens, progress=False)
    init = initial_state(ModelConfig.from_dict(cfg["model"]), TrainRecipe.from_dict(cfg["train"]))
    final = load_final(out)
    assert torch.equal(final["lm_head.weight"], init["lm_head.weight"])
    assert not torch.equal(final["embed_tokens.weight"], init["embed_tokens.weight"])


def test_sigusr1_in_process_checkpoints_and_reports_138(full_run, tokens, tmp_path):
    import os
    import signal

    out = tmp_path / "run"

    def on_step(record):
        if record["step"] == 3:
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.getsignal(signal.SIGUSR1)
    result = train(run_config(), out, data_dir=tokens, progress=False, on_step=on_step)
    assert result.status == "preempted" and result.step == 3 and result.exit_code == 138
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [3]
    assert signal.getsignal(signal.SIGUSR1) == previous  # handlers restored
    assert train(run_config(), out, data_dir=tokens, progress=False).status == "completed"
    a, b = load_final(full_run[0]), load_final(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_time_limit_stops_with_a_checkpoint_and_resumes_bitwise(full_run, tokens, tmp_path, monkeypatch):
    out = tmp_path / "run"
    # A limit already inside the margin: the run stops before its first update.
    result = train(run_config(), out, data_dir=tokens, progress=False, time_limit_min=0.01,
                   stop_margin_s=60.0)
    assert result.status == "preempted" and result.exit_code == 138 and result.step == 0
    # A limit that allows a few updates: stops mid-run with a checkpoint at the step reached.
    from shapelm.train import preempt as preempt_mod

    clock = iter(range(0, 10_000, 20))  # each reading of the clock advances 20 s
    with monkeypatch.context() as m:
        m.setattr(preempt_mod.time, "monotonic", lambda: float(next(clock)))
        result = train(run_config(), out, data_dir=tokens, progress=False, time_limit_min=2.0,
                       stop_margin_s=30.0)
    assert result.status == "preempted" and 0 < result.step < result.total_steps
    assert [s for s, _ in ckpt.list_checkpoints(out)][-1] == result.step
    assert train(run_config(), out, data_dir=tokens, progress=False).status == "completed"
    a, b = load_final(full_run[0]), load_final(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
