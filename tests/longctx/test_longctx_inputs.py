"""Long-context inputs in their real layouts: local folders, parquet, the HF hub cache, QA rows."""

import gzip
import json

import pytest

from shapelm.errors import DataError
from shapelm.longctx.inputs import (
    data_files,
    parse_hub,
    resolve_input,
    split_of,
)
from shapelm.longctx.sources import input_problem, iter_records, iter_texts, load_documents


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def fake_hub(cache, repo, files: dict, rev="0123abcd"):
    """The layout huggingface_hub leaves: datasets--O--N/{refs/main, snapshots/<rev>/...}."""
    d = cache / ("datasets--" + repo.replace("/", "--"))
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(rev)
    snap = d / "snapshots" / rev
    for name, write in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        write(snap / name)
    return snap


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    cache = tmp_path / "hfcache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def test_pg19_parquet_from_the_hub_cache_reads_the_train_split(hub):
    # emozilla/pg19: data/{train,validation,test}-*.parquet, one book a row in `text`
    books = [{"short_book_title": f"b{i}", "text": f"book {i} " * 50} for i in range(3)]
    fake_hub(hub, "emozilla/pg19", {
        "README.md": lambda p: p.write_text("card"),
        "data/train-00000-of-00002-aa.parquet": lambda p: write_parquet(p, books[:2]),
        "data/train-00001-of-00002-bb.parquet": lambda p: write_parquet(p, books[2:]),
        "data/test-00000-of-00001-cc.parquet": lambda p: write_parquet(p, [{"text": "held out"}]),
    })
    assert parse_hub("hf:emozilla/pg19/data") == ("emozilla/pg19", "data")
    assert list(iter_texts("hf:emozilla/pg19/data", split="train")) == [b["text"] for b in books]
    assert list(iter_texts("hf:emozilla/pg19/data", split="test")) == ["held out"]
    assert input_problem("hf:emozilla/pg19/data", "train") is None
    assert "no 'validation' files" in input_problem("hf:emozilla/pg19/data", "validation")


def test_a_hub_repo_missing_from_the_cache_names_the_cache_searched(hub):
    problem = input_problem("hf:hoskinson-center/proof-pile", "test")
    assert "not in the local HF cache" in problem and str(hub / "datasets--hoskinson-center--proof-pile") in problem
    with pytest.raises(DataError, match="hf:OWNER/NAME"):
        parse_hub("hf:proof-pile")


def test_proofpile_test_split_folder_of_jsonl_gz(hub, tmp_path):
    # hoskinson-center/proof-pile: train/proofpile_train_N.jsonl.gz, test/proofpile_test.jsonl.gz
    def jsonl_gz(texts):
        def write(p):
            with gzip.open(p, "wt", encoding="utf-8") as f:
                for t in texts:
                    f.write(json.dumps({"text": t, "meta": {"config": "arxiv"}}) + "\n")
        return write

    fake_hub(hub, "hoskinson-center/proof-pile", {
        "proof-pile.py": lambda p: p.write_text("# loading script"),
        "train/proofpile_train_0.jsonl.gz": jsonl_gz(["train doc"]),
        "test/proofpile_test.jsonl.gz": jsonl_gz(["alpha " * 400, "short", "beta " * 400]),
    })
    from tiny_longctx import tiny_tokenizer

    docs = load_documents("hf:hoskinson-center/proof-pile", tiny_tokenizer(), min_tokens=300, num_docs=2)
    assert len(docs) == 2  # the two long test documents, in order; "short" and train skipped
    assert [f.name for f in data_files(resolve_input("hf:hoskinson-center/proof-pile"), "test")] == ["proofpile_test.jsonl.gz"]


def test_deepmind_pg19_layout_and_split_names(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / "pg19" / split).mkdir(parents=True)
        (tmp_path / "pg19" / split / f"{split}1.txt").write_text(f"a {split} book")
    assert list(iter_texts(tmp_path / "pg19", split="train")) == ["a train book"]
    assert split_of("validation-00000-of-00001.parquet") == "validation" and split_of("dev.jsonl") == "validation"
    assert split_of("10001.txt") is None
    (tmp_path / "empty").mkdir()
    assert "no data files" in input_problem(tmp_path / "empty")
    assert "no such file or directory" in input_problem(tmp_path / "absent")


def test_squad_and_hotpotqa_rows_read_as_the_original_json(tmp_path):
    from shapelm.longctx.ruler.qa import read_hotpotqa, read_squad

    squad = {"version": "v2.0", "data": [
        {"title": "T1", "paragraphs": [
            {"context": "Paris is in France.", "qas": [
                {"id": "a", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}],
                 "is_impossible": False},
                {"id": "b", "question": "Where is Rome?", "answers": [], "plausible_answers": [],
                 "is_impossible": True}]},
            {"context": "Lyon is in France too.", "qas": [
                {"id": "c", "question": "Lyon?", "answers": [{"text": "France", "answer_start": 11}],
                 "is_impossible": False}]}]},
        {"title": "T2", "paragraphs": [{"context": "Berlin is in Germany.", "qas": [
            {"id": "d", "question": "Berlin?", "answers": [{"text": "Germany", "answer_start": 13}],
             "is_impossible": False}]}]}]}
    (tmp_path / "dev-v2.0.json").write_text(json.dumps(squad))
    rows = [{"id": q["id"], "title": a["title"], "context": p["context"], "question": q["question"],
             "answers": {"text": [x["text"] for x in q["answers"]],
                         "answer_start": [x["answer_start"] for x in q["answers"]]}}
            for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]
    write_parquet(tmp_path / "squad_v2" / "validation-00000-of-00001.parquet", rows)
    write_parquet(tmp_path / "squad_v2" / "train-00000-of-00001.parquet", rows[:1])
    assert read_squad(tmp_path / "squad_v2") == read_squad(tmp_path / "dev-v2.0.json")

    hotpot = [{"_id": "x", "question": "Q?", "answer": "A", "type": "bridge", "level": "easy",
               "supporting_facts": [["P", 0]],
               "context": [["P", ["First.", " Second."]], ["R", ["Other."]]]}]
    (tmp_path / "hotpot_dev_distractor_v1.json").write_text(json.dumps(hotpot))
    hrows = [{"id": "x", "question": "Q?", "answer": "A", "type": "bridge", "level": "easy",
              "supporting_facts": {"title": ["P"], "sent_id": [0]},
              "context": {"title": ["P", "R"], "sentences": [["First.", " Second."], ["Other."]]}}]
    write_parquet(tmp_path / "distractor" / "validation-00000-of-00001.parquet", hrows)
    assert read_hotpotqa(tmp_path / "distractor") == read_hotpotqa(tmp_path / "hotpot_dev_distractor_v1.json")
    with pytest.raises(DataError, match="not a squad_v2 row"):
        read_squad(tmp_path / "distractor")


def test_records_of_jsonl_and_bad_parquet(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n\n{"a": 2}\n')
    assert [r["a"] for r in iter_records(tmp_path / "rows.jsonl")] == [1, 2]
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot be read as parquet"):
        list(iter_texts(tmp_path / "bad.parquet"))


# ----------------------------------------------------------------------------- through `datasets`


def test_datasets_reads_pg19_and_proofpile_from_the_hub_cache_offline(hub, tmp_path, monkeypatch):
    """`datasets:hf:...`: datasets itself parses the cached snapshot (no network: offline)."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds-cache"))
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    books = [{"text": f"book {i} " * 20} for i in range(3)]
    fake_hub(hub, "emozilla/pg19", {
        "data/train-00000-of-00001-aa.parquet": lambda p: write_parquet(p, books),
        "data/test-00000-of-00001-cc.parquet": lambda p: write_parquet(p, [{"text": "held out"}]),
    })
    fake_hub(hub, "hoskinson-center/proof-pile", {
        "test/proofpile_test.jsonl.gz": lambda p: p.write_bytes(gzip.compress(
            b"".join(json.dumps({"text": f"proof {i}", "meta": {}}).encode() + b"\n" for i in range(2)))),
    })
    assert list(iter_texts("datasets:hf:emozilla/pg19", split="train")) == [b["text"] for b in books]
    assert list(iter_texts("datasets:hf:emozilla/pg19", split="test")) == ["held out"]
    assert list(iter_texts("datasets:hf:hoskinson-center/proof-pile", split="test")) == ["proof 0", "proof 1"]
    assert input_problem("datasets:hf:emozilla/pg19", "train") is None
    assert "not in the local HF cache" in input_problem("datasets:hf:nobody/none", "train")
    # a hub id not in the datasets cache, offline: a clear error before any work
    problem = input_problem("datasets:nobody/none", "train")
    assert problem.startswith("datasets:nobody/none: datasets cannot load it")


def test_a_saved_dataset_directory_is_a_source(tmp_path):
    import datasets

    rows = {"text": ["first essay", "second essay"], "meta": ["a", "b"]}
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "pp")
    datasets.Dataset.from_dict(rows).save_to_disk(tmp_path / "one")
    assert list(iter_texts(tmp_path / "pp", split="test")) == rows["text"]
    assert [r["meta"] for r in iter_records(tmp_path / "one")] == ["a", "b"]
    assert input_problem(tmp_path / "pp", "test") is None
    with pytest.raises(DataError, match="no split 'train'"):
        list(iter_texts(tmp_path / "pp", split="train"))
    with pytest.raises(DataError, match="no 'body' column"):
        list(iter_texts(tmp_path / "one", text_key="body"))
