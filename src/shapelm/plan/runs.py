"""Run resolution: one run of an experiment config (its scale's recipe, the run's recipe
overrides, its seed) turned into the self-contained *run config* every stage consumes, with its
model config built from the run's builder spec.

`shapelm.config` holds the schema, the loader, `merge`, `TrainRecipe` and the hash; the model
builders sit above it, so resolution, which needs both, lives here.
"""
from __future__ import annotations

import json
from typing import Any

from shapelm.config import SEED_GROUP_KEY, TrainRecipe, config_hash, merge, seed_instances
from shapelm.errors import ConfigError
from shapelm.model.builders import build_model_config, kind_keys
from shapelm.reference.recipes import recipe_overrides


def ppl_seq_len(data: dict[str, Any], scale: str, train_seq_len: int) -> int:
    """The length of a run's held-out perplexity instances: its scale's `eval.ppl_seq_len` where the
    protocol names one (the 113M models trained on 2,048 are scored at 4,096), else the
    experiment's top-level `eval.ppl_seq_len` where it sets one for every run, else the length
    the run was trained at (a model scored at 4x its training length measures extrapolation)."""
    scale_eval = data["scales"][scale].get("eval") or {}
    return int(scale_eval.get("ppl_seq_len") or (data.get("eval") or {}).get("ppl_seq_len") or train_seq_len)


def resolve_run(data: dict[str, Any], run_name: str, where: str = "config", seed: int | None = None,
                instance: str | None = None) -> dict[str, Any]:
    """One run's resolved config; `seed`/`instance`: one instance of a run with `seeds:` (its
    training seed and run name, see `seed_instances`)."""
    run = data["runs"][run_name]
    instance = instance or run_name
    scale = run["scale"]
    if scale not in data.get("scales", {}):
        raise ConfigError(f"{where}: runs.{run_name}.scale: unknown scale {scale!r}")
    scale_cfg = data["scales"][scale]
    # The run's recipe (shapelm.reference.recipes): `official` overrides with the released code's values.
    recipe_train, recipe_arch, recipe_record = recipe_overrides(data, run_name, where)
    arch = merge(merge(data.get("model_defaults", {}), recipe_arch), run["arch"])
    # Table 4 gives attention heads per scale; kinds that derive their heads per layer (lws:
    # from head_dim and the layer's width) or spell them out (explicit) do not take n_heads.
    takes_heads = "n_heads" in kind_keys(arch.get("kind", ""))
    if takes_heads and "n_heads" not in arch and arch.get("attention", True) and "n_heads" in scale_cfg:
        arch["n_heads"] = scale_cfg["n_heads"]
    train_dict = merge(merge(data.get("train_defaults", {}), scale_cfg.get("train", {})), recipe_train)
    train_dict = merge(train_dict, run.get("train", {}))
    if seed is not None:
        train_dict["seed"] = seed
    recipe = TrainRecipe.from_dict(train_dict, f"{where}: runs.{run_name}.train")
    arch.setdefault("max_seq_len", recipe.seq_len)
    model = build_model_config(arch, f"{where}: runs.{run_name}.arch")
    first = instance == run_name
    resolved = {
        "name": instance,
        "experiment": data.get("name", "experiment"),
        "scale": scale,
        "tables": list(run.get("tables", [])),
        "label": run.get("label", run_name) if first else f"{run.get('label', run_name)} (seed {seed})",
        "arch": arch,
        "model": json.loads(json.dumps(model.to_dict())),  # tuples -> lists, as on disk
        "train": recipe.to_dict(),
        "data": merge(data.get("data", {}), scale_cfg.get("data", {})),
        "eval": {**merge(data.get("eval", {}), run.get("eval", {})),
                 "ppl_seq_len": ppl_seq_len(data, scale, recipe.seq_len)},
        # Long context (YaRN, Proof-pile, RULER) runs on the first seed only: the seeds repeat
        # pretraining and its standard evaluations.
        "longctx": bool(run.get("longctx", False)) and first,
    }
    if recipe_record:  # only `official`: the paper recipe leaves run configs (and hashes) as they were
        resolved["recipe"] = recipe_record
    if seed is not None:
        # Bookkeeping, outside the hash: the first seed's instance hashes as the same run without
        # `seeds:` trained with that seed.
        names = [n for n, _ in seed_instances(data, where)[run_name]]
        resolved[SEED_GROUP_KEY] = {"run": run_name, "seed": seed, "instances": names}
    resolved["hash"] = config_hash(resolved)
    return resolved
