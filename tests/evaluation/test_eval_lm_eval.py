"""lm-eval integration: ShapelmLM, the generated tasks, downstream runs, the command line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shapelm.cli import main
from shapelm.model.cache import StaticKVCache
from shapelm.evaluation.loading import EvalError
from synthetic_lm import synthetic_documents, train_tiny
from shapelm.model import ModelConfig, build_model, save_pretrained

V = 300
REPO = Path(__file__).resolve().parents[2]


def tiny_cfg(**kw):
    base = dict(vocab_size=V, d_model=64, max_seq_len=256, layers=[
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 16}, "ffn_widths": [128]}] * 2)
    base.update(kw)
    return ModelConfig(**base)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Synthetic text, its BPE, an untrained and a briefly trained tiny model, make-tasks."""
    from shapelm.data.tokenizer import train_bpe
    from shapelm.data.tokens import write_token_dir
    from shapelm.evaluation.make_tasks import make_tasks

    root = tmp_path_factory.mktemp("lmeval")
    docs = synthetic_documents(40)
    tok = train_bpe(docs, 280, root / "tokenizer.json")
    ids = []
    for d in docs:
        ids += tok.encode(d).ids + [0]
    write_token_dir(root / "val", np.array(ids), vocab_size=V, eos_id=0)
    torch.manual_seed(0)
    untrained = build_model(tiny_cfg()).eval()
    save_pretrained(untrained, root / "untrained" / "final")
    trained = build_model(tiny_cfg())
    trained.load_state_dict(untrained.state_dict())
    train_tiny(trained, torch.tensor(ids), steps=120)
    save_pretrained(trained, root / "trained" / "final")
    info = make_tasks([str(root / "val")], root / "tasks", tokenizer=str(root / "tokenizer.json"),
                      n_mc=40, n_ce=40)
    return {"root": root, "trained": trained, "untrained": untrained, "tok": root / "tokenizer.json",
            "tasks": root / "tasks", "info": info, "docs": docs}


def lm_for(world, which="trained", **kw):
    from shapelm.evaluation.lm_eval_model import ShapelmLM

    return ShapelmLM(pretrained=str(world["root"] / which), tokenizer=str(world["tok"]),
                     batch_size=kw.pop("batch_size", 16), **kw)


def test_make_tasks_writes_jsonl_and_yamls(world):
    tasks = world["tasks"]
    mc = [json.loads(x) for x in (tasks / "heldout_mc.jsonl").read_text().splitlines()]
    ce = [json.loads(x) for x in (tasks / "heldout_ce.jsonl").read_text().splitlines()]
    assert len(mc) == 40 and len(ce) == 40
    assert all(len(r["choices"]) == 4 and 0 <= r["gold"] < 4 for r in mc)
    assert len({r["gold"] for r in mc}) > 1  # the answer position varies
    text = " ".join(world["docs"])
    assert all(r["context"] in text and r["choices"][r["gold"]] in text for r in mc)
    assert all((r["context"] + " " + r["answer"]) in text for r in ce)
    assert (tasks / "shapelm_heldout_mc.yaml").is_file() and (tasks / "shapelm_task_fns.py").is_file()
    # deterministic
    from shapelm.evaluation.examples import make_examples

    assert make_examples(world["docs"], 5, 5) == make_examples(world["docs"], 5, 5)


def test_make_tasks_rejects_empty_text(tmp_path):
    from shapelm.evaluation.make_tasks import make_tasks

    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(EvalError, match="empty dataset"):
        make_tasks([str(tmp_path / "empty.txt")], tmp_path / "out")
    with pytest.raises(EvalError, match="no such text file"):
        make_tasks([str(tmp_path / "missing.txt")], tmp_path / "out")


def test_loglikelihood_matches_direct_computation(world):
    from lm_eval.api.instance import Instance

    lm = lm_for(world, batch_size=2)
    model = world["trained"]
    reqs = [("Alice sells 2 apples", " at the market"), ("", "Bruno paints"), ("x y", " z w v")]
    out = lm.loglikelihood([Instance("loglikelihood", {}, r, i) for i, r in enumerate(reqs)])
    for (ctx, cont), (ll, greedy) in zip(reqs, out):
        c = lm.tok_encode(ctx) if ctx else [lm.eot_token_id]
        whole = lm.tok_encode(ctx + cont) if ctx else [lm.eot_token_id] + lm.tok_encode(cont)
        t = whole[len(c):]
        x = torch.tensor(whole)[None]
        with torch.no_grad():
            lp = F.log_softmax(model(x[:, :-1]).logits[0], -1)[len(c) - 1:]
        assert ll == pytest.approx(lp.gather(-1, torch.tensor(t)[:, None]).sum().item(), abs=1e-4)
        assert greedy == bool((lp.argmax(-1) == torch.tensor(t)).all())


def test_a_continuation_longer_than_the_window_is_scored_where_the_window_predicts(world):
    lm = lm_for(world, batch_size=2)
    model = world["trained"]
    window = lm.max_length
    cont = [(7 * i) % 50 + 5 for i in range(window + 9)]
    ((ll, _),) = lm._loglikelihood_tokens([(("c", "x"), [3, 4], cont)])
    whole = torch.tensor([3, 4] + cont)[-(window + 1):]
    with torch.no_grad():
        lp = F.log_softmax(model(whole[None, :-1]).logits[0], -1)
    assert ll == pytest.approx(lp.gather(-1, whole[1:, None]).sum().item(), abs=1e-3)


def test_loglikelihood_rolling_covers_every_token_once(world):
    from lm_eval.api.instance import Instance

    lm = lm_for(world, max_length=16)  # forces several windows
    text = world["docs"][0]
    (total,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    toks = [lm.eot_token_id] + lm.tok_encode(text)
    assert len(toks) > 40
    # reference: same windows computed by hand (each token predicted once, <=16 tokens of context)
    ref = 0.0
    model = world["trained"]
    with torch.no_grad():
        pos = 1
        while pos < len(toks):
            end = min(pos + 16, len(toks))
            start = max(end - 16 - 1, 0)
            x = torch.tensor(toks[start:end])[None]
            lp = F.log_softmax(model(x[:, :-1]).logits[0], -1)
            for j in range(pos, end):
                ref += lp[j - start - 1, toks[j]].item()
            pos = end
    assert total == pytest.approx(ref, abs=1e-3)


def test_static_kv_cache_equals_full_forward():
    model = build_model(tiny_cfg(layers=[
        {"attention": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 16}, "ffn_widths": [64]},
        {"attention": None, "ffn_widths": [32]},
        {"attention": {"n_heads": 2, "n_kv_heads": 1, "head_dim": 8}, "ffn_widths": [32, 32]}])).eval()
    x = torch.randint(0, V, (3, 20))
    cache = StaticKVCache(model.config, 3, 32)
    with torch.no_grad():
        full = model(x).logits
        a = model(x[:, :12], kv_cache=cache, start_pos=0).logits
        b = model(x[:, 12:17], kv_cache=cache, start_pos=12).logits
        c = [model(x[:, i:i + 1], kv_cache=cache, start_pos=i).logits for i in range(17, 20)]
    torch.testing.assert_close(torch.cat([a, b, *c], 1), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="would hold 40 tokens, max_len is 32"):
        model(torch.randint(0, V, (3, 20)), kv_cache=cache, start_pos=20)


def test_generate_until_greedy_with_cache(world):
    from lm_eval.api.instance import Instance

    lm = lm_for(world, batch_size=4)
    model = world["trained"]
    prompts = ["Alice sells 1", "Chen repairs 2", "Dara counts 3", world["docs"][1][:30]]
    reqs = [Instance("generate_until", {}, (p, {"until": ["day 3"], "max_gen_toks": 6}), i)
            for i, p in enumerate(prompts)]
    outs = lm.generate_until(reqs)
    for p, out in zip(prompts, outs):
        x = torch.tensor(lm.tok_encode(p))[None]
        with torch.no_grad():
            for _ in range(6):
                nxt = model(x).logits[:, -1].argmax(-1)
                if nxt.item() == lm.eot_token_id:
                    break
                x = torch.cat([x, nxt[:, None]], 1)
        ref = lm.tok_decode(x[0, len(lm.tok_encode(p)):].tolist()).split("day 3")[0]
        assert out == ref


def test_downstream_python_api_trained_above_chance(world):
    from shapelm.evaluation.downstream import run_downstream
    from shapelm.evaluation.tasks import parse_task_data

    data = parse_task_data([str(world["tasks"] / "task_data.json")])
    trained, raw = run_downstream(lm_for(world), ["heldout"], data, log_samples=True)
    untrained, _ = run_downstream(lm_for(world, "untrained"), ["heldout"], data)
    assert trained["metrics"]["heldout_mc"] > 0.5  # chance: 0.25
    assert trained["metrics"]["heldout_ce"] < untrained["metrics"]["heldout_ce"]
    assert trained["Avg Acc"] == trained["metrics"]["heldout_mc"]
    assert trained["Avg PPL"] == trained["metrics"]["heldout_ce"]
    # lm-eval sent OLMo-style requests: continuation = " " + choice / " " + answer
    mc = raw["samples"]["shapelm_heldout_mc"][0]
    doc = mc["doc"]
    assert [a[1] for a in mc["arguments"]] == [" " + c for c in doc["choices"]]
    assert mc["arguments"][0][0] == doc["context"]
    ce = raw["samples"]["shapelm_heldout_ce"][0]
    assert ce["arguments"][0] == (ce["doc"]["context"], " " + ce["doc"]["answer"])


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_every_paper_task_runs_from_local_files(world, tmp_path):
    """Each OLMo / Tapered task template loads local data in the hub schema and yields its metric."""
    from shapelm.evaluation.downstream import run_downstream

    arc = {"question": "Who sells apples?", "choices": {"text": ["Alice", "boats"], "label": ["A", "B"]},
           "answerKey": "A"}
    rows = {
        "arc_easy": [arc, {**arc, "answerKey": "2"}],
        "arc_challenge": [arc],
        "commonsense_qa": [{**arc, "choices": {"text": ["a", "b", "c", "d", "e"],
                                               "label": list("ABCDE")}, "answerKey": "C"}],
        "hellaswag": [{"activity_label": "Market", "ctx_a": "Alice sells apples.", "ctx_b": "she",
                       "endings": ["sells more.", "paints a boat.", "x", "y"], "label": "0"}],
        "piqa": [{"goal": "sell apples", "sol1": "at the market", "sol2": "at sea", "label": 0}],
        "sciq": [{"support": "", "question": "q?", "distractor1": "a", "distractor2": "b",
                  "distractor3": "c", "correct_answer": "d"}],
        "social_iqa": [{"context": "Alice sold apples.", "question": "Why?", "answerA": "money",
                        "answerB": "fun", "answerC": "no", "label": "1"}],
        "boolq": [{"passage": "Alice sells apples.", "question": "does alice sell apples", "answer": True}],
        "winogrande": [{"sentence": "Alice gave _ apples.", "option1": "Bruno", "option2": "Chen",
                        "answer": "1"}],
        "trivia_qa": [{"question": "Who sells apples?", "answer": {"value": "Alice", "aliases": ["Alice"]}}],
        "natural_qs": [{"question": "who sells apples", "answer": ["Alice", "A."]}],
        "lambada": [{"text": "Alice sells 2 apples at the market"}],
        "wikitext": [{"page": " = Alice = \n Alice sells 2 apples at the market on day 1 . \n"}],
    }
    data = {name: _write_jsonl(tmp_path / f"{name}.jsonl", r) for name, r in rows.items()}
    flat, raw = run_downstream(lm_for(world), ["olmo", "tapered"], data, tasks_dir=tmp_path / "tasks",
                               log_samples=True)
    assert set(flat["metrics"]) >= set(rows) | {"lambada_ppl"}
    for name, value in flat["metrics"].items():
        assert np.isfinite(value), name
    assert flat["details"]["arc_easy"]["n"] == 2
    assert flat["acc_tasks"] == ["arc_easy", "hellaswag", "piqa", "sciq", "commonsense_qa",
                                 "lambada", "winogrande", "arc_challenge", "social_iqa", "boolq"]
    assert flat["ce_tasks"] == ["trivia_qa", "natural_qs"]
    assert flat["Avg PPL"] == pytest.approx((flat["metrics"]["trivia_qa"] + flat["metrics"]["natural_qs"]) / 2)
    s = raw["samples"]
    assert s["shapelm_arc_easy"][0]["arguments"][0] == ("Question: Who sells apples?\nAnswer:", " Alice")
    assert s["shapelm_trivia_qa"][0]["arguments"][0] == ("\nQuestion: Who sells apples?\nAnswer:", " Alice")
    # lm-eval's stock tasks, run under their own names on the local data
    assert s["winogrande"][0]["arguments"] == [("Alice gave Bruno", " apples."),
                                               ("Alice gave Chen", " apples.")]
    assert s["hellaswag"][0]["arguments"][0] == ("Market: Alice sells apples. She", " sells more.")
    assert s["lambada_openai"][0]["arguments"][0] == ("Alice sells 2 apples at the", " market")
    assert flat["details"]["wikitext"]["lm_eval_task"] == "wikitext"
    piqa = s["piqa"][0]
    lls = [r[0][0] for r in piqa["resps"]]
    want = 1.0 if (lls[0] / len("at the market")) > (lls[1] / len("at sea")) else 0.0
    assert piqa["acc_norm"] == want
    assert raw["configs"]["piqa"]["dataset_path"] == "json"  # the stock YAML, our data
    # standard errors: analytic for the accuracies (sqrt(p(1-p)/(n-1)), here n = 2)
    arc = flat["details"]["arc_easy"]
    assert arc["acc_stderr"] == pytest.approx((arc["acc"] * (1 - arc["acc"]) / 1) ** 0.5)


def test_downstream_cli_writes_flat_json(world, tmp_path):
    out = tmp_path / "ds.json"
    rc = main(["eval", "downstream", "--model", str(world["root"] / "trained"), "--tokenizer",
               str(world["tok"]), "--tasks", "heldout", "--task-data",
               str(world["tasks"] / "task_data.json"), "--limit", "10", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["metrics"]) == {"heldout_mc", "heldout_ce"}
    assert res["Avg Acc"] == res["metrics"]["heldout_mc"] and res["details"]["heldout_mc"]["n"] == 10
    assert res["details"]["heldout_mc"]["acc_stderr"] > 0 and res["details"]["heldout_ce"]["ce_loss_stderr"] > 0
    # lm-eval's own results and samples beside the summary
    lm_dir = tmp_path / "ds_lm_eval"
    assert res["lm_eval_output"] == str(lm_dir)
    own = json.loads((lm_dir / "results.json").read_text())
    assert own["n-samples"]["shapelm_heldout_mc"]["effective"] == 10
    assert own["versions"]["shapelm_heldout_mc"] == 2.0 and "shapelm_heldout_ce" in own["configs"]
    assert own["results"]["shapelm_heldout_mc"]["acc,none"] == res["metrics"]["heldout_mc"]
    samples = (lm_dir / "samples_shapelm_heldout_mc.jsonl").read_text().splitlines()
    assert len(samples) == 10 and "acc_norm" in json.loads(samples[0])


def test_downstream_cli_names_a_missing_task_file(world, tmp_path, capsys):
    rc = main(["eval", "downstream", "--model", str(world["root"] / "trained"), "--tokenizer",
               str(world["tok"]), "--tasks", "piqa", "--task-data", f"piqa={tmp_path}/piqa.jsonl",
               "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "piqa.jsonl does not exist" in capsys.readouterr().err


def test_lm_eval_registration_keeps_stock_models():
    from lm_eval.api.registry import get_model

    import shapelm.evaluation.lm_eval_model  # noqa: F401

    assert get_model("shapelm").__name__ == "ShapelmLM"
    assert "hf" in __import__("lm_eval.api.registry", fromlist=["x"]).model_registry


def test_lm_eval_command_line(world, tmp_path):
    """`shapelm-lm-eval` is lm-eval's command line with `--model shapelm` known."""
    exe = Path(sys.executable).with_name("shapelm-lm-eval")
    assert exe.is_file(), "console script missing: reinstall the package (uv pip install -e .)"
    cmd = [str(exe), "--model", "shapelm",
           "--model_args", f"pretrained={world['root'] / 'trained'},tokenizer={world['tok']}",
           "--include_path", str(world["tasks"]), "--tasks", "shapelm_heldout_mc,shapelm_heldout_ce",
           "--limit", "8", "--batch_size", "8", "--device", "cpu", "--output_path", str(tmp_path / "out")]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((tmp_path / "out").rglob("results_*.json"))
    assert files, proc.stdout[-2000:]
    res = json.loads(files[0].read_text())["results"]
    assert "acc_norm,none" in res["shapelm_heldout_mc"] and "ce_loss,none" in res["shapelm_heldout_ce"]
    assert res["shapelm_heldout_mc"]["acc_stderr,none"] > 0



def test_standin_data_runs_every_paper_task_through_lm_eval(world, tmp_path):
    """make-tasks' stand-ins: each task's hub schema, cut from the held-out text, so lm-eval's own
    task runs on it; a trained model beats an untrained one on them, and downstream.json says which
    tasks stood in."""
    from shapelm.evaluation.downstream import run_downstream
    from shapelm.evaluation.make_tasks import make_tasks
    from shapelm.evaluation.standins import BUILDERS, is_standin
    from shapelm.evaluation.tasks import SPECS

    info = make_tasks([str(world["root"] / "val")], tmp_path / "tasks", tokenizer=str(world["tok"]),
                      n_mc=24, n_ce=24, standins=["olmo", "tapered"])
    data = info["standin_data"]
    assert set(data) == set(BUILDERS) and all(is_standin(p) for p in data.values())
    assert json.loads((tmp_path / "tasks" / "task_data.json").read_text()) == info["task_data"]
    assert not any(is_standin(p) for p in info["task_data"].values())  # a run names the stand-ins it uses
    text = " ".join(world["docs"])
    lambada = [json.loads(x) for x in Path(data["lambada"]).read_text().splitlines()]
    assert len(lambada) == 24 and all(r["text"] in text for r in lambada)
    wino = [json.loads(x) for x in Path(data["winogrande"]).read_text().splitlines()]
    for r in wino:  # the blank filled with the right option is the real text
        right = r["option1"] if r["answer"] == "1" else r["option2"]
        assert r["sentence"].replace("_", right) in text and r["sentence"].count("_") == 1

    scores = {}
    for which in ("trained", "untrained"):
        flat, raw = run_downstream(lm_for(world, which), ["olmo", "tapered"], data,
                                   tasks_dir=tmp_path / which, log_samples=True, bootstrap_iters=0)
        assert all(np.isfinite(v) for v in flat["metrics"].values())
        assert all(flat["details"][t]["n"] == 24 for t in BUILDERS)
        scores[which] = flat
    assert raw["configs"]["winogrande_standin"]["dataset_path"] == "json"  # lm-eval's task, our data
    assert set(raw["results"]) == {n + "_standin" for n in (SPECS[t].lm_eval_name for t in BUILDERS)}
    assert all(d["lm_eval_task"].endswith("_standin") for d in flat["details"].values())
    trained, untrained = scores["trained"], scores["untrained"]
    assert trained["Avg Acc"] > untrained["Avg Acc"] + 0.1
    assert trained["metrics"]["wikitext"] < untrained["metrics"]["wikitext"] / 2
    assert trained["metrics"]["lambada_ppl"] < untrained["metrics"]["lambada_ppl"]


def test_standin_tasks_name_a_task_without_one():
    from shapelm.evaluation.standins import standin_tasks

    assert standin_tasks(["tapered", "piqa"])[:2] == ["wikitext", "lambada"]
    with pytest.raises(EvalError, match="no stand-in data for task 'heldout_mc'"):
        standin_tasks(["heldout"])
    with pytest.raises(EvalError, match="'openbookqa'"):
        standin_tasks(["openbookqa"])


def _readme_lm_eval_line(row_title: str = "lm-eval on a shapelm checkpoint") -> str:
    row = next(line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith(f"| {row_title} |"))
    return row.split("`")[1]


# Two lm-eval command lines as the README types them (~25 s, each a fresh lm-eval with transformers):
# end to end, with the other README commands in .ci/run.
@pytest.mark.slow
def test_the_readme_lm_eval_line_runs_as_typed_on_a_workflow_run(world, tmp_path, monkeypatch, capsys):
    """The README's command on a run directory laid out as the workflow leaves it (training
    manifest naming its token directory, the corpus' tokenizer beside that, the downstream job's
    task files): no tokenizer= needed; a missing checkpoint is one line."""
    import shlex
    import shutil

    from shapelm.data.tokens import write_token_dir
    from shapelm.evaluation.make_tasks import make_tasks
    from shapelm.evaluation.standins import standin_path
    from shapelm.evaluation.tasks import write_tasks

    corpus = tmp_path / "work" / "default" / "data" / "corpus"
    corpus.mkdir(parents=True)
    shutil.copy(world["tok"], corpus / "tokenizer.json")
    write_token_dir(corpus / "train", [np.arange(10, 50)], V, 0, {"kind": "default-corpus", "tokenizer": "tokenizer.json"})
    run = tmp_path / "work" / "default" / "runs" / "tiny"
    shutil.copytree(world["root"] / "trained" / "final", run / "final")
    (run / "manifest.json").write_text(json.dumps({"data": {"dir": str(corpus / "train")}}))
    make_tasks([str(world["root"] / "val")], tmp_path / "tasks", tokenizer=str(world["tok"]), n_mc=8, n_ce=8,
               standins=["piqa"])
    write_tasks(run / "lm_eval_tasks", ["piqa"], {"piqa": str(standin_path(tmp_path / "tasks", "piqa"))})

    line = _readme_lm_eval_line().replace("<exp>", "default").replace("<run>", "tiny")
    argv = shlex.split(line)
    assert argv[0] == "shapelm-lm-eval" and "tokenizer=" not in line
    exe = str(Path(sys.executable).with_name(argv[0]))
    extra = ["--limit", "4", "--batch_size", "4", "--device", "cpu", "--output_path", str(tmp_path / "out")]
    proc = subprocess.run([exe, *argv[1:], *extra], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]
    assert "acc,none" in res["piqa_standin"]

    # lm-eval's own `hf` model on the run's export (remote code, as every shipped shape exports),
    # the README's line as typed: trust_remote_code=True in it, no prompt, the same scores
    from shapelm.evaluation.export_hf import export_hf

    export_hf(run, tmp_path / "work" / "default" / "hf" / "tiny", tokenizer=str(world["tok"]), force_remote=True)
    hf_line = _readme_lm_eval_line("lm-eval's stock hf model on a run's Hugging Face export")
    hf_argv = shlex.split(hf_line.replace("<exp>", "default").replace("<run>", "tiny"))
    assert hf_argv[:3] == ["lm_eval", "--model", "hf"] and "trust_remote_code=True" in hf_line
    hf_proc = subprocess.run([str(Path(sys.executable).with_name("lm_eval")), *hf_argv[1:], *extra[:-1],
                              str(tmp_path / "out_hf")], cwd=tmp_path, capture_output=True, text=True,
                             timeout=900, stdin=subprocess.DEVNULL)
    assert hf_proc.returncode == 0, hf_proc.stderr[-3000:]
    hf_res = json.loads(next((tmp_path / "out_hf").rglob("results_*.json")).read_text())["results"]
    assert hf_res["piqa_standin"]["acc,none"] == pytest.approx(res["piqa_standin"]["acc,none"])
    assert hf_res["piqa_standin"]["acc_norm,none"] == pytest.approx(res["piqa_standin"]["acc_norm,none"])

    # the same line with the checkpoint gone: one line (in-process: lm-eval is imported already)
    from shapelm.evaluation import lm_eval_cli

    shutil.rmtree(run / "final")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [exe, *argv[1:], *extra])
    assert lm_eval_cli.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("shapelm-lm-eval: error: work/default/runs/tiny: not a shapelm checkpoint "
                       "(no model_config.json in it or in work/default/runs/tiny/final)")
    assert "Traceback" not in "\n".join(err)
