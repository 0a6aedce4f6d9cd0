"""shapelm.records: each result file's record round-trips, names the file and key it lacks, and
reads every committed result file unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shapelm import records as R

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = {
    R.PplRecord: sorted(ROOT.glob("results/*/runs/*/ppl.json")),
    R.DownstreamRecord: sorted(ROOT.glob("results/*/runs/*/downstream.json")),
    R.ProofpileRecord: sorted(ROOT.glob("results/*/runs/*/proofpile.json")),
    R.RulerRecord: sorted(ROOT.glob("results/*/runs/*/ruler.json")),
    R.DecodeRecord: sorted(ROOT.glob("results/*/decode/*.json")),
    R.DepthRecord: sorted(ROOT.glob("results/*/runs/*/depth.json")),
}

SAMPLES = [
    R.PplRecord(sets={"web": {"path": "/d/web", "n_instances": 2, "n_tokens": 8, "loss": 2.0, "ppl": math.exp(2.0)}},
                aggregate={"val_loss": 2.0, "val_ppl": math.exp(2.0), "exp_mean_loss": math.exp(2.0), "n_sets": 1},
                extra={"model": "m", "dtype": "float32", "seq_len": 5, "max_instances": None, "seconds": 1.5}),
    R.DownstreamRecord(metrics={"arc_easy": 0.5, "trivia_qa": 2.0}, avg_acc=0.5, avg_ppl=2.0,
                       extra={"model": "m", "acc_tasks": ["arc_easy"], "ce_tasks": ["trivia_qa"], "details": {}}),
    R.ProofpileRecord(lengths=[256, 512], ppl={"256": 9.0, "512": 8.5},
                      extra={"nll": {"256": math.log(9.0), "512": math.log(8.5)}, "kind": "proofpile", "run": "r"}),
    R.RulerRecord(lengths=[256], scores={"256": {"niah_single_1": 50.0, "mean": 50.0}},
                  extra={"tasks": ["niah_single_1"], "kind": "ruler", "run": "r"}),
    R.DecodeRecord(rows=[{"run": "a", "mixer": "mha", "length": 64, "latency_ms_median": 1.0}],
                   comparisons=[{"run_a": "a", "run_b": "b", "length": 64, "speedup": 1.1}],
                   extra={"meta": {"device": "cpu"}}),
    R.DepthRecord(loss=3.0, applied=[{"depth": 0, "layer": 0, "residual_norm": 1.5, "write_ratio": 0.4}],
                  layers=[{"layer": 0, "skip_loss": 3.5, "skip_delta": 0.5}],
                  extra={"model": "m", "text": "t", "device": "cpu", "embedding_norm": 1.0, "tokens": 258}),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_a_record_written_reads_back_equal(record, tmp_path):
    path = tmp_path / "out.json"
    record.write(path)
    assert type(record).read(path) == record
    assert type(record).from_dict(json.loads(path.read_text())).to_dict() == record.to_dict()


def test_missing_file_is_pending(tmp_path):
    for cls in COMMITTED:
        assert cls.read(tmp_path / "nope.json") is None


@pytest.mark.parametrize("cls, body, key", [
    (R.PplRecord, {"sets": {}}, "'aggregate'"),
    (R.PplRecord, {"sets": {"web": {"loss": 2.0}}, "aggregate": {}}, "'sets.web.ppl'"),
    (R.PplRecord, {"sets": {}, "aggregate": {"val_loss": 1.0, "val_ppl": 2.0}}, "'aggregate.exp_mean_loss'"),
    (R.DownstreamRecord, {"metrics": {"arc_easy": 0.5}, "avg_acc": 0.5}, "'Avg Acc'"),
    (R.DownstreamRecord, {"metrics": {"arc_easy": "high"}, "Avg Acc": None, "Avg PPL": None}, "'metrics.arc_easy'"),
    (R.ProofpileRecord, {"lengths": [1], "nll": {"1": 2.0}}, "'ppl'"),
    (R.RulerRecord, {"lengths": [1], "scores": {"1": {"vt": 1.0}}}, "'scores.1.mean'"),
    (R.DecodeRecord, {"result": {"rows": []}}, "'rows'"),
    (R.DecodeRecord, {"rows": [{"run": "a", "length": 64}], "comparisons": []}, "'rows[0].mixer'"),
    (R.DepthRecord, {"applied": [], "layers": []}, "'loss'"),
    (R.DepthRecord, {"loss": 1.0, "applied": [{"depth": 0, "layer": 0, "residual_norm": 1.0}], "layers": []},
     "'applied[0].write_ratio'"),
    (R.DepthRecord, {"loss": 1.0, "applied": [], "layers": [{"layer": 0, "skip_loss": "high"}]},
     "'layers[0].skip_loss'"),
])
def test_a_reader_names_the_file_and_the_key(cls, body, key, tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(body))
    with pytest.raises(R.RecordError, match=f"result.json: .*{key}".replace("[", r"\[").replace("]", r"\]")):
        cls.read(path)


def test_not_json_names_the_file(tmp_path):
    path = tmp_path / "ppl.json"
    path.write_text("{torn")
    with pytest.raises(R.RecordError, match="ppl.json: not valid JSON"):
        R.PplRecord.read(path)


@pytest.mark.parametrize("cls", list(COMMITTED), ids=lambda c: c.__name__)
def test_every_committed_result_file_reads_and_writes_back_byte_identical(cls, tmp_path):
    assert COMMITTED[R.PplRecord] and COMMITTED[R.DownstreamRecord] and COMMITTED[R.DecodeRecord]
    for path in COMMITTED[cls]:
        rec = cls.read(path)
        out = rec.write(tmp_path / path.name)
        assert out.read_bytes() == path.read_bytes(), path.relative_to(ROOT)


def test_metrics_lines_read_back_and_a_torn_line_is_skipped(tmp_path):
    recs = [{"step": 1, "loss": 3.0, "tokens": 10, "mfu": None},
            {"kind": "val", "step": 1, "tokens": 10, R.HELDOUT_SPLIT: {"loss": 3.1, "ppl": math.exp(3.1)}},
            {"step": 2, "loss": float("nan"), "nonfinite": True}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(R.metrics_line(r) for r in recs) + '{"step": 3, "lo')
    back = list(R.read_metrics(path))
    assert back[:2] == recs[:2] and math.isnan(back[2]["loss"]) and len(back) == 3
    assert [R.is_val(r) for r in back] == [False, True, False]
    assert "".join(R.metrics_line(r) for r in back) == "".join(R.metrics_line(r) for r in recs)
    assert list(R.read_metrics(tmp_path / "none.jsonl")) == []
    with pytest.raises(R.RecordError, match="step"):
        R.metrics_line({"loss": 1.0})


def test_the_decode_merge_rebuilds_the_committed_decode_json(tmp_path, monkeypatch):
    from shapelm.decode.bench import merge_results

    merged = ROOT / "results" / "default" / "decode" / "decode.json"
    sources = [s["path"] for s in json.loads(merged.read_text())["sources"]]
    monkeypatch.chdir(ROOT)
    out = merge_results(sources).write(tmp_path / "decode.json")
    assert out.read_bytes() == merged.read_bytes()


@pytest.mark.parametrize("body, what", [
    (b'{"ppl": "\xff\xfe"}', "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (None, "cannot read it|not a file"),
])
def test_an_unreadable_record_is_one_line_naming_the_file(body, what, tmp_path):
    path = tmp_path / "ppl.json"
    path.mkdir() if body is None else path.write_bytes(body)
    with pytest.raises(R.RecordError, match=what) as err:
        R.PplRecord.read(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_metrics_with_invalid_utf8_is_one_line_naming_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(R.metrics_line({"step": 1, "loss": 3.0}).encode() + b'{"step": 2, "loss": "\xff"}\n')
    with pytest.raises(R.RecordError, match="metrics.jsonl: line 2 is not UTF-8") as err:
        list(R.read_metrics(path))
    assert "\n" not in str(err.value)

