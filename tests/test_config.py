"""Experiment configs: schema errors name the key before any work; runs resolve their recipe."""

import copy
from pathlib import Path

import pytest

from shapelm import files
from shapelm.config import TrainRecipe, load_run_config
from shapelm.plan.experiment import load_experiment
from shapelm.errors import ConfigError

ROOT = Path(__file__).parents[1]


def _minimal():
    return {
        "name": "t",
        "scales": {"s": {"n_heads": 2, "train": {"lr": 1e-3, "batch_tokens": 64, "seq_len": 16,
                                                   "total_tokens": 640, "warmup_tokens": 64}}},
        "runs": {"a": {"scale": "s", "arch": {"kind": "conventional", "d_model": 16, "n_layers": 1,
                                              "d_h": 32, "vocab_size": 50}}},
    }


def test_shipped_configs_load_and_validate():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        exp = load_experiment(path)
        assert exp.runs, path


def test_run_inherits_scale_recipe_and_heads():
    exp = load_experiment(ROOT / "configs" / "paper.yaml")
    run = exp.run("hg906m_hg")
    assert run["train"]["lr"] == 2.5e-4 and run["train"]["total_tokens"] == 18_000_000_000
    assert run["model"]["layers"][0]["attention"]["n_heads"] == 16
    assert run["train"]["seed"] == 6198
    assert len(run["hash"]) == 16


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c.update(bogus=1), "bogus"),
        (lambda c: c["runs"]["a"].update(colour="red"), "colour"),
        (lambda c: c["scales"]["s"]["train"].update(lr=-1), "lr"),
        (lambda c: c["scales"]["s"]["train"].update(lrr=1), "lrr"),
        (lambda c: c["runs"]["a"].update(scale="nope"), "nope"),
        (lambda c: c["runs"]["a"]["arch"].update(n_heads=3), "n_heads"),
        (lambda c: c["runs"]["a"]["arch"].update(kind="pyramid"), "kind"),
        (lambda c: c["runs"].update({"Bad-Name": c["runs"]["a"]}), "Bad-Name"),
        (lambda c: c["scales"]["s"]["train"].update(batch_tokens=60), "batch_tokens"),
        (lambda c: c["scales"]["s"]["train"].update(precision="fp8"), "precision"),
        (lambda c: c.pop("runs"), "runs"),
        (lambda c: c["runs"]["a"].update(decode="nope"), r"runs\.a\.decode: 'nope' is not another run"),
        (lambda c: c["runs"]["a"].update(decode="a"), r"runs\.a\.decode: 'a'"),
        (lambda c: c.setdefault("eval", {}).update(standin_tasks=["openbookqa"]),
         r"eval\.standin_tasks: no stand-in data for task 'openbookqa'"),
    ],
)
def test_bad_configs_name_the_key(mutate, needle):
    cfg = copy.deepcopy(_minimal())
    mutate(cfg)
    with pytest.raises(ConfigError, match=needle):
        load_experiment(cfg)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_experiment(bad)


def test_run_config_roundtrip(tmp_path):
    exp = load_experiment(_minimal())
    files.write_json(tmp_path / "r.json", exp.run("a"), **files.RUN_FILE)
    run = load_run_config(tmp_path / "r.json")
    assert run == exp.run("a")
    recipe = TrainRecipe.from_dict(run["train"])
    assert recipe.total_steps == 10 and recipe.warmup_steps == 1 and recipe.batch_sequences == 4


def test_one_schema_file():
    """workflow/schemas (where Snakemake users look) links to the package's copy, the one the
    loader reads: the two cannot drift."""
    from shapelm.config import SCHEMA_PATH

    link = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    assert link.is_symlink() and link.resolve() == SCHEMA_PATH.resolve()


def test_schema_arch_keys_are_the_builders_keys():
    """model_defaults and runs.*.arch are closed over exactly the keys some builder takes."""
    from shapelm.config import config_schema
    from shapelm.model.builders import COMMON_KEYS, MIXER_KEYS, kind_keys, kinds

    schema_keys = set(config_schema()["$defs"]["arch_keys"]["properties"])
    builder_keys = {"kind", *COMMON_KEYS, *MIXER_KEYS, *(k for kind in kinds() for k in kind_keys(kind))}
    assert schema_keys == builder_keys
    assert set(config_schema()["$defs"]["arch_keys"]["properties"]["kind"]["enum"]) == set(kinds())


def test_section_defaults_are_the_stages_defaults():
    from shapelm.config import section_defaults
    from shapelm.longctx.plan import DEFAULTS

    assert DEFAULTS == section_defaults("longctx")
    assert section_defaults("decode")["mixers"] == ["mha", "gqa", "mla"]


def test_schema_enums_are_the_code_names():
    from shapelm.config import config_schema
    from shapelm.decode.model import MIXERS
    from shapelm.longctx.ruler.tasks import TASK_NAMES

    props = config_schema()["properties"]
    assert props["decode"]["properties"]["mixers"]["items"]["enum"] == list(MIXERS)
    assert props["longctx"]["properties"]["ruler_tasks"]["items"]["enum"] == list(TASK_NAMES)


@pytest.mark.parametrize("key, value", [("lr", float("nan")), ("final_lr_ratio", float("nan")),
                                        ("grad_clip", float("inf")), ("betas", [0.9, float("nan")]),
                                        ("seed", 2**64), ("warmup_tokens", 10**6)])
def test_run_config_without_the_schema_is_still_checked(tmp_path, key, value):
    """A run config read back from JSON (Python's reader takes NaN and Infinity) meets the
    recipe's own checks: non-finite floats, seeds beyond numpy's range, warm-up beyond the run."""
    import json

    run = load_experiment(_minimal()).run("a")
    run["train"][key] = value
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    with pytest.raises(ConfigError, match=f"train.{key}"):
        load_run_config(path)


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), -4, 0.5])
def test_yarn_factor_is_finite_and_at_least_one(factor):
    from shapelm.longctx.yarn import yarn_scaling
    from shapelm.model.config import ModelConfig

    with pytest.raises(ConfigError, match="factor"):
        yarn_scaling(factor=factor, original_max_position_embeddings=128)
    model = load_experiment(_minimal()).run("a")["model"]
    model["rope_scaling"] = {"type": "yarn", "factor": factor, "original_max_position_embeddings": 16}
    with pytest.raises(ConfigError, match="rope_scaling.factor"):
        ModelConfig.from_dict(model)


def test_the_mixer_list_has_one_home():
    """The schema's `arch.mixer` enum and the modules of the decoder name the mixers of
    shapelm.model.config.MIXERS (less "none": a layer without a mixer is not a spec option)."""
    from shapelm.config import config_schema
    from shapelm.model.config import MIXERS
    from shapelm.model.transformer import MIXER_MODULES

    def enums(node):
        if isinstance(node, dict):
            if "mixer" in node.get("properties", {}) and "enum" in node["properties"]["mixer"]:
                yield node["properties"]["mixer"]["enum"]
            for value in node.values():
                yield from enums(value)
        elif isinstance(node, list):
            for value in node:
                yield from enums(value)

    found = list(enums(config_schema()))
    assert found, "no mixer enum in the schema"
    spec_mixers = [m for m in MIXERS if m != "none"]
    assert all(e == spec_mixers for e in found), found
    assert list(MIXER_MODULES) == spec_mixers
