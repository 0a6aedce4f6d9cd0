"""The two recipes (paper text, released code): resolution, refusals, the diff table and the
printed numbers the choice changes (shapelm.reference.recipes, reference/recipes.yaml)."""

import copy
import csv
import io
from pathlib import Path

import pytest

from shapelm import cli
from shapelm.commands import recipe_diff as RD
from shapelm.reference import recipes as RC
from shapelm import reference as R
from shapelm.config import load_yaml, run_recipe
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError
from shapelm.train.schedule import lr_at

CONFIGS = Path(__file__).parents[2] / "configs"
PAIRS = ["hg906m_conv", "hg906m_hg", "hg3b_conv", "hg3b_hg", "hg8b_conv", "hg8b_hg"]


@pytest.fixture(scope="module")
def paper_data():
    return load_yaml(CONFIGS / "paper.yaml")


@pytest.fixture(scope="module")
def paper(paper_data):
    return load_experiment(copy.deepcopy(paper_data))


@pytest.fixture(scope="module")
def official():
    return RD.load_configs([str(CONFIGS / "paper.yaml"), str(CONFIGS / "overlays" / "paper-official.yaml")])


def _only(data, runs, **top):
    """A copy of the paper config with only `runs` (without their decode pairings, which a subset
    leaves unpaired), and top-level keys set."""
    out = copy.deepcopy(data)
    out["runs"] = {r: {k: v for k, v in out["runs"][r].items() if k != "decode"} for r in runs}
    out.update(top)
    return out


# ---------------------------------------------------------------- resolution


def test_paper_yaml_says_which_recipe_it_follows(paper_data):
    assert paper_data["recipe"] == "paper"
    assert load_yaml(CONFIGS / "overlays" / "paper-official.yaml")["recipe_waive"]


def test_paper_recipe_leaves_run_configs_as_written(paper):
    assert all("recipe" not in run for run in paper.runs.values())


@pytest.mark.parametrize("group", ["hourglass_906M", "hourglass_3B", "hourglass_8B", "lws_190M"])
def test_paper_side_is_what_configs_paper_yaml_resolves_to(paper, group):
    """The reference data's paper values are the values the paper config actually trains with."""
    runs = [r for r in paper.runs if paper.run(r)["scale"] in RC.groups()[group]["scales"]]
    assert runs
    for field in RC.fields(group).values():
        if field.config is None:
            continue
        section, key = field.config.split(".", 1)
        for run in runs:
            if field.config == "train.seed" and not paper.is_primary(run):
                continue  # a run's later seeds (`seeds:`) train with those seeds by design
            resolved = paper.run(run)["train" if section == "train" else "model"][key]
            assert resolved == pytest.approx(field.paper.value) if isinstance(resolved, float) else \
                resolved == field.paper.value, (group, field.name, run)


@pytest.mark.parametrize("run,tokens,steps,min_lr,warmup", [
    ("hg906m_hg", 18_022_924_288, 4297, 6e-5, 25),
    ("hg3b_conv", 60_000_518_720, 14305, 6e-5, 100),
    ("hg8b_hg", 100_000_595_968, 23842, 6e-5, 100),
])
def test_official_recipe_resolves(official, run, tokens, steps, min_lr, warmup):
    resolved = official.run(run)
    recipe = run_recipe(resolved)
    assert recipe.total_tokens == tokens and recipe.total_steps == steps
    assert recipe.lr * recipe.final_lr_ratio == pytest.approx(min_lr)
    assert recipe.warmup_steps == warmup
    assert recipe.z_loss == 0.0
    assert resolved["model"]["norm_eps"] == 1e-5
    record = resolved["recipe"]
    assert recipe.fp8 is True and record["applied"]["train.fp8"] is True
    assert record["name"] == "official"
    # what the pipeline cannot run is carried as a waiver, with the official value and why
    assert record["waived"]["tie_embeddings"] == {
        "value": True, "reason": "not yet supported: tied input/output embeddings (shapelm.model.config refuses tie_embeddings)"}
    assert resolved["model"]["tie_embeddings"] is False


def test_official_8b_trains_100b_tokens_not_table4s_160b(official, paper):
    official_tokens = run_recipe(official.run("hg8b_conv")).total_tokens
    assert R.PrintedNumber.parse("100B").matches(official_tokens)
    assert R.printed("hourglass_table4", "recipe_8b", "trained_tokens").matches(
        run_recipe(paper.run("hg8b_conv")).total_tokens, scale=1e9)
    assert not R.printed("hourglass_table4", "recipe_8b", "trained_tokens").matches(official_tokens, scale=1e9)


def test_official_overlay_changes_only_the_table2_pairs(official, paper):
    assert official.name == "paper-official"
    assert sorted(r for r in official.runs if "recipe" in official.run(r)) == sorted(PAIRS)
    assert official.run("hg906m_sweep_r0p6_l12")["train"] == paper.run("hg906m_sweep_r0p6_l12")["train"]


def test_what_the_pipeline_cannot_run_is_refused_without_a_waiver(paper_data):
    data = _only(paper_data, ["hg8b_hg"], recipe="official")
    with pytest.raises(ConfigError) as err:
        load_experiment(data)
    msg = str(err.value)
    assert "runs.hg8b_hg" in msg and "tie_embeddings = true" in msg
    assert "not yet supported: tied input/output embeddings" in msg
    # the hourglass run cites the hourglass file's line
    assert "llama32_hourglass_K4L22_ratio0.9.yaml:25" in msg and "qk_norm_weight_decay" in msg
    assert "recipe_waive: [tie_embeddings, rope_scaling, qk_norm_weight_decay]" in msg
    assert "fp8" not in msg  # supported: applied, not refused


def test_fp8_is_in_the_configs_where_the_text_is_silent(paper):
    fp8 = RC.fields("hourglass_8B")["fp8"]
    assert fp8.status == "not in the text"
    assert run_recipe(paper.run("hg8b_hg")).fp8 is fp8.paper.value is True
    assert fp8.official.as_written == "bf16_with_fp8_current_scaling_mixed"


def test_a_run_may_choose_its_own_recipe(paper_data):
    data = _only(paper_data, ["hg8b_conv", "hg8b_hg"], recipe="official",
                 recipe_waive=["tie_embeddings", "rope_scaling", "qk_norm_weight_decay"])
    data["runs"]["hg8b_conv"]["recipe"] = "paper"
    exp = load_experiment(data)
    assert run_recipe(exp.run("hg8b_conv")).total_tokens == 160_000_000_000
    assert run_recipe(exp.run("hg8b_hg")).total_tokens == 100_000_595_968


def test_the_runs_own_train_keys_still_win_over_the_recipe(paper_data):
    data = _only(paper_data, ["hg906m_hg"], recipe="official",
                 recipe_waive=["tie_embeddings", "rope_scaling", "qk_norm_weight_decay"])
    data["runs"]["hg906m_hg"]["train"] = {"z_loss": 2e-5}
    assert run_recipe(load_experiment(data).run("hg906m_hg")).z_loss == 2e-5


def test_official_for_a_scale_without_released_config_is_an_error(paper_data):
    data = _only(paper_data, ["hg113m_conv"])
    data["runs"]["hg113m_conv"]["recipe"] = "official"
    with pytest.raises(ConfigError, match=r"runs\.hg113m_conv.*scale '113M'"):
        load_experiment(data)


def test_unknown_recipe_and_waiver_are_errors(paper_data):
    with pytest.raises(ConfigError, match="recipe"):
        load_experiment(_only(paper_data, ["hg8b_hg"], recipe="released"))
    with pytest.raises(ConfigError, match=r"recipe_waive: unknown field\(s\) \['bf16'\]"):
        load_experiment(_only(paper_data, ["hg8b_hg"], recipe="official", recipe_waive=["bf16"]))


def test_lws_official_learning_rate_is_constant(paper_data):
    waive = [f.name for f in RC.fields("lws_190M").values() if not f.official.supported]
    assert sorted(waive) == ["token_file_dtype", "training_data"]  # what the pipeline will not copy
    data = _only(paper_data, ["lws_vanilla_18l"], recipe="official", recipe_waive=waive)
    recipe = run_recipe(load_experiment(data).run("lws_vanilla_18l"))
    assert (recipe.total_steps, recipe.batch_tokens, recipe.seed, recipe.weight_decay) == (13000, 393216, 42, 0.01)
    assert {lr_at(s, recipe) for s in (1, 2, 6500, 13000)} == {6e-4}


# ---------------------------------------------------------------- reference data


def test_every_field_has_sources_and_every_repository_source_names_a_snapshot():
    repos = R.load_recipes()["repositories"]
    assert all(len(r["commit"]) == 40 for r in repos.values())
    for group in RC.groups():
        for f in RC.fields(group).values():
            for side in (f.paper, f.official):
                assert side.sources, (group, f.name)
            if not f.official.supported:
                assert f.official.refusal, (group, f.name)
            for src in f.official.sources:
                key = src.split(":", 1)[0]
                assert key in repos, (group, f.name, src)
                assert RC.expand_source(src).startswith(f"{repos[key]['repo']}@{repos[key]['commit'][:7]} ")


def test_status_compares_at_the_printed_precision():
    f = RC.fields("hourglass_906M")
    assert f["total_tokens"].status == "agrees at printed precision"  # 18.02B prints as 18B
    assert f["warmup_tokens"].status == "differs"  # 104.9M is not 100M
    assert f["lr"].status == "same"
    assert RC.fields("hourglass_8B")["total_tokens"].status == "differs"


# ---------------------------------------------------------------- derived numbers


def test_figure4_r2_reproduces_only_with_160b():
    r2_conv = R.printed("hourglass_fig4_compute_fit", "fit_acc_vs_log_compute", "r2_first")
    r2_hg = R.printed("hourglass_fig4_compute_fit", "fit_acc_vs_log_compute", "r2_second")
    pc, ph, ps = RD.fig4_under("paper")
    oc, oh, os_ = RD.fig4_under("official")
    assert r2_conv.matches(pc.r2) and r2_hg.matches(ph.r2)
    assert not r2_conv.matches(oc.r2) and not r2_hg.matches(oh.r2)
    assert round(oc.r2, 4) == 0.9996 and round(oh.r2, 4) == 0.9993
    # the 8.7% saving: 8.6% from the printed points with 160 B, 8.0% with 100 B
    assert round(ps, 3) == 0.086 and round(os_, 3) == 0.080


def test_8b_gpu_hours_and_implied_mfu_under_each_recipe():
    rows = {(r["group"], r["field"]): r for r in RD.derived_rows()}
    hours = rows[("hourglass_8B", "hg8b_conv: GPU-hours (B200, MFU 0.4)")]
    assert float(hours["paper"]) / float(hours["official"]) == pytest.approx(160 / 100.0006, rel=2e-3)
    mfu = rows[("hourglass_8B", "hg8b_hg: MFU implied by 8 days on 8 B200 (BF16 peak)")]
    # "8 days on 8 B200" is an ordinary MFU at 100 B tokens and an implausible one at 160 B
    assert 0.3 < float(mfu["official"]) < 0.5
    assert float(mfu["paper"]) > 0.6
    same = rows[("hourglass_3B", "hg3b_conv: MFU implied by 3 days on 8 B200 (BF16 peak)")]
    assert same["status"] == "same" and 0.25 < float(same["paper"]) < 0.4


@pytest.mark.parametrize("run", PAIRS)
def test_tied_embeddings_save_one_vocabulary_matrix(run):
    from shapelm.shapes.accounting import param_counts

    cfg = RD.table2_model(run)
    untied, tied = param_counts(cfg), param_counts(cfg, tie_embeddings=True)
    assert untied.total - tied.total == cfg.vocab_size * cfg.d_model
    assert untied.non_embedding == tied.non_embedding
    assert R.printed("hourglass_table2", run, "ffn_params").matches(tied.ffn, scale=1e6)


# ---------------------------------------------------------------- table and CLI


def test_recipe_diff_table_lists_differences_with_both_sources(tmp_path):
    exp = load_experiment(CONFIGS / "default.yaml")
    paths = RD.write_recipe_diff(exp, tmp_path)
    assert [p.name for p in paths] == ["recipe_diff.csv", "recipe_diff.md"]
    rows = list(csv.DictReader(io.StringIO(paths[0].read_text())))
    by = {(r["group"], r["field"]): r for r in rows}
    tokens = by[("hourglass_8B", "total_tokens")]
    assert tokens["status"] == "differs" and tokens["paper"] == "160,000,000,000"
    assert tokens["official"].startswith("100,000,595,968")
    assert "mtkresearch/Hourglass_LM@1f0ae80 hourglass_lm/pretraining_script/conf/8B/llama32_8b_baseline.yaml:11-12" \
        in tokens["official_source"]
    assert "arXiv 2602.06471 Table 4" in tokens["paper_source"]
    assert ("hourglass_8B", "lr") not in by  # same in both: listed only with --all
    assert by[("figure4", "fit R^2, hourglass")]["section"] == "derived"
    md = paths[1].read_text()
    assert "follows recipe **paper**" in md and "| hourglass_8B | total_tokens (`train.total_tokens`) | differs |" in md


def test_recipe_diff_reads_which_runs_follow_which_recipe_from_the_plan(tmp_path, official):
    """The recipe_diff rule passes work/EXP/plan.json: the plan records the experiment's recipe
    and each run's (a seed instance its config entry's), and the table is the one the config gives."""
    from shapelm.plan.build import plan_of, write_plan
    from shapelm.plan.document import read_plan

    plan = read_plan(write_plan(official, tmp_path / "plan.json"))
    assert plan.recipe == official.raw.get("recipe", "paper")
    follow = sorted(r for r, name in plan.run_recipes.items() if name == "official")
    assert follow and follow == sorted(r for r in official.runs if "recipe" in official.run(r))
    assert RD.followed(plan) == RD.followed(plan_of(official))
    from_plan = RD.write_recipe_diff(tmp_path / "plan.json", tmp_path / "from_plan")
    from_exp = RD.write_recipe_diff(official, tmp_path / "from_exp")
    assert [p.read_text() for p in from_plan] == [p.read_text() for p in from_exp]


def test_cli_recipe_diff(capsys):
    assert cli.main(["recipe", "diff", str(CONFIGS / "default.yaml"), "--format", "csv", "--all"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert ("hourglass_8B", "lr", "same") in {(r["group"], r["field"], r["status"]) for r in rows}
    assert cli.main(["recipe", "diff", str(CONFIGS / "nonexistent.yaml")]) == 2
