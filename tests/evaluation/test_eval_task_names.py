"""Stock lm-eval task names are checked from lm-eval's task configs as text, never by building
its task index: a typo in a config fails at once, naming the task."""
import pytest

from shapelm.errors import EvalError
from shapelm.evaluation.tasks import expand_task_names, stock_task_names


@pytest.fixture
def no_index(monkeypatch):
    import lm_eval.tasks

    def refuse(*args, **kwargs):
        raise AssertionError("lm-eval's task index was built")

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", refuse)


def test_a_typo_fails_naming_the_task_without_the_index(no_index):
    with pytest.raises(EvalError, match="unknown task 'lambada_opneai'"):
        expand_task_names(["lambada_opneai"])


def test_stock_tasks_groups_and_tags_are_known(no_index):
    # a plain task, a quoted `"task":` key, a group and a tag
    assert expand_task_names(["lambada_standard", "AraDiCE_ArabicMMLU_high_stem_biology_egy", "mmlu", "ai2_arc"]) \
        == ["lambada_standard", "AraDiCE_ArabicMMLU_high_stem_biology_egy", "mmlu", "ai2_arc"]


@pytest.mark.slow
def test_every_name_of_lm_evals_index_is_known():
    from lm_eval.tasks import TaskManager

    assert set(TaskManager().all_tasks) <= stock_task_names()
