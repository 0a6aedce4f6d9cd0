"""The rehearsal's long-context inputs: real layouts, read by the real readers, deterministic."""

from pathlib import Path

import pytest

from shapelm.longctx.rehearsal import write_longctx_inputs

EXPECTED = {"longctx": {
    "pg19": "{root}/longctx/pg19",
    "proofpile": "{root}/longctx/proofpile",
    "essays": "{root}/longctx/ruler/PaulGrahamEssays.json",
    "squad": "{root}/longctx/ruler/squad.json",
    "hotpotqa": "{root}/longctx/ruler/hotpotqa.json",
}}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("lcreh")
    overrides = write_longctx_inputs(root)
    paths = {k: Path(v.replace("{root}", str(root))) for k, v in overrides["longctx"].items()}
    return root, overrides, paths


def test_overrides_name_every_input_under_root(written):
    root, overrides, paths = written
    assert overrides == EXPECTED
    assert all(p.exists() for p in paths.values())


def test_files_are_identical_on_every_write(written, tmp_path):
    root, _, _ = written
    write_longctx_inputs(tmp_path)
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for f in files:
        assert (root / f).read_bytes() == (tmp_path / f).read_bytes(), f


def test_real_readers_take_them_at_rehearsal_lengths(written):
    from tiny_longctx import tiny_tokenizer
    from shapelm.longctx.ruler.qa import read_hotpotqa, read_squad
    from shapelm.longctx.ruler.run import load_resources
    from shapelm.longctx.ruler.tasks import generate_task
    from shapelm.longctx.sources import iter_documents, load_documents

    _, _, paths = written
    tok = tiny_tokenizer()
    books = list(iter_documents(paths["pg19"], tok, split="train"))  # deepmind layout: train/ only
    assert len(books) == 6 and sum(b.size for b in books) > 50 * 1024  # > 50 segments of 1,024
    docs = load_documents(paths["proofpile"], tok, min_tokens=2048, num_docs=12)  # test/*.jsonl.gz
    assert min(d.size for d in docs) >= 2048
    squad_q, _ = read_squad(paths["squad"])
    hotpot_q, _ = read_hotpotqa(paths["hotpotqa"])
    assert len(squad_q) >= 50 and len(hotpot_q) >= 50  # unanswerable SQuAD questions dropped
    res = load_resources(essays=paths["essays"], squad=paths["squad"], hotpotqa=paths["hotpotqa"], tokenizer=tok)
    for task in ("niah_single_2", "qa_1", "qa_2"):  # essay haystack, one gold paragraph, all of a question's
        rows = generate_task(task, tok, 512, 2, resources=res)
        assert len(rows) == 2 and all(r["length"] <= 512 for r in rows)


def test_a_config_naming_them_passes_the_plan_check(written, monkeypatch, tmp_path):
    from shapelm.plan.experiment import load_experiment
    from shapelm.longctx.plan import check_longctx

    root, overrides, _ = written
    lc = {k: v.replace("{root}", str(root)) for k, v in overrides["longctx"].items()}
    cfg = {
        "name": "r", "data": {"source": "olmo"}, "model_defaults": {"vocab_size": 128},
        "scales": {"s": {"n_heads": 2, "train": {"lr": 1e-3, "batch_tokens": 512, "seq_len": 64,
                                                  "total_tokens": 5120, "warmup_tokens": 512}}},
        "runs": {"a": {"scale": "s", "longctx": True,
                       "arch": {"kind": "conventional", "d_model": 32, "n_layers": 2, "d_h": 64}}},
        "longctx": {"factor": 16, "lengths": [512, 1024], "proofpile_min_tokens": 1024, **lc},
    }
    assert check_longctx(load_experiment(cfg)) == []
