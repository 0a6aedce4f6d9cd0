"""Each evaluation metric on hand-computed cases, and task-definition errors."""

import importlib.util
import math

import pytest
import yaml

from shapelm.evaluation import metrics as M
from shapelm.evaluation.loading import EvalError
from shapelm.evaluation.tasks import (
    FNS_FILE,
    HERE,
    SPECS,
    dataset_block,
    expand_task_names,
    parse_task_data,
    write_tasks,
)


def fns():
    spec = importlib.util.spec_from_file_location("fns", HERE / FNS_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_token_weighted_ce():
    # batch 1: 3 tokens summing to 6.0; batch 2: 1 token of 2.0 -> 8/4, not mean(2, 2)=2 by luck
    assert M.token_weighted_ce([6.0, 2.0], [3, 1]) == pytest.approx(2.0)
    assert M.token_weighted_ce([3.0, 1.0], [1, 3]) == pytest.approx(1.0)  # not (3 + 1/3) / 2
    with pytest.raises(ValueError):
        M.token_weighted_ce([], [])


def test_aggregate_is_the_papers_mean_of_ppls():
    # Table 6/7, 906M: set PPLs 34.95, 7.25, 35.93, 25.86 -> Val PPL 26.00 (arithmetic mean)
    ppls = {"cc": 34.95, "stack": 7.25, "s2orc": 35.93, "wikitext": 25.86}
    agg = M.aggregate_sets({k: math.log(v) for k, v in ppls.items()})
    assert agg["val_ppl"] == pytest.approx(26.00, abs=0.005)
    mean_loss = sum(math.log(v) for v in ppls.values()) / 4
    assert agg["val_loss"] == pytest.approx(mean_loss)
    assert agg["exp_mean_loss"] == pytest.approx(math.exp(mean_loss))
    assert agg["exp_mean_loss"] < agg["val_ppl"]  # Jensen: the two are different numbers


def test_ce_per_char():
    assert M.ce_per_char(-6.0, " Paris") == pytest.approx(6.0 / 5)
    assert M.ce_per_char(-3.0, "abc") == pytest.approx(1.0)
    # the paper's Avg PPL is a plain mean of the two ce values, no exp
    assert M.mean([1.645, 1.404]) == pytest.approx(1.5245)


def test_task_functions_compute_olmo_prompts_and_ce():
    f = fns()
    arc = {"question": "Q?", "choices": {"text": ["aa", "bbbb"], "label": ["A", "B"]}, "answerKey": "B"}
    assert f.arc_text(arc) == "Question: Q?\nAnswer:"
    assert f.arc_gold(arc) == 1 and f.arc_gold({**arc, "answerKey": "2"}) == 1
    assert f.arc_choices(arc) == ["aa", "bbbb"]
    tqa = {"question": "Capital of France?", "answer": {"value": "Paris", "aliases": []}}
    assert f.qa_text(tqa) == "\nQuestion: Capital of France?\nAnswer:"
    assert f.triviaqa_target(tqa) == " Paris"
    assert f.process_triviaqa(tqa, [(-6.0, False)]) == {"ce_loss": pytest.approx(1.2)}
    assert f.process_nq({"question": "q", "answer": ["ab", "x"]}, [(-1.0, True)]) == {"ce_loss": 0.5}
    assert f.boolq_gold({"answer": True}) == 0 and f.boolq_gold({"answer": False}) == 1
    assert f.sciq_text({"support": " s ", "question": "q"}) == "s\nQuestion: q\nAnswer:"
    assert f.siqa_gold({"label": "3"}) == 2
    # multiple choice is scored by lm-eval itself: no metric of shapelm's own is left
    assert not any(n.startswith("process_") and "ce" not in n and n not in ("process_triviaqa", "process_nq")
                   for n in dir(f))


def test_lm_eval_acc_norm_is_olmos_len_norm(tmp_path):
    """lm-eval's acc_norm on a shapelm task: log-likelihood / characters of the choice (OLMo's
    len_norm: leading space excluded, characters not bytes), decided on a hand-made case."""
    from lm_eval.tasks import TaskManager

    data = tmp_path / "arc.jsonl"
    # raw: -3 > -5 -> choice 0 (wrong); per character: -3/2 = -1.5 < -5/4 = -1.25 -> choice 1
    # (right); per UTF-8 byte with the space it would be choice 0 again: -3/5 > -5/5
    doc = {"question": "Q?", "choices": {"text": ["éé", "bbbb"], "label": ["A", "B"]}, "answerKey": "B"}
    data.write_text(__import__("json").dumps(doc) + "\n")
    write_tasks(tmp_path / "t", ["arc_easy"], {"arc_easy": str(data)})
    task = TaskManager(include_path=str(tmp_path / "t"), include_defaults=False).load(
        ["shapelm_arc_easy"])["tasks"]["shapelm_arc_easy"]
    assert task.process_results(doc, [(-3.0, False), (-5.0, False)]) == {"acc": 0.0, "acc_norm": 1.0}
    assert task.process_results(doc, [(-3.0, False), (-6.5, False)]) == {"acc": 0.0, "acc_norm": 0.0}


def test_task_names_and_sets():
    assert expand_task_names(["olmo"]) == ["arc_easy", "hellaswag", "piqa", "sciq",
                                           "commonsense_qa", "trivia_qa", "natural_qs"]
    assert "winogrande" in expand_task_names(["tapered"])
    assert expand_task_names(["shapelm_piqa,sciq", "piqa"]) == ["piqa", "sciq"]
    # lm-eval's names: its alias of ours, and a stock task shapelm has no spec for
    assert expand_task_names(["lambada_openai", "openbookqa"]) == ["lambada", "openbookqa"]
    assert SPECS["lambada"].lm_eval_name == "lambada_openai" and SPECS["sciq"].lm_eval_name == "shapelm_sciq"
    with pytest.raises(EvalError, match="unknown task 'nope'"):
        expand_task_names(["nope"])
    assert {SPECS[n].kind for n in ("trivia_qa", "natural_qs")} == {"ce"}


def test_dataset_block_local_and_hub(tmp_path):
    f = tmp_path / "arc.jsonl"
    f.write_text('{"question": "q"}\n')
    block = dataset_block(SPECS["arc_easy"], str(f))
    assert "dataset_path: json" in block and str(f) in block
    hub = yaml.safe_load(dataset_block(SPECS["arc_easy"], None))
    assert hub["dataset_path"] == "allenai/ai2_arc" and hub["dataset_name"] == "ARC-Easy"
    assert hub["validation_split"] == "validation"
    assert yaml.safe_load(dataset_block(SPECS["arc_easy"], "allenai/ai2_arc@test"))["test_split"] == "test"
    assert parse_task_data(["piqa=/x/p.jsonl"]) == {"piqa": "/x/p.jsonl"}


def test_standin_tasks_run_under_their_own_names_from_a_folder_that_can_move(tmp_path):
    """Stand-in data runs as `piqa_standin` (lm-eval never warns that a stock task is overridden,
    and no reader takes it for PIQA); the YAMLs name their data relative to their own folder,
    so the folder (work/) moves and lm-eval still finds the data."""
    import shutil

    import yaml
    from lm_eval.tasks import TaskManager

    from shapelm.evaluation.standins import standin_path

    work = tmp_path / "work"
    data = standin_path(work / "data", "piqa")
    data.parent.mkdir(parents=True)
    data.write_text('{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}\n')
    real = work / "data" / "arc.jsonl"
    real.write_text('{"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"}\n')
    names = write_tasks(work / "tasks", ["piqa", "arc_easy", "lambada"],
                        {"piqa": str(data), "arc_easy": str(real), "lambada": str(standin_path(work / "data", "piqa"))})
    assert names == ["piqa_standin", "shapelm_arc_easy", "lambada_openai_standin"]
    assert sorted(p.name for p in (work / "tasks").glob("*.yaml")) == [
        "lambada_openai_standin.yaml", "piqa_standin.yaml", "shapelm_arc_easy.yaml"]
    text = (work / "tasks" / "piqa_standin.yaml").read_text()
    keys = _task_yaml(work / "tasks" / "piqa_standin.yaml")
    assert keys["task"] == "piqa_standin" and str(tmp_path) not in text
    assert keys["dataset_kwargs"] == {"data_files": {"validation": "../data/piqa.standin.jsonl"}}

    shutil.move(work, tmp_path / "moved")
    tm = TaskManager(include_path=str(tmp_path / "moved" / "tasks"), include_defaults=False)
    tasks = tm.load(["piqa_standin", "shapelm_arc_easy"])["tasks"]
    assert set(tasks) == {"piqa_standin", "shapelm_arc_easy"}
    for name, task in tasks.items():
        docs = list(task.validation_docs())
        assert len(docs) == 1, name
    assert yaml.safe_load((tmp_path / "moved" / "tasks" / "shapelm_arc_easy.yaml").read_text().replace(
        "!function", ""))["task"] == "shapelm_arc_easy"


def test_missing_and_empty_task_files_are_named(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(EvalError, match=r"task arc_easy: task data file .*nope\.jsonl does not exist"):
        write_tasks(tmp_path / "t", ["arc_easy"], {"arc_easy": str(missing)})
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(EvalError, match=r"empty\.jsonl is an empty dataset"):
        write_tasks(tmp_path / "t", ["piqa"], {"piqa": str(empty)})
    with pytest.raises(EvalError, match="heldout_mc: no data given"):
        write_tasks(tmp_path / "t", ["heldout_mc"])
    with pytest.raises(EvalError, match="--task-data"):
        parse_task_data(["piqa"])


def _task_yaml(path):
    """A generated task YAML as lm-eval reads it (its `!function` tags kept as plain strings)."""
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node))
    return yaml.load(path.read_text(), Loader=Loader)


# A value that, formatted into the YAML as text, would add a Jinja template lm-eval renders.
INJECTION = 'allenai/ai2_arc:ARC-Easy\ndoc_to_text: "{{ self.__init__.__globals__.__builtins__ }}"'


@pytest.mark.parametrize("task", ["arc_easy", "hellaswag", "heldout_mc", "trivia_qa"])
def test_task_data_cannot_add_keys_to_a_task_yaml(tmp_path, task):
    with pytest.raises(EvalError, match=f"task {task}: task data .*control character"):
        write_tasks(tmp_path / "t", [task], {task: INJECTION})
    assert not list((tmp_path / "t").glob("*.yaml"))


@pytest.mark.parametrize("name", ['q"uote.jsonl', "{{ 7 * 7 }}.jsonl", "{% if 1 %}x{% endif %}.jsonl",
                                  "a: b # c.jsonl", "'single.jsonl"])
@pytest.mark.parametrize("task", ["arc_easy", "heldout_mc"])
def test_task_data_path_is_written_verbatim_by_the_dumper(tmp_path, task, name):
    data = tmp_path / name
    data.write_text('{"question": "q"}\n')
    (written,) = write_tasks(tmp_path / "t", [task], {task: str(data)})
    keys = _task_yaml(tmp_path / "t" / f"{written}.yaml")
    # named relative to the YAML's folder (work/ can move), verbatim whatever it holds
    assert keys["dataset_kwargs"] == {"data_files": {"validation": f"../{name}"}}
    template = SPECS[task].stock == ""
    assert str(keys.get("doc_to_text", "")).startswith("shapelm_task_fns.") or not template


@pytest.mark.parametrize("source", ['org/x"y', "org/{{ 7 }}", "org/{% x %}", "org/x y", "a/b/c", "org/x;touch X"])
def test_task_data_is_a_file_or_a_hub_id(tmp_path, source):
    with pytest.raises(EvalError, match="neither an existing local"):
        write_tasks(tmp_path / "t", ["arc_easy"], {"arc_easy": source})
