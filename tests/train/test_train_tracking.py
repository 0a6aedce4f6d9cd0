"""Optional experiment tracking: the records of metrics.jsonl reach TensorBoard unchanged."""

import json

import pytest

from shapelm.errors import ConfigError
from shapelm.train.tracking import (
    ENV,
    main,
    open_tracker,
    replay,
    scalars,
    tracking_kind,
)

RECORDS = [
    {"step": 1, "tokens": 512, "loss": 9.5, "lr": 1e-4, "grad_norm": 3.0, "mfu": None,
     "memory": {"max_allocated_gb": 1.5}, "nonfinite": False},
    {"step": 10, "tokens": 5120, "loss": 7.25, "lr": 1e-3, "grad_norm": float("nan")},
]


def test_tracking_is_off_by_default_and_a_bad_kind_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    assert tracking_kind() == "none" and open_tracker(tmp_path) is None
    monkeypatch.setenv(ENV, "tensorbord")
    with pytest.raises(ConfigError, match="SHAPELM_TRACKING='tensorbord': expected one of none, tensorboard, wandb"):
        open_tracker(tmp_path)


def test_scalars_are_the_finite_numbers_of_a_record():
    assert dict(scalars(RECORDS[0])) == {"tokens": 512.0, "loss": 9.5, "lr": 1e-4, "grad_norm": 3.0,
                                         "memory/max_allocated_gb": 1.5}
    assert "grad_norm" not in dict(scalars(RECORDS[1]))


def test_a_metrics_file_replays_into_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the `tracking` extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + '{"step": 11, "lo')
    assert main([str(run)]) == 0 and "2 records" in capsys.readouterr().out
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    loss = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert loss == [(1, 9.5), (10, 7.25)]
    assert [(e.step, e.value) for e in acc.Scalars("memory/max_allocated_gb")] == [(1, 1.5)]
    assert [e.step for e in acc.Scalars("grad_norm")] == [1]  # the NaN was not logged


def test_replay_counts_records_and_skips_a_torn_line(tmp_path):
    seen = []

    class Collect:
        def log(self, record):
            seen.append(record["step"])

        def close(self):
            pass

    f = tmp_path / "metrics.jsonl"
    f.write_text(json.dumps(RECORDS[0]) + "\n" + '{"step": 2, "lo')
    assert replay(f, Collect()) == 1 and seen == [1]
