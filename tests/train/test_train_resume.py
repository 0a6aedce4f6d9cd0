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


def test_provenance_of_a_resumed_run_is_that_of_an_uninterrupted_one(setup, tmp_path):
    """provenance.json: the initial weights' digest is taken when the run starts and kept across
    a resumption (the resumed process never sees them), the first losses are the logged ones;
    a resumed run's record equals the uninterrupted run's but for the commit and host."""
    from shapelm.records import ProvenanceRecord

    cfg, _, tokens, _ = setup
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train(cfg, whole, data_dir=tokens, progress=False).status == "completed"
    assert train(cfg, parts, data_dir=tokens, progress=False, max_steps=8).status == "stopped"
    assert train(cfg, parts, data_dir=tokens, progress=False).status == "completed"
    a, b = (ProvenanceRecord.read(d / "provenance.json") for d in (whole, parts))
    assert a.identity() == b.identity() and a.first_difference(b) is None
    assert a.first_losses == b.first_losses and len(a.first_losses) == 5
    assert a.first_losses[0] == json.loads((whole / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    assert a.init_weights_sha256 and len(a.init_weights_sha256) == 64
    assert a.environment["threads"] == torch.get_num_threads()
    assert a.data["train_sha256"] and a.code["source_sha256"]
    other = ProvenanceRecord.from_dict({**a.to_dict(), "init_weights_sha256": "0" * 64})
    assert a.first_difference(other).startswith("initial weights")


def test_data_identity_of_sha256_token_files_is_unchanged_and_xxh3_ones_differ(tmp_path):
    """Committed provenance names its tokens by the sha256 over the files' sha256s: the slicer's
    xxh3-128 parts must not move that value for a directory whose parts record sha256."""
    import hashlib

    import numpy as np

    from shapelm.data.tokens import write_token_dir
    from shapelm.train import provenance

    m = write_token_dir(tmp_path / "tok", [np.arange(10), np.arange(5)], 1000, 999)
    sha256s = "".join(f["sha256"] for f in m["files"])
    assert provenance.data_identity(m)["train_sha256"] == hashlib.sha256(sha256s.encode()).hexdigest()
    sliced = {**m, "files": [{**{k: v for k, v in f.items() if k != "sha256"}, "xxh3_128": "0" * 32}
                             for f in m["files"]]}
    assert provenance.data_identity(sliced)["train_sha256"] != provenance.data_identity(m)["train_sha256"]
