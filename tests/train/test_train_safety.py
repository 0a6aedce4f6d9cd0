"""Training refuses bad data, bad checkpoints and bad disks with one error line naming the file;
stops cleanly on Ctrl-C and SIGHUP; one trainer per run directory; group-readable outputs;
an explicit thread count."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from train_helpers import (
    free_port,
    VOCAB,
    child_env,
    driver_cmd,
    flip_byte,
    load_final,
    make_tokens,
    run_config,
    wait_for_step,
    write_config,
)

from shapelm.errors import ConfigError, DataError
from shapelm.train import checkpoint as ckpt
from shapelm.train import train
from shapelm.train.lock import RunLock, RunLockedError
from shapelm.train.storage import StorageError
from shapelm.train.threads import resolve_threads


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return make_tokens(tmp_path_factory.mktemp("tokens") / "tok")


@pytest.fixture(scope="module")
def reference(tokens, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert train(run_config(), out, data_dir=tokens, progress=False).status == "completed"
    return out


def copy_tokens(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def losses(out):
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def cli(capsys, *argv) -> tuple[int, str]:
    from shapelm.cli import main

    code = main(["train", *map(str, argv), "--no-progress"])
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("shapelm train: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- data ---------------------------------------------------------------------------------------
def test_altered_token_file_is_refused_before_the_first_step(tokens, tmp_path, capsys):
    data = copy_tokens(tokens, tmp_path / "tok")
    f = data / "part-00000.u32"
    ids = np.fromfile(f, dtype="<u4")
    ids[100] = (ids[100] + 1) % VOCAB  # still a valid id: only the checksum can tell
    ids.tofile(f)
    config = write_config(tmp_path / "run.json", run_config())
    code, err = cli(capsys, config, "--out", tmp_path / "run", "--data", data)
    assert code == 2
    assert "part-00000.u32: sha256 mismatch" in error_line(err)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any update


def test_a_restart_re_verifies_tokens_by_their_fast_hash_only(tokens, tmp_path, monkeypatch):
    from shapelm.data import tokens as token_module

    out = tmp_path / "run"
    train(run_config(), out, data_dir=tokens, progress=False, max_steps=2)
    cache = json.loads((out / "token-checksums.json").read_text())
    assert [entry["sha256"] for entry in cache.values()] == [
        f["sha256"] for f in json.loads((tokens / "manifest.json").read_text())["files"]]
    read = []
    real = token_module.digest_file

    def no_sha256(path, *hashers, **kwargs):
        if path.suffix == ".u32":  # (checkpoints are hashed by sha256 on resume)
            assert [h.name.lower() for h in hashers] == ["xxh3_128"], f"{path}: sha256 again on restart"
            read.append(path)
        return real(path, *hashers, **kwargs)

    monkeypatch.setattr(token_module, "digest_file", no_sha256)
    assert train(run_config(), out, data_dir=tokens, progress=False, max_steps=4).step == 4
    assert [p.name for p in read] == ["part-00000.u32"]  # but every byte is read again


def test_a_byte_flipped_with_its_mtime_kept_is_caught_at_the_next_start(tokens, tmp_path,
                                                                        capsys):
    data = copy_tokens(tokens, tmp_path / "tok")
    out = tmp_path / "run"
    config = write_config(tmp_path / "run.json", run_config())
    assert cli(capsys, config, "--out", out, "--data", data, "--max-steps", 2)[0] == 0
    f = data / "part-00000.u32"
    st = f.stat()
    ids = np.fromfile(f, dtype="<u4")
    ids[5000] = (ids[5000] + 1) % VOCAB  # still a valid id, same size
    ids.tofile(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # bit rot keeps the mtime
    assert f.stat().st_mtime_ns == st.st_mtime_ns
    code, err = cli(capsys, config, "--out", out, "--data", data)
    assert code == 2
    assert "part-00000.u32: contents changed since they matched the manifest's sha256" in (
        error_line(err))
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            ] == [1, 2]  # not one more update on the altered data


def test_id_beyond_vocab_behind_a_stale_manifest_names_file_and_position(tokens, tmp_path):
    from shapelm.data.tokens import sha256_file

    data = copy_tokens(tokens, tmp_path / "tok")
    f = data / "part-00000.u32"
    ids = np.fromfile(f, dtype="<u4")
    bad = 2 * 8 * 16 + 37  # inside update 3's batch
    ids[bad] = VOCAB + 5
    ids.tofile(f)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["files"][0]["sha256"] = sha256_file(f)  # max_id left stale
    (data / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "run"
    with pytest.raises(DataError) as err:
        train(run_config(), out, data_dir=data, progress=False)
    assert f"{f}: token id {VOCAB + 5} at position {bad} >= vocab_size {VOCAB}" in str(err.value)
    assert len(losses(out)) == 2  # caught as update 3 was read, not as an IndexError in the model


def test_manifest_path_outside_the_directory_is_refused(tokens, tmp_path):
    data = copy_tokens(tokens, tmp_path / "tok")
    (tmp_path / "elsewhere.u32").write_bytes((data / "part-00000.u32").read_bytes())
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["files"][0]["path"] = "../elsewhere.u32"
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"'\.\./elsewhere\.u32' points outside"):
        train(run_config(), tmp_path / "run", data_dir=data, progress=False)


def test_all_eos_data_is_a_clear_error(tmp_path, capsys):
    from shapelm.data.tokens import write_token_dir

    data = tmp_path / "eos"
    write_token_dir(data, np.zeros(20_000, dtype=np.uint32), vocab_size=VOCAB, eos_id=0)
    # the repetition filter masks a pattern repeated 32+ times: sequences of 64 tokens
    config = write_config(tmp_path / "run.json", run_config(
        steps=2, seq_len=64, batch_tokens=8 * 64, total_tokens=2 * 8 * 64, warmup_tokens=64))
    code, err = cli(capsys, config, "--out", tmp_path / "run", "--data", data)
    assert code == 2
    line = error_line(err)
    assert "part-00000.u32: every label of update 1" in line and "masked" in line
    assert "ZeroDivisionError" not in err


# -- disks --------------------------------------------------------------------------------------
def test_unwritable_run_directory_is_refused_at_start(tokens, tmp_path, capsys):
    config = write_config(tmp_path / "run.json", run_config())
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = cli(capsys, config, "--out", blocker / "run", "--data", tokens)
    assert code == 2 and f"{blocker / 'run'}: cannot write" in error_line(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_run_directory_is_refused_at_start(tokens, tmp_path, capsys):
    config = write_config(tmp_path / "run.json", run_config())
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        code, err = cli(capsys, config, "--out", tmp_path / "ro" / "run", "--data", tokens)
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert code == 2 and "ro/run: cannot write (Permission denied)" in error_line(err)


def test_permission_denied_on_the_probe_names_the_directory(tokens, tmp_path, monkeypatch):
    from shapelm.train import storage

    real_open = os.open

    def refuse(path, *args, **kwargs):
        if ".write-probe-" in str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(storage.os, "open", refuse)
    with pytest.raises(StorageError, match=r"\.write-probe-\d+: cannot write \(Permission denied\)"):
        train(run_config(), tmp_path / "run", data_dir=tokens, progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_disk_full_during_a_checkpoint_names_the_file(tokens, tmp_path, monkeypatch, capsys):
    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt._HashingWriter, "write", full)
    config = write_config(tmp_path / "run.json", run_config())
    out = tmp_path / "run"
    code, err = cli(capsys, config, "--out", out, "--data", tokens)
    assert code == 2
    line = error_line(err)
    assert "checkpoints/.tmp-step-00000005/model.pt: cannot write (No space left on device)" in line
    monkeypatch.undo()
    assert ckpt.list_checkpoints(out) == []  # nothing half-written looks like a checkpoint
    assert train(run_config(), out, data_dir=tokens, progress=False, max_steps=5).step == 5


# -- checkpoints --------------------------------------------------------------------------------
def zero_zip_directory(path):
    with zipfile.ZipFile(path) as z:
        start = z.start_dir
    data = bytearray(path.read_bytes())
    data[start:] = bytes(len(data) - start)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip_byte", "zero_zip_directory"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous(reference, tokens, tmp_path,
                                                             caplog, damage):
    out = tmp_path / "run"
    train(run_config(), out, data_dir=tokens, progress=False, max_steps=10)
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [5, 10]
    model = out / "checkpoints" / "step-00000010" / "model.pt"
    size = model.stat().st_size
    if damage == "flip_byte":
        flip_byte(model, size // 2)
    else:
        zero_zip_directory(model)
    assert model.stat().st_size == size  # the size check alone passes it
    with caplog.at_level(logging.WARNING, logger="shapelm.train.checkpoint"):
        result = train(run_config(), out, data_dir=tokens, progress=False, max_steps=12)
    assert result.step == 12
    assert any(f"{model}: sha256" in r.getMessage() and "skipped" in r.getMessage()
               for r in caplog.records), caplog.text
    assert losses(out) == losses(reference)[:12]  # resumed from step 5, bitwise


def test_checkpoint_meta_records_every_files_sha256(tokens, tmp_path):
    from shapelm.data.tokens import sha256_file

    out = tmp_path / "run"
    train(run_config(), out, data_dir=tokens, progress=False, max_steps=5)
    path = ckpt.latest_valid(out)[1]
    meta = json.loads((path / "meta.json").read_text())
    assert set(meta["sha256"]) == set(meta["files"]) >= {"model.pt", "optimizer.pt", "trainer.pt",
                                                          "rng-rank00000.pt"}
    assert all(sha256_file(path / name) == want for name, want in meta["sha256"].items())


# -- signals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_checkpoint_and_exit(reference, tokens, tmp_path, sig):
    config = write_config(tmp_path / "run.json", run_config())
    out = tmp_path / "run"

    def default_signals():  # as from a terminal, whatever the test runner ignores
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    proc = subprocess.Popen(driver_cmd(config, out, tokens, delay=0.3, cli=True), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)  # noqa: PLW1509  (no threads started here)
    try:
        wait_for_step(out / "metrics.jsonl", 3, proc)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and signal.Signals(sig).name in stderr
    stopped = max(s for s, _ in ckpt.list_checkpoints(out))
    assert 3 <= stopped < 20 and len(losses(out)) == stopped
    assert train(run_config(), out, data_dir=tokens, progress=False).status == "completed"
    a, b = load_final(reference), load_final(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_second_ctrl_c_interrupts_and_ignored_signals_stay_ignored():
    from shapelm.train.preempt import Preemption

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    # Ctrl-C handled as in an interactive shell, even when the tests run in a background job
    # (whose shell starts them with SIGINT ignored, which Preemption would rightly keep).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = Preemption()
    try:
        stop.install()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == stop._handler
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.should_stop() and stop.exit_code() == 130
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        stop.restore()
        signal.signal(signal.SIGHUP, previous)
    assert signal.getsignal(signal.SIGINT) == signal.default_int_handler
    signal.signal(signal.SIGINT, previous_int)


# -- one trainer per directory ------------------------------------------------------------------
LOCK_HOLDER = """
import sys, time
from shapelm.train.lock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_second_trainer_is_refused_and_a_killed_holder_releases(tokens, tmp_path):
    import socket

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(out)], env=child_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError) as err:
            train(run_config(), out, data_dir=tokens, progress=False)
        assert f"{out}: another trainer (pid {holder.pid} on host {socket.gethostname()})" in str(err.value)
        assert not (out / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL released the flock: the next trainer takes over without anyone deleting the file
    assert train(run_config(), out, data_dir=tokens, progress=False, max_steps=2).step == 2


def test_lock_without_flock_takes_over_dead_pids_only(tmp_path, monkeypatch, caplog):
    import fcntl
    import socket

    import shapelm.train.lock as lock_module

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(lock_module.fcntl, "flock", no_flock)
    assert fcntl.flock is no_flock
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "train.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with caplog.at_level(logging.WARNING, logger="shapelm.train.lock"), RunLock(tmp_path):
        assert json.loads((tmp_path / "train.lock").read_text())["pid"] == os.getpid()
    assert f"pid {dead.pid}, which is no longer running" in caplog.text
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "train.lock").write_text(json.dumps({"pid": alive.pid, "host": socket.gethostname()}))
        with pytest.raises(RunLockedError, match=f"pid {alive.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        alive.kill()
        alive.wait()


# -- modes and threads --------------------------------------------------------------------------
def test_outputs_are_group_readable(tokens, tmp_path):
    previous = os.umask(0o022)
    try:
        out = tmp_path / "run"
        train(run_config(steps=6), out, data_dir=tokens, progress=False)
    finally:
        os.umask(previous)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert out / "final" / "model.safetensors" in written
    assert {p: oct(p.stat().st_mode & 0o777) for p in written} == {p: "0o644" for p in written}


def test_thread_count_resolution():
    assert resolve_threads(3, {"SHAPELM_THREADS": "2"}) == (3, "--threads")
    assert resolve_threads(None, {"SHAPELM_THREADS": "2", "OMP_NUM_THREADS": "4"}) == (2, "SHAPELM_THREADS")
    assert resolve_threads(None, {"OMP_NUM_THREADS": "4"}) == (None, "OMP_NUM_THREADS")
    assert resolve_threads(None, {}) == (None, "torch default")
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match=f"SHAPELM_THREADS={bad!r}"):
            resolve_threads(None, {"SHAPELM_THREADS": bad})


def test_thread_count_is_set_and_recorded_and_a_change_warned(tokens, tmp_path, caplog):
    out = tmp_path / "run"
    torch.set_num_threads(2)
    train(run_config(), out, data_dir=tokens, progress=False, max_steps=5, threads=1)
    assert torch.get_num_threads() == 1
    hardware = json.loads((out / "manifest.json").read_text())["hardware"]
    assert hardware["torch_threads"] == 1 and hardware["torch_threads_from"] == "--threads"
    assert json.loads((ckpt.latest_valid(out)[1] / "meta.json").read_text())["torch_threads"] == 1
    with caplog.at_level(logging.WARNING, logger="shapelm.train.loop"):
        train(run_config(), out, data_dir=tokens, progress=False, max_steps=6, threads=2)
    assert "written with 1 CPU threads, this process uses 2" in caplog.text


# -- several ranks ------------------------------------------------------------------------------
def srun_pair(config, out, data, **extra_env):
    """Two ranks started as `srun --ntasks 2` would (no agent that kills the survivor)."""
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = child_env(SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2", SLURM_PROCID=str(rank),
                        SLURM_LOCALID=str(rank), SLURM_JOB_NODELIST="localhost",
                        SLURM_JOB_ID="4343", MASTER_PORT=port, **extra_env)
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
            env.pop(key, None)
        procs.append(subprocess.Popen(driver_cmd(config, out, data, cli=True), env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def test_one_ranks_failure_stops_every_rank_with_the_same_error(tokens, tmp_path):
    """Rank 0's start-up check (a corrupt token file) and rank 0's full disk during a checkpoint:
    rank 1 raises the same one-line error instead of waiting in a collective or crashing."""
    corrupt = copy_tokens(tokens, tmp_path / "tok")
    ids = np.fromfile(corrupt / "part-00000.u32", dtype="<u4")
    ids[7] = (ids[7] + 1) % VOCAB
    ids.tofile(corrupt / "part-00000.u32")
    config = write_config(tmp_path / "run.json", run_config(micro_batch_size=2))
    cases = {
        "corrupt": (srun_pair(config, tmp_path / "a", corrupt), "part-00000.u32: sha256 mismatch"),
        "disk_full": (srun_pair(config, tmp_path / "b", tokens, SHAPELM_TEST_DISK_FULL_ON_RANK="0"),
                      ".tmp-step-00000005/model.pt: cannot write (No space left on device)"),
    }
    for name, (procs, message) in cases.items():
        for rank, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=300)
            finally:
                proc.kill()
            assert proc.returncode == 2, f"{name} rank {rank}:\n{out[-3000:]}"
            assert message in error_line(out), f"{name} rank {rank}"
