"""Preemption in a real process: SIGKILL then resume is bitwise; SIGTERM checkpoints and exits 143."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
import torch

from shapelm.train import checkpoint as ckpt
from shapelm.train import train
from train_helpers import (
    child_env,
    driver_cmd,
    load_final,
    make_tokens,
    run_config,
    wait_for_step,
    write_config,
)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    tokens = make_tokens(root / "tok")
    cfg = run_config(steps=20, checkpoint_every=4)
    config = write_config(root / "run.json", cfg)
    reference = root / "reference"
    assert train(cfg, reference, data_dir=tokens, progress=False).status == "completed"
    return cfg, config, tokens, load_final(reference)


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_sigkill_then_resume_is_bitwise(setup, tmp_path):
    cfg, config, tokens, reference = setup
    out = tmp_path / "run"
    proc = subprocess.Popen(driver_cmd(config, out, tokens, delay=0.3), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = wait_for_step(out / "metrics.jsonl", 10, proc)  # checkpoint at 8, then more steps
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    steps = [s for s, _ in ckpt.list_checkpoints(out)]
    assert steps and max(steps) >= 8 and seen > max(steps)
    assert not (out / "final").exists()
    result = train(cfg, out, data_dir=tokens, progress=False)
    assert result.status == "completed" and result.step == 20
    assert_same(reference, load_final(out))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))


def test_sigterm_checkpoints_and_exits_143(setup, tmp_path):
    cfg, config, tokens, reference = setup
    out = tmp_path / "run"
    proc = subprocess.Popen(driver_cmd(config, out, tokens, delay=0.3, cli=True), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_step(out / "metrics.jsonl", 5, proc)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    stopped = max(s for s, _ in ckpt.list_checkpoints(out))
    assert 5 <= stopped < 20  # saved at the step boundary where it stopped
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == stopped  # no update after the signal was seen
    trainer = torch.load(ckpt.latest_valid(out)[1] / "trainer.pt", weights_only=True)
    assert trainer["step"] == stopped
    assert "SIGTERM" in stderr
    result = train(cfg, out, data_dir=tokens, progress=False)
    assert result.status == "completed"
    assert_same(reference, load_final(out))
