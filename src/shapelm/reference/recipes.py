"""Two training recipes side by side: `paper` (what the papers print) and `official` (the released code).

The values and their provenance live in `shapelm/reference/recipes.yaml` (one entry per recipe
group: the Hourglass 906M / 3B / 8B scales and the LWS 190M scale). An experiment follows one
recipe (top-level `recipe: paper | official`, default `paper`); a run may choose its own
(`runs.<name>.recipe`). `paper` is what the configs already spell out, so it changes nothing;
`official` overrides the run's train / arch keys with the released values, between the scale's
recipe and the run's own `train:` (which still wins):

    train_defaults < scales.<s>.train < official recipe < runs.<r>.train

An official value the pipeline cannot run yet (`supported: false`: tied embeddings, Llama-3
RoPE scaling, QK-norm weight decay, ...) is refused when the config loads, naming the field, its
source and why, unless the experiment lists it in `recipe_waive`; the run then trains without
it and its run config records the waiver under `recipe`. FP8 (`train.fp8`) is applied
like any other key; the trainer refuses it off a CUDA SM89+ GPU. Where the choice changes a printed number, `shapelm.commands.recipe_diff` computes both:
Figure 4's fits and compute saving, 3B/8B GPU-hours against the papers' wall-clock claims, and
parameter counts with untied vs tied embeddings.

    shapelm recipe diff configs/paper.yaml configs/overlays/paper-official.yaml [--all] [--write DIR]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shapelm import reference
from shapelm.errors import ConfigError

RECIPE_NAMES = ("paper", "official")
TABLE_NAME = "recipe_diff"
CSV_COLUMNS = ["section", "group", "field", "config_key", "status", "paper", "paper_source",
               "official", "official_source", "note"]


# --------------------------------------------------------------------------- reference data


@dataclass(frozen=True)
class Side:
    """One recipe's value of a field, with where it comes from."""

    value: Any
    sources: tuple[str, ...]
    derived: str = ""
    printed: str | None = None
    as_written: str | None = None
    supported: bool = True
    refusal: str = ""
    note: str = ""
    stated: bool = True  # False: the text is silent; the value is the project's choice

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Side:
        return cls(value=d.get("value"), sources=tuple(d.get("source") or ()), derived=d.get("derived", ""),
                   printed=d.get("printed"), as_written=d.get("as_written"),
                   supported=bool(d.get("supported", True)), refusal=d.get("refusal", ""), note=d.get("note", ""),
                   stated=bool(d.get("stated", True)))

    @property
    def text(self) -> str:
        shown = self.as_written or _value_text(self.value)
        return f"{shown} ({self.derived})" if self.derived else shown


@dataclass(frozen=True)
class Field:
    group: str
    name: str
    config: str | None  # "train.<key>" or "arch.<key>"; None: no config key expresses it
    paper: Side
    official: Side

    def side(self, recipe: str) -> Side:
        return self.paper if recipe == "paper" else self.official

    @property
    def status(self) -> str:
        """`same`, `agrees at printed precision` (differs below the paper's rounding), `differs`, or
        `not in the text` (the paper is silent and the configs follow a choice of their own)."""
        a, b = self.paper.value, self.official.value
        if not self.paper.stated:
            return "not in the text"
        if a == b:
            return "same"
        numeric = isinstance(b, (int, float)) and not isinstance(b, bool)
        if self.paper.printed and numeric and reference.PrintedNumber.parse(self.paper.printed).matches(b):
            return "agrees at printed precision"
        return "differs"


def _value_text(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return ", ".join(f"{k} {_value_text(x)}" for k, x in v.items())
    if isinstance(v, float) and abs(v) >= 1e6 and v == int(v):
        v = int(v)  # token counts
    if isinstance(v, float) and v and abs(v) < 1e-3:
        return f"{v:g}"
    if isinstance(v, int) and abs(v) >= 1e6:
        return f"{v:,}"
    return str(v)


def groups() -> dict[str, dict[str, Any]]:
    return reference.load_recipes()["recipes"]


def fields(group: str) -> dict[str, Field]:
    """The fields of one recipe group, in file order."""
    try:
        spec = groups()[group]
    except KeyError:
        raise KeyError(f"unknown recipe group {group!r}; known: {', '.join(groups())}") from None
    return {name: Field(group, name, f.get("config"), Side.from_dict(f["paper"]), Side.from_dict(f["official"]))
            for name, f in spec["fields"].items()}


def group_for_scale(scale: str) -> str | None:
    """The recipe group whose released code trains this config scale (None: no released config)."""
    for name, spec in groups().items():
        if scale in spec["scales"]:
            return name
    return None


def expand_source(text: str) -> str:
    """"hourglass:path:12" -> "mtkresearch/Hourglass_LM@1f0ae80 path:12"; other text unchanged."""
    repos = reference.load_recipes()["repositories"]
    key, sep, rest = text.partition(":")
    if sep and key in repos:
        return f"{repos[key]['repo']}@{repos[key]['commit'][:7]} {rest}"
    return text


# --------------------------------------------------------------------------- config resolution


def run_recipe_name(data: dict[str, Any], run_name: str) -> str:
    """The recipe a run follows: its own `recipe`, else the experiment's, else `paper`."""
    return data["runs"][run_name].get("recipe") or data.get("recipe") or "paper"


def recipe_overrides(data: dict[str, Any], run_name: str, where: str = "config") -> tuple[dict, dict, dict | None]:
    """(train overrides, arch overrides, record for the run config) of the run's recipe.

    `paper` is the config as written: no overrides and no record (run configs and their hashes
    are unchanged). `official` sets every supported field of the run's scale's group and
    refuses, naming field, value, source and reason, an unsupported one not in `recipe_waive`.
    """
    name = run_recipe_name(data, run_name)
    if name not in RECIPE_NAMES:
        raise ConfigError(f"{where}: runs.{run_name}.recipe: {name!r} is not one of {', '.join(RECIPE_NAMES)}")
    if name == "paper":
        return {}, {}, None
    scale = data["runs"][run_name]["scale"]
    group = group_for_scale(scale)
    if group is None:
        covered = ", ".join(s for g in groups().values() for s in g["scales"])
        raise ConfigError(f"{where}: runs.{run_name}: recipe 'official': no released config trains scale "
                          f"{scale!r} (the official recipes cover scales {covered}); use recipe 'paper'")
    waive = list(data.get("recipe_waive") or [])
    known = fields(group)
    every = {n for g in groups() for n in fields(g)}
    unknown = sorted(set(waive) - every)
    if unknown:
        raise ConfigError(f"{where}: recipe_waive: unknown field(s) {unknown}; recipe fields: {sorted(every)}")
    # The released file of this run's architecture, to cite the line that run would read.
    own_file = groups()[group].get("files", {}).get(data["runs"][run_name]["arch"].get("kind"), "")
    train: dict[str, Any] = {}
    arch: dict[str, Any] = {}
    applied: dict[str, Any] = {}
    waived: dict[str, Any] = {}
    refused: list[str] = []
    for f in known.values():
        off = f.official
        if not off.supported:
            if f.name in waive:
                waived[f.name] = {"value": off.as_written or off.value, "reason": off.refusal}
            else:
                refused.append(f"{f.name} = {off.as_written or _value_text(off.value)} "
                               f"({source_for(off, own_file)}): {off.refusal}")
            continue
        if f.config is None:
            continue
        section, key = f.config.split(".", 1)
        (train if section == "train" else arch)[key] = off.value
        applied[f.config] = off.value
    if refused:
        names = [r.split(" = ")[0] for r in refused]
        raise ConfigError(f"{where}: runs.{run_name}: recipe 'official' ({group}) sets what the pipeline cannot "
                          f"run: {'; '.join(refused)}. To train without them, list them in recipe_waive: "
                          f"[{', '.join(names)}]")
    record = {"name": "official", "group": group, "applied": applied, "waived": waived}
    return train, arch, record


def source_for(side: Side, own_file: str) -> str:
    if not side.sources:
        return "no source"
    mine = [s for s in side.sources if own_file and s.startswith(own_file + ":")]
    return expand_source((mine or list(side.sources))[0])
