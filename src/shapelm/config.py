"""Experiment and run configs: the one way to name a run and resolve what it trains.

An experiment config (`configs/*.yaml`) holds scale recipes (arXiv 2602.06471 Table 4), stage settings
and named runs; each run names its scale, so it inherits that scale's recipe, and gives its
architecture as a builder spec. `shapelm.plan.runs.resolve_run` turns one run into a
self-contained *run config* (a plain dict, saved as JSON by the workflow) that every stage consumes:

    {"name": ..., "scale": ..., "arch": {...}, "model": ModelConfig.to_dict(),
     "train": TrainRecipe fields, "data": {...}, "eval": {...}, "experiment": ..., "hash": ...}

Validation happens on load, before any job runs: the YAML is read strictly (a duplicate key is an
error, `__use_yte__` templates are refused: configs are data), checked against
`schemas/config.schema.yaml` (every section closed, typed and ranged; names safe as path
components), every run's model config is built (shapelm.plan), cross-field checks run (`check_runs`) and every
output path the config names is confined to its output folder (`check_output_paths`). Every
error is a `ConfigError` naming the key and the value.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shapelm.errors import ConfigError

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"
#: Snakemake's configfile loader evaluates YTE templates when a file sets this key.
YTE_KEY = "__use_yte__"
#: The sections whose schema `default:` values the loader fills in (rules read them as given).
DEFAULTED_SECTIONS = ("longctx", "decode")
TOKEN_COUNT_KEYS = ("warmup_tokens", "total_tokens", "batch_tokens", "eval_every")
#: The most tokens a count may name (the schema's $defs/token_count; the papers' most: 1.6e11).
MAX_TOKENS = 10**15
#: The largest training seed (the schema's $defs/seed): numpy's generators take no more.
MAX_SEED = 2**32 - 1
#: What a block recomputes in backward instead of keeping for it: the recipe's
#: activation_checkpointing options (shapelm.model.transformer applies them).
RECOMPUTE_MODES = ("none", "selective", "ffn", "full")


def _name_rules() -> dict[str, str]:
    """What each name pattern of the schema means, for messages."""
    defs = config_schema()["$defs"]
    return {
        defs["name"]["pattern"]: ("a safe name (letters, digits, '_' and '-', starting with a letter "
                                  "or digit: it becomes a path component)"),
        config_schema()["properties"]["runs"]["propertyNames"]["pattern"]: (
            "a run name (lower-case letters, digits and '_', starting with a letter or digit: it "
            "is a wildcard value in paths)"),
        defs["token_count"]["pattern"]: "a number of tokens",
    }


@dataclass
class TrainRecipe:
    """The pretraining recipe (arXiv 2602.06471 A.1.4, Table 4; OLMo-2 defaults)."""

    lr: float = 3e-4
    final_lr_ratio: float = 0.1  # OLMo decays the cosine to 0.1 x peak
    warmup_tokens: int = 0
    total_tokens: int = 0
    batch_tokens: int = 0  # global tokens per optimizer step
    seq_len: int = 4096
    micro_batch_size: int = 1  # sequences per device per forward pass
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    z_loss: float = 1e-5
    seed: int = 6198
    frozen_lm_head: bool = False
    precision: str = "auto"  # auto: bf16 autocast on GPU, float32 on CPU
    compile: bool | str = "auto"  # auto: compiled blocks on CUDA, eager elsewhere
    distributed: str = "ddp"  # ddp | fsdp | hsdp (shard within a node, replicate across nodes)
    activation_checkpointing: str = "none"  # none | selective | ffn | full (shapelm.model.transformer)
    fp8: bool = False  # torchao float8 training of the blocks' Linear layers (CUDA, SM89+)
    checkpoint_every: int = 1000  # optimizer steps
    checkpoint_format: str = "auto"  # auto (sharded under fsdp/hsdp, else full) | full | sharded
    async_checkpoint: bool = False  # sharded saves written by a thread while training goes on
    keep_last: int = 2
    log_every: int = 10
    loss_chunk_tokens: int = 0  # 0: plain loss; >0: vocabulary loss in token chunks
    repetition_filter: bool = True  # OLMo's instance filter: period <= 13 repeated >= 32 times
    # Validation during training (shapelm.train.evaluator, docs/TRAINING.md "Validation during
    # training"); none of it changes an update, so none is in the recipe hash.
    eval_every: int = 0  # tokens between evaluations (0: none)
    eval_heldout_sequences: int = 0  # instances after the last trained one: the in-distribution split
    eval_max_instances: int | None = None  # per held-out validation set (None: all of it)

    @property
    def batch_sequences(self) -> int:
        return self.batch_tokens // self.seq_len

    @property
    def total_steps(self) -> int:
        return self.total_tokens // self.batch_tokens

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup_tokens / self.batch_tokens)

    def validate(self, where: str = "train") -> None:
        if self.seq_len <= 0:
            raise ConfigError(f"{where}.seq_len must be positive, got {self.seq_len}")
        if self.batch_tokens <= 0 or self.batch_tokens % self.seq_len:
            raise ConfigError(
                f"{where}.batch_tokens={self.batch_tokens} must be a positive multiple of "
                f"seq_len={self.seq_len}"
            )
        if self.total_tokens < self.batch_tokens:
            raise ConfigError(
                f"{where}.total_tokens={self.total_tokens} is less than one step of "
                f"batch_tokens={self.batch_tokens}"
            )
        # A run config (JSON, or a checkpoint's) reaches here without the schema: floats again.
        for key, value in (("lr", self.lr), ("final_lr_ratio", self.final_lr_ratio), ("eps", self.eps),
                           ("weight_decay", self.weight_decay), ("grad_clip", self.grad_clip),
                           ("z_loss", self.z_loss), *((f"betas[{i}]", b) for i, b in enumerate(self.betas))):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{where}.{key} must be a finite number, got {value!r}")
        if self.lr <= 0:
            raise ConfigError(f"{where}.lr must be positive, got {self.lr}")
        if not 0 <= self.final_lr_ratio <= 1:
            raise ConfigError(f"{where}.final_lr_ratio must be in [0, 1], got {self.final_lr_ratio}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"{where}.seed must be a whole number in 0..{MAX_SEED}, got {self.seed!r}")
        # The run trains whole steps (total_steps = total_tokens // batch_tokens) and the schedule
        # reaches its final LR at the last of them; a warm-up ending in the remainder that no step
        # trains would leave the LR rising at the last update, never decayed.
        trained = self.total_steps * self.batch_tokens
        if self.warmup_tokens > trained:
            within = (f"total_tokens={self.total_tokens}" if trained == self.total_tokens else
                      f"{trained} trained tokens ({self.total_steps} whole steps of batch_tokens="
                      f"{self.batch_tokens}; total_tokens={self.total_tokens})")
            raise ConfigError(f"{where}.warmup_tokens={self.warmup_tokens} is beyond the run's "
                              f"{within}: the warm-up must end within the run")
        if self.precision not in ("auto", "float32", "bf16"):
            raise ConfigError(f"{where}.precision must be auto, float32 or bf16, got {self.precision!r}")
        if self.distributed not in ("ddp", "fsdp", "hsdp"):
            raise ConfigError(f"{where}.distributed must be ddp, fsdp or hsdp, got {self.distributed!r}")
        if self.checkpoint_format not in ("auto", "full", "sharded"):
            raise ConfigError(f"{where}.checkpoint_format must be auto, full or sharded, "
                              f"got {self.checkpoint_format!r}")
        if self.compile not in (True, False, "auto"):
            raise ConfigError(f"{where}.compile must be true, false or auto, got {self.compile!r}")
        if self.activation_checkpointing not in RECOMPUTE_MODES:
            raise ConfigError(f"{where}.activation_checkpointing must be one of {RECOMPUTE_MODES}, "
                              f"got {self.activation_checkpointing!r}")
        if self.eval_every < 0:
            raise ConfigError(f"{where}.eval_every must be >= 0 tokens (0: no evaluation during "
                              f"training), got {self.eval_every}")
        if not isinstance(self.eval_heldout_sequences, int) or self.eval_heldout_sequences < 0:
            raise ConfigError(f"{where}.eval_heldout_sequences must be a whole number >= 0 of "
                              f"seq_len instances, got {self.eval_heldout_sequences!r}")
        if self.eval_max_instances is not None and (
                not isinstance(self.eval_max_instances, int) or self.eval_max_instances < 1):
            raise ConfigError(f"{where}.eval_max_instances must be null (every instance) or >= 1, "
                              f"got {self.eval_max_instances!r}")
        if self.micro_batch_size <= 0 or self.batch_sequences % self.micro_batch_size:
            raise ConfigError(
                f"{where}.micro_batch_size={self.micro_batch_size} must divide the "
                f"{self.batch_sequences} sequences of a step"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "train") -> TrainRecipe:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
        data = dict(data)
        for key in TOKEN_COUNT_KEYS:
            if key in data:
                data[key] = token_count(data[key], f"{where}.{key}")
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        recipe = cls(**data)
        recipe.validate(where)
        return recipe

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out


def token_count(value: Any, key: str) -> int:
    """A token count as an int: YAML 1.1 reads 18e9 as a string and 2.5e9 may be a float, but
    a count with a fractional part (2048.9) is an error, not silently rounded."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise ConfigError(f"{key}: {value!r} is not a whole, non-negative number of tokens")
    if number > MAX_TOKENS:
        raise ConfigError(f"{key}: {value!r} is above the ceiling of {MAX_TOKENS:.0e} tokens")
    return int(number)


@dataclass
class Experiment:
    name: str
    path: Path | None
    raw: dict[str, Any]
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # resolved run configs

    def run(self, name: str) -> dict[str, Any]:
        if name not in self.runs:
            raise ConfigError(f"unknown run {name!r}; this experiment has {len(self.runs)} runs")
        return self.runs[name]

    def runs_for(self, *, scale: str | None = None, table: str | None = None) -> list[str]:
        return [
            name
            for name, run in self.runs.items()
            if (scale is None or run["scale"] == scale) and (table is None or table in run["tables"])
        ]

    def section(self, key: str) -> dict[str, Any]:
        return copy.deepcopy(self.raw.get(key, {}))

    def spec(self, name: str) -> dict[str, Any]:
        """The run as written in the config (a seed instance: its run's entry)."""
        return self.raw["runs"][group_of(self.run(name))]

    def instances(self, name: str) -> list[str]:
        """The seed instances of a run (`seeds:`), first seed first; [name] for any other run
        (and for an instance named directly)."""
        group = self.runs.get(name, {}).get(SEED_GROUP_KEY)
        if not group or group["run"] != name:
            return [name]
        return list(group["instances"])

    def is_primary(self, name: str) -> bool:
        """False for the instances of a run's seeds after its first (they are not rows of their own)."""
        return group_of(self.run(name)) == name


#: The most nodes a config may expand to once its aliases are followed (configs/paper.yaml: about
#: 5,000). An alias "bomb" (each level naming the one below k times) stays small as text and as
#: the composed graph, but every consumer that walks it (schema, merge, hash) walks k**levels nodes.
MAX_YAML_NODES = 1_000_000
MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error naming the
    key and its line (plain YAML keeps the last one silently, e.g. a run defined twice), and a
    document whose aliases expand beyond MAX_YAML_NODES nodes, or into themselves, is refused
    before anything is built from it. Merge keys (`<<: *base`) work as in YAML 1.1: the mapping's
    own keys win over merged ones."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
                seen.setdefault(key, line)
            except TypeError:  # an unhashable key: the base class names it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {line}; first given on line {first})",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes of `root` with its aliases expanded (each shared node counted once per
    use, computed once): a YAMLError when a node contains itself or the count passes the limit."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise yaml.YAMLError(f"a recursive alias (line {node.start_mark.line + 1}): a value "
                                 "that contains itself is not plain data")
        open_nodes.add(id(node))
        total = 1 + sum(size(child) for child in children(node))
        open_nodes.discard(id(node))
        if total > MAX_YAML_NODES:
            raise yaml.YAMLError(f"aliases expand to more than {MAX_YAML_NODES:,} values (line "
                                 f"{node.start_mark.line + 1}); write the config out")
        sizes[id(node)] = total
        return total

    size(root)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text through `StrictLoader`; a syntax error or duplicate key is a ConfigError."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML: nested too deeply") from None


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """A config file (YAML, or JSON by suffix) as a mapping, read strictly (`StrictLoader`)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start}); a config is a YAML or JSON file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config: {err.strerror or err}") from None
    if path.suffix == ".json":
        # JSON through the JSON parser: YAML 1.1 reads "1e-08" (no dot) as a string.
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_json_keys(path))
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON: {err}") from None
        except RecursionError:
            raise ConfigError(f"{path}: not valid JSON: nested too deeply") from None
    else:
        data = parse_yaml(text, str(path))
    if nesting_depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{path}: nested too deeply (more than {MAX_CONFIG_DEPTH} levels)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    refuse_templates(data, str(path))
    return data


MAX_CONFIG_DEPTH = 64  # the schema's deepest key is a few levels down


def nesting_depth(data: Any, limit: int = MAX_CONFIG_DEPTH + 1) -> int:
    """How deeply `data` nests mappings and lists, counted up to `limit` (iterative: no recursion)."""
    deepest, stack = 0, [(data, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest >= limit:
            return deepest
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, (list, tuple)):
            stack += [(v, depth + 1) for v in node]
    return deepest


def _no_duplicate_json_keys(path: Path):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"{path}: duplicate key {key!r}")
            out[key] = value
        return out

    return hook


def refuse_templates(data: dict[str, Any], where: str) -> None:
    if YTE_KEY in data:
        raise ConfigError(
            f"{where}: {YTE_KEY}: YTE templates are not supported; a shapelm config is plain data "
            "(write the values out, or generate the file with a script)")


@functools.cache
def config_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _schema_message(err: Any) -> str:
    """One jsonschema error as `key.path: what is wrong`, naming the key and the value."""
    path = ".".join(str(p) for p in err.absolute_path)
    at = path or "(top level)"
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in err.schema.get("properties", {}))
        keys = ", ".join(f"{path + '.' if path else ''}{k}" for k in extra)
        return f"{keys}: unknown key{'s' if len(extra) > 1 else ''}; allowed here: {', '.join(allowed) or 'none'}"
    if err.validator == "pattern":  # also a mapping's key (propertyNames): `at` is the mapping
        what = _name_rules().get(err.validator_value, f"matching {err.validator_value}")
        return f"{at}: {err.instance!r} is not {what}"
    return f"{at}: {err.message}"


@functools.cache
def _validator_class():
    """Draft 2020-12 as the schema means it: `integer` is a whole number written as one (1.0
    and 1.0e30 are numbers, not integers: JSON Schema's own rule accepts them), and `pattern` must
    match the whole string (re.search with `$` accepts a trailing newline: a name "tnl\\n")."""
    import re

    import jsonschema

    base = jsonschema.Draft202012Validator

    def is_integer(checker, instance):
        return isinstance(instance, int) and not isinstance(instance, bool)

    def fullmatch_pattern(validator, pattern, instance, schema):
        if validator.is_type(instance, "string") and not re.fullmatch(pattern, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

    return jsonschema.validators.extend(
        base, validators={"pattern": fullmatch_pattern},
        type_checker=base.TYPE_CHECKER.redefine("integer", is_integer))


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _scalar_problem(value: Any) -> str | None:
    """Why a config scalar cannot be taken: a NaN or infinity (JSON Schema bounds compare false
    with NaN, and `.inf` passes any exclusiveMinimum), or a string with a control character (a
    newline in a value would add its own lines to the task YAMLs, shell lines and JSON files
    written from the config)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(value, str) and CONTROL.search(value):
        return f"{value[:60]!r} holds a control character (a newline, tab, escape...); config strings are one line"
    return None


def non_finite(data: Any, path: str = "") -> list[str]:
    """`key.path: why` for every NaN, infinity or control character in a value or key of `data`."""
    where = path or "(top level)"
    if isinstance(data, dict):
        out = []
        for k, v in data.items():
            key = f"{path}.{k}" if path else str(k)
            problem = _scalar_problem(k)
            out += [f"{key!r}: key {problem}"] if problem else non_finite(v, key)
        return out
    if isinstance(data, (list, tuple)):
        return [m for i, v in enumerate(data) for m in non_finite(v, f"{path}.{i}" if path else str(i))]
    problem = _scalar_problem(data)
    return [f"{where}: {problem}"] if problem else []


def validate_schema(data: dict[str, Any], where: str = "config") -> None:
    """Check `data` against the JSON schema; the error names the key path and the problem."""
    problems = non_finite(data)
    raise_problems(problems, where)
    validator = _validator_class()(config_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    raise_problems([_schema_message(e) for e in errors], where)


def raise_problems(problems: list[str], where: str, when: str = "") -> None:
    """One ConfigError listing every problem (the first 40), or nothing if there are none."""
    problems = list(dict.fromkeys(problems))
    if not problems:
        return
    shown = "\n  ".join(problems[:40])
    more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
    if len(problems) == 1 and not when:
        raise ConfigError(f"{where}: {shown}")
    raise ConfigError(f"{where}: {len(problems)} problem(s){when}:\n  {shown}{more}")


def section_defaults(section: str) -> dict[str, Any]:
    """The schema's `default:` values of one section's keys (the one place they live)."""
    props = config_schema()["properties"][section]["properties"]
    return {k: copy.deepcopy(v["default"]) for k, v in props.items() if "default" in v}


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; override wins; lists are replaced, not concatenated."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def numbers_from_cli(section: Any) -> Any:
    """`--config cluster={max_runtime_min: 2880}` arrives with string values: numbers back."""
    if isinstance(section, dict):
        return {k: numbers_from_cli(v) for k, v in section.items()}
    if isinstance(section, str):
        for parse in (int, float):
            try:
                return parse(section)
            except ValueError:
                pass
    return section


#: Where a seed instance's resolved config names its run, seed and sibling instances.
SEED_GROUP_KEY = "seed_group"


def seed_instance_name(run: str, seed: int) -> str:
    """The run name of a later seed's instance (`seeds:`; the first seed keeps `run`). A run
    name itself (the runs' name pattern): it is a wildcard value and a path component."""
    return f"{run}_s{seed}"


def group_of(run: dict[str, Any]) -> str:
    """The config's run a resolved run comes from (itself unless it is a seed instance)."""
    return (run.get(SEED_GROUP_KEY) or {}).get("run", run["name"])


def seed_instances(data: dict[str, Any], where: str = "config") -> dict[str, list[tuple[str, int | None]]]:
    """Each run's (instance name, training seed) pairs: [(run, None)] without `seeds:`, else
    the first seed under the run's own name (so a run that gains `seeds:` starting with the seed
    it trained with keeps its outputs) and `seed_instance_name` for the others. An instance name
    that is not a valid run name or is another run's name is an error naming the run and key."""
    import re

    pattern = config_schema()["properties"]["runs"]["propertyNames"]["pattern"]
    out: dict[str, list[tuple[str, int | None]]] = {}
    taken = set(data["runs"])
    problems = []
    for name, run in data["runs"].items():
        seeds = run.get("seeds")
        if seeds is None:
            out[name] = [(name, None)]
            continue
        if "seed" in (run.get("train") or {}):
            problems.append(f"runs.{name}.seeds: runs.{name}.train.seed is also given; with seeds: "
                            f"each instance trains with its own seed, so drop train.seed")
        out[name] = [(name, int(seeds[0]))]
        for seed in seeds[1:]:
            instance = seed_instance_name(name, int(seed))
            if not re.fullmatch(pattern, instance):
                problems.append(f"runs.{name}.seeds: seed {seed}'s run name {instance!r} is not a run "
                                f"name (pattern {pattern}); shorten the run name")
            elif instance in taken:
                problems.append(f"runs.{name}.seeds: seed {seed}'s run name {instance!r} is already a "
                                f"run of this config; rename one of them")
            taken.add(instance)
            out[name].append((instance, int(seed)))
    raise_problems(problems, where)
    return out


#: `train` settings that decide what a run evaluates, logs and keeps, never its weights: the
#: config hash leaves them out, so changing one neither reruns training nor deletes its final
#: model (workflow/rules/train.smk). The held-out split (eval_heldout_sequences) lies after
#: the trained tokens; the checkpoint format and its thread change how, not what, is saved.
WEIGHT_NEUTRAL_TRAIN_KEYS = ("eval_every", "eval_max_instances", "eval_heldout_sequences",
                             "log_every", "checkpoint_every", "keep_last", "checkpoint_format",
                             "async_checkpoint")
#: Top-level keys of a run config outside the hash: its own hash, seed bookkeeping, and the
#: held-out directories scored during training (shapelm.plan.jobs.training_config).
UNHASHED_RUN_KEYS = ("hash", SEED_GROUP_KEY, "validation_dirs")


def weights_content(run: dict[str, Any]) -> dict[str, Any]:
    """What of a (training) run config decides the trained weights: all of it but
    UNHASHED_RUN_KEYS and the `train` settings in WEIGHT_NEUTRAL_TRAIN_KEYS."""
    content = {k: v for k, v in run.items() if k not in UNHASHED_RUN_KEYS}
    if isinstance(content.get("train"), dict):
        content["train"] = {k: v for k, v in content["train"].items()
                            if k not in WEIGHT_NEUTRAL_TRAIN_KEYS}
    return content


def config_hash(run: dict[str, Any]) -> str:
    """16 hex digits of the sha256 of `weights_content(run)`."""
    blob = json.dumps(weights_content(run), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_recipe(run: dict[str, Any]) -> TrainRecipe:
    return TrainRecipe.from_dict(run["train"])


def load_run_config(path: str | os.PathLike) -> dict[str, Any]:
    """A run config read back from JSON (or YAML): its keys and training recipe checked. Its
    model config is checked where it is built (`shapelm.model.config.run_model_config`)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: run config not found")
    if path.suffix in (".yaml", ".yml"):
        run = load_yaml(path)
    else:
        try:
            run = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON: {err}") from None
    for key in ("name", "model", "train"):
        if key not in run:
            raise ConfigError(f"{path}: run config lacks key {key!r}")
    TrainRecipe.from_dict(run["train"], f"{path}: train")
    return run
