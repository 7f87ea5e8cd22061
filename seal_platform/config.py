"""Recipes: YAML files validated by pydantic, with ``key.sub=value`` overrides from the command line.

The core validates its own keys; every plugin validates its own section under ``settings:`` with the model it
returns from ``register_settings``. Errors are collected, never raised one at a time, so that
``seal-platform config validate`` can report all of them at once, each with where it is and how to fix it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigError
from .recipe_keys import close_key, known_keys, resolve_recipe_path
from .recipe_secrets import expand_settings, is_secret_name, scrub


def as_store_url(store: str) -> str:
    """A run store as an SQLAlchemy URL: a URL (``sqlite:///runs/store.sqlite``, ``postgresql://...``) as it is,
    anything else as the path of an SQLite file (relative to the current directory, ``~`` expanded)."""
    if "://" in store:
        return store
    return f"sqlite:///{Path(store).expanduser().resolve()}"


class Section(BaseModel):
    """The base of every settings model: a recipe section (the core's and each plugin's ``register_settings``
    model) and any other user-written input validated by pydantic (a task file's lines, an interface spec).
    Unknown keys are errors, so a misspelt key is reported (with the closest known one) instead of ignored.
    A subclass may add to ``model_config`` (``ConfigDict(frozen=True)``); pydantic merges it with this one."""

    model_config = ConfigDict(extra="forbid")


class PluginSelection(Section):
    allow: list[str] | None = Field(
        default=None, description="Load only these plugins (entry-point names). Null: all installed."
    )
    block: list[str] = Field(default_factory=list, description="Never load these plugins.")


class TrainingConfig(Section):
    steps: int | None = Field(
        default=None, ge=0, le=1_000_000, description="Training steps; null: epochs x steps per epoch."
    )
    epochs: int = Field(default=6, ge=1, le=10_000)
    tasks_per_step: int = Field(default=32, ge=1, le=100_000)
    group_size: int = Field(default=8, ge=1, le=1024, description="Rollouts per task (GRPO's G).")
    checkpoint_every: int = Field(
        default=10, ge=0, le=1_000_000, description="Steps between checkpoints; 0: only at the end."
    )
    keep_checkpoints: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Keep only the last N checkpoints (and the best, see keep_best_by); older ones are deleted "
        "once a newer one is durable. Null: keep every checkpoint.",
    )
    keep_best_by: str | None = Field(
        default="average",
        description="With keep_checkpoints: also keep the checkpoint whose held-out evaluation (of the run's own "
        "environment) scored highest on this category ('average': the mean over categories); null: only the last N.",
    )
    max_train_tasks: int | None = Field(
        default=None, ge=1, le=10_000_000, description="Use only the first N training tasks."
    )


class DynamicSamplingConfig(Section):
    """Dynamic sampling (DAPO's; verl's ``filter_groups``): train only on groups with mixed outcomes and draw
    more training tasks until the step has ``training.tasks_per_step`` of them (see
    :mod:`seal_platform.dynamic_sampling`)."""

    enabled: bool = Field(
        default=False, description="Filter out groups whose rewards are all equal and draw more tasks."
    )
    max_rounds: int = Field(
        default=4, ge=1, le=1000,
        description="Collect rounds per step at most, the scheduled batch included; a step that still has "
        "fewer mixed groups then trains on those it has.",
    )
    tasks_per_round: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Tasks collected per round (verl's gen_batch_size): round 1 is the step's scheduled batch "
        "topped up with drawn tasks to this many, later rounds draw this many; null: training.tasks_per_step.",
    )
    keep_surplus: bool = Field(
        default=False,
        description="Train on every mixed group the step's rounds drew, not only the first "
        "training.tasks_per_step (rounds still stop once that many are mixed): the rollouts already paid for "
        "are not thrown away, and the update is sized to what was drawn.",
    )


class RolloutConfig(Section):
    engine: str | None = Field(
        default=None,
        description="The registered rollout engine that generates the rollouts and evaluations (`seal-platform "
        "plugins` lists them). No default: the engine loads the policy, so a recipe says which.",
    )
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=512, ge=1, le=1_048_576)
    workers: int = Field(
        default=8, ge=1, le=4096, description="Episodes run at once (the engine batches their requests)."
    )
    executor: str = Field(
        default="local",
        description="Where episodes run: `local` (threads in this process) or an executor a plugin registers "
        "(`seal-platform plugins` lists them; one that runs on a cluster needs that cluster enabled).",
    )
    episode_timeout_s: float | None = Field(
        default=None, gt=0.0,
        description="Wall-clock limit of one episode under a distributed executor; past it the episode is "
        "an infrastructure failure. Null: no limit beyond the environment's own.",
    )
    max_infra_failure_frac: float = Field(
        default=0.25, ge=0.0, le=1.0,
        description="Abort the step when more than this share of its trajectories is masked out because of "
        "infrastructure failures (dead actors, lost nodes, episode time limits).",
    )
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlap: bool = Field(
        default=False,
        description="Collect the next step's rollouts while this step trains (one step off-policy, the "
        "optimizer's staleness rule applies; never across a checkpoint). Needs an optimizer whose `optimize` "
        "takes `rollouts` (grpo does). See seal_platform.rollouts and docs/scaling.md.",
    )


class BenchmarkEval(Section):
    """One more benchmark evaluated alongside the training environment (e.g. out of distribution)."""

    environment: str = Field(description="A registered environment, e.g. `bfcl_memory`.")
    split: str = Field(default="eval", description="Its task split.")
    max_tasks: int | None = Field(default=None, ge=1, le=10_000_000, description="Evaluate on its first N tasks only.")
    name: str | None = Field(
        default=None, description="Name its results are stored and shown under; default: the environment."
    )

    @property
    def key(self) -> str:
        return self.name or self.environment

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"environment": value} if isinstance(value, str) else value


class EvaluationConfig(Section):
    split: str = "eval"
    every: int = Field(
        default=10, ge=0, le=1_000_000, description="Evaluate every K training steps; 0: only before and after."
    )
    before_training: bool = True
    max_tasks: int | None = Field(default=None, ge=1, le=10_000_000, description="Evaluate on the first N tasks only.")
    max_new_tokens: int | None = Field(default=None, ge=1, le=1_048_576)
    benchmarks: list[BenchmarkEval] = Field(
        default_factory=list,
        description="More benchmarks evaluated at the same steps as the training environment (names, or "
        "{environment, split, max_tasks}); each is stored and shown under its own name.",
    )
    training_interface: bool = Field(
        default=False,
        description="Also score each evaluation point on the run's current TRAINING interface (stored and shown "
        "as '<environment>@training'), so the gap between training and evaluation interfaces is measured; "
        "points where the training interface is still the pristine one are not repeated.",
    )


class DiagnosisConfig(Section):
    diagnosers: list[str] | None = Field(
        default=None,
        description="Enabled diagnosers; null: every registered one not marked explicit (each runs only "
        "in runs of the environments it declares).",
    )
    primary: str | None = Field(
        default=None, description="Diagnoser whose labels drive the capability state and A-Patch."
    )


class StagesConfig(Section):
    """Which plugin owns each single-owner stage. Null switches the stage off."""

    evolve_interface: str | None = None
    reweight: str | None = None
    optimize: str | None = None


class RunConfig(Section):
    name: str = "run"
    description: str = ""
    seed: int = Field(
        default=0, ge=0, le=2**32 - 1, description="Seeds every random choice of the run (0 to 2**32 - 1)."
    )
    environment: str = Field(description="A registered environment, e.g. `bfcl`.")
    runs_dir: str = Field(default="runs", description="Where run directories and the default store live.")
    store: str | None = Field(default=None, description="SQLAlchemy URL or the path of an SQLite file; default: "
                              "SQLite under runs_dir.")
    plugins: PluginSelection = Field(default_factory=PluginSelection)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    diagnosis: DiagnosisConfig = Field(default_factory=DiagnosisConfig)
    stages: StagesConfig = Field(default_factory=StagesConfig)
    settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-plugin sections, each validated by the plugin that owns it."
    )

    def named_plugins(self) -> set[str]:
        """Plugin names the recipe depends on (the owners under ``stages:``): if one of these fails to load
        the run cannot go on. ``environment``, ``rollout.engine`` and ``diagnosis.*`` name what plugins
        *register*, not plugins; they are checked against the registrations (seal_platform.planning)."""
        return {v for v in self.stages.model_dump().values() if v}

    def store_url(self) -> str:
        """The store's URL, a ``${NAME}`` in ``store:`` read from the environment (``postgresql://seal:${PGPASSWORD}@db/runs``)."""
        if self.store:
            from .recipe_secrets import expand

            return as_store_url(expand(self.store, "store", secret=True))
        return f"sqlite:///{Path(self.runs_dir).resolve() / 'store.sqlite'}"

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def config_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


@dataclass
class Issue:
    """One problem in a recipe: where (a dotted path), what, how to fix it, and its source (the recipe
    file and line, or the command-line override; see :class:`~seal_platform.recipe_keys.RecipeOrigin`)."""

    where: str
    what: str
    fix: str = ""
    source: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.what}"
        text = f"{text} ({self.fix})" if self.fix else text
        return f"{self.source}: {text}" if self.source else text


# --- loading -------------------------------------------------------------------------------------------

# A recipe is a few hundred YAML nodes; these bounds refuse alias bombs (a few hundred bytes whose aliases
# expand to billions of nodes once anything walks the mapping) and nesting that would overflow the stack.
MAX_RECIPE_NODES = 100_000
MAX_RECIPE_DEPTH = 64
# The characters of its scalars (keys and values) once every alias is expanded: a value written once and
# aliased a thousand times costs a thousand copies when it is loaded (a 1 MB string, 1 GB).
MAX_RECIPE_CHARS = 16 * 2**20
# Recipes in one ``extends`` chain (an ablation of an ablation of a base recipe is three).
MAX_EXTENDS_DEPTH = 32


def _check_yaml_shape(path: Path, text: str) -> None:
    """Refuse a recipe whose node graph, with every alias expanded, has more than :data:`MAX_RECIPE_NODES`
    nodes or :data:`MAX_RECIPE_CHARS` characters of keys and values, or is nested deeper than
    :data:`MAX_RECIPE_DEPTH` levels, before anything expands it."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ConfigError(
            f"{path}: nested too deeply to read (more than {MAX_RECIPE_DEPTH} levels are refused)."
        ) from None
    if root is None:
        return
    size: dict[int, int] = {}
    chars: dict[int, int] = {}
    height: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are still being sized: one met again is its own ancestor
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # post-order, iterative: no recursion however deep the document
        node, done = stack.pop()
        if id(node) in size:
            continue
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not done:
            if id(node) in open_:
                line = node.start_mark.line + 1
                raise ConfigError(f"{path}:{line}: an alias (*name) refers to a value that contains it, so the value "
                                  "would be infinite; write the value out.")
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        open_.discard(id(node))
        size[id(node)] = 1 + sum(size[id(c)] for c in children)
        chars[id(node)] = (len(node.value) if isinstance(node.value, str) else 0) + sum(chars[id(c)] for c in children)
        height[id(node)] = 1 + max((height[id(c)] for c in children), default=0)
        if size[id(node)] > MAX_RECIPE_NODES:
            raise ConfigError(
                f"{path}: with its aliases (*name) expanded the recipe has more than "
                f"{MAX_RECIPE_NODES:,} values (an alias bomb?); write the values out or use fewer aliases."
            )
        if chars[id(node)] > MAX_RECIPE_CHARS:
            line = node.start_mark.line + 1
            raise ConfigError(f"{path}:{line}: with its aliases (*name) expanded the recipe holds more than "
                              f"{MAX_RECIPE_CHARS // 2**20} MiB of text (an alias bomb?); a recipe is a few "
                              "kilobytes of settings: write large data (task files, prompts) to a file and name it.")
        if height[id(node)] > MAX_RECIPE_DEPTH:
            line = node.start_mark.line + 1
            raise ConfigError(f"{path}:{line}: nested deeper than {MAX_RECIPE_DEPTH} levels; a recipe is a shallow "
                              "mapping of settings.")


def load_yaml(path: Path) -> dict[str, Any]:
    import yaml  # here, not at the top: a command that reads no recipe (verify) starts without it

    try:
        text = path.read_text()
        _check_yaml_shape(path, text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}).") from None
    except OSError as exc:
        raise ConfigError(f"cannot read recipe {path}: {exc.strerror}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start + 1} cannot be decoded): save the recipe "
                          f"as UTF-8 (e.g. iconv -f latin1 -t utf-8).") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping of keys to values, not a {type(data).__name__}.")
    return data


_SCIENTIFIC = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key, anything else (null too) replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_recipe_data(path: Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A recipe's mapping with its ``extends:`` chain resolved (a path relative to the recipe, or the name
    of a shipped recipe), so ablations state only what they change."""
    path = path.resolve()
    if path in _chain:
        cycle = " -> ".join(p.name for p in (*_chain, path))
        raise ConfigError(f"recipe {path}: `extends` goes round in a circle ({cycle}).")
    if len(_chain) >= MAX_EXTENDS_DEPTH:
        names = [str(p) for p in (*_chain, path)]
        shown = " -> ".join(names if len(names) <= 6 else [*names[:3], f"... ({len(names) - 5} more)", *names[-2:]])
        raise ConfigError(f"recipe {_chain[0]}: its `extends` chain is longer than {MAX_EXTENDS_DEPTH} recipes "
                          f"({shown}); a recipe extends a base that extends at most a few others: merge the chain "
                          "into fewer files.")
    data = load_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends: must be the name or path of one recipe.")
    sibling = path.parent / parent
    base_path = sibling if sibling.is_file() else (path.parent / f"{parent}.yaml")
    if not base_path.is_file():
        base_path = resolve_recipe_path(parent)
    return deep_merge(load_recipe_data(base_path, (*_chain, path)), data)


def parse_override(text: str, example: str = "training.steps=2") -> tuple[list[str], Any]:
    """``training.steps=3`` -> (["training", "steps"], 3). The value is read as a YAML scalar or list.
    ``example``: a valid override where this one is given, for the error message."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"override {text!r} is not of the form key.sub=value (e.g. {example}).")
    import yaml

    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str], example: str = "training.steps=2",
                    problems: list[Issue] | None = None) -> dict[str, Any]:
    """``data`` with each ``key.sub=value`` override set in it. A malformed override, or one that goes
    through a key holding a value, raises ConfigError; with a ``problems`` list it is added there as an
    :class:`Issue` instead and left out, and the other overrides are still applied (so that ``config
    validate`` reports every problem at once)."""
    for text in overrides:
        try:
            path, value = parse_override(text, example)
            node = data
            for part in path[:-1]:
                child = node.get(part)
                if child is None:
                    child = node[part] = {}
                elif not isinstance(child, dict):
                    raise ConfigError(f"override {text!r}: {part!r} holds a value, not a section.")
                node = child
        except ConfigError as exc:
            if problems is None:
                raise
            what = str(exc).removeprefix(f"override {text!r}").removeprefix(":").strip().rstrip(".")
            problems.append(Issue(text.partition("=")[0].strip() or "(override)", what, source=f"override {text!r}"))
            continue
        node[path[-1]] = value
    return data


def _pydantic_issues(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> list[Issue]:
    issues = []
    for err in exc.errors():
        where = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        kind = err["type"]
        if kind == "extra_forbidden":
            *parents, last = err["loc"] or ("",)
            meant = close_key(str(last), known_keys(model, parents)) if model is not None else None
            fix = (f"did you mean {'.'.join(str(p) for p in (prefix, *parents, meant) if p != '')!r}?"
                   if meant else "remove it or check its spelling")
            issues.append(Issue(where or "(top level)", "unknown key", fix))
        elif kind == "missing":
            issues.append(Issue(where, "required key is missing", "add it to the recipe"))
        elif kind == "model_type" and model is not None and all(isinstance(p, str) for p in err["loc"]) \
                and known_keys(model, err["loc"]):
            issues.append(_section_given_a_value(where, err.get("input"), known_keys(model, err["loc"])))
        else:
            got = err.get("input")
            # A secret's value is never echoed: not for a key named so nor one a model marks (SecretStr).
            secret = any(is_secret_name(p) for p in err["loc"]) or "secret" in kind
            shown = f" (got {scrub(repr(got))})" if not isinstance(got, (dict, list)) and not secret else ""
            issues.append(Issue(where, f"{err['msg']}{shown}", "change the value"))
    return issues


def _section_given_a_value(where: str, got: Any, keys: list[str]) -> Issue:
    """The issue of a section (a model's keys: ``rollout.dynamic_sampling``) given a single value instead
    (``rollout.dynamic_sampling=false``): what it takes, and, for a true/false given to a section that has an
    ``enabled`` key, the key that was meant."""
    what = f"this is a section, not a single value (got {got!r}): it takes the keys {', '.join(keys)}"
    if isinstance(got, bool) and "enabled" in keys:
        value = json.dumps(got)
        fix = (f"to turn it {'on' if got else 'off'}, give {where}.enabled={value}; in a recipe file, "
               f"'enabled: {value}' under '{where.rsplit('.', 1)[-1]}:'")
    else:
        fix = f"give its keys, e.g. {where}.{keys[0]}=VALUE, or leave it out for their defaults"
    return Issue(where, what, fix)


# Keys the core's schema no longer has: the backends' and the optimizer's settings live in their plugins'
# sections (docs/scaling.md, "Migrating recipes"). Old key -> new key.
MOVED_KEYS: dict[str, str] = {
    **{
        f"ray.{k}": f"settings.ray.{k}"
        for k in ("enabled", "address", "namespace", "num_cpus", "episode_actors", "episode_cpus")
    },
    "ray.colocate": "settings.grpo.placement.colocate",
    "ray.placement_strategy": "settings.grpo.placement.strategy",
    **{
        f"ray.{k}": f"settings.grpo.placement.{k}"
        for k in ("trainer_cpus", "trainer_gpus", "engine_cpus", "engine_gpus")
    },
    **{f"rollout.{k}": f"settings.grpo.{k}" for k in ("replicas", "max_staleness", "stale_samples", "importance_cap")},
}


# Their defaults before they moved (the same as their new keys' defaults): a stored run's config lists every key.
_MOVED_DEFAULTS: dict[str, Any] = {
    "ray.enabled": False, "ray.address": None, "ray.namespace": "seal-platform", "ray.num_cpus": None,
    "ray.episode_actors": 2, "ray.episode_cpus": 0.25, "ray.colocate": False, "ray.placement_strategy": "PACK",
    "ray.trainer_cpus": 1.0, "ray.trainer_gpus": 0.0, "ray.engine_cpus": 1.0, "ray.engine_gpus": 0.0,
    "rollout.replicas": 1, "rollout.max_staleness": 0, "rollout.stale_samples": "refuse", "rollout.importance_cap": 2.0,
}


def stored_config(data: dict[str, Any]) -> RunConfig:
    """The config of a stored run (``resume``, ``eval RUN``). A run stored before Ray's and GRPO's keys moved
    lists them all: each one whose value is not its default is moved to its new key (the defaults are the
    same there), the rest dropped, so such runs resume and evaluate as they ran."""
    if not moved_key_issues(data):
        return RunConfig.model_validate(data)
    moved = drop_moved_keys(data)
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        node = data.get(section)
        if not isinstance(node, dict) or key not in node or node[key] == _MOVED_DEFAULTS[old]:
            continue
        target = moved
        for part in new.split(".")[:-1]:
            target = target.setdefault(part, {})
        target[new.split(".")[-1]] = node[key]
    return RunConfig.model_validate(moved)


def moved_key_issues(data: dict[str, Any]) -> list[Issue]:
    """One issue per key of ``data`` that moved out of the core's schema, naming the key that replaces it."""
    issues: list[Issue] = []
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        node = data.get(section)
        if isinstance(node, dict) and key in node:
            issues.append(Issue(old, f"this key moved to {new} (Ray's and GRPO's settings are their plugins' own "
                                f"sections now, not core keys)",
                                f"write it as {new}; see docs/scaling.md, 'Migrating recipes'"))
    ray = data.get("ray")
    known = {k.split(".")[1] for k in MOVED_KEYS if k.startswith("ray.")}
    if "ray" in data and not (isinstance(ray, dict) and ray and set(ray) <= known):
        issues.append(Issue("ray", "the top-level ray: section moved to settings.ray (connection, executor) and "
                            "settings.grpo.placement (placement of engine replicas and trainer workers)",
                            "move its keys there; see docs/scaling.md, 'Migrating recipes'"))
    return issues


def drop_moved_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys :func:`moved_key_issues` reports (so the rest can still be checked)."""
    data = copy.deepcopy(data)
    data.pop("ray", None)
    rollout = data.get("rollout")
    if isinstance(rollout, dict):
        for old in MOVED_KEYS:
            section, key = old.split(".")
            if section == "rollout":
                rollout.pop(key, None)
    return data


def non_finite_issues(value: Any, where: str) -> list[Issue]:
    """One issue per float in a validated setting (``value``: a settings model, or what one holds) that is not
    a finite number: ``lr=1e999`` reads as infinity, ``nan`` and ``inf`` as themselves, and none of them is a
    setting any computation can use. The one check of every float setting, the core's and every plugin's,
    whatever its model says (pydantic takes them unless a model forbids them itself)."""
    issues: list[Issue] = []
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        at, item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            issues.append(Issue(at, f"not a finite number (got {item!r})", "give a finite number"))
        elif isinstance(item, BaseModel):
            pending.extend((f"{at}.{name}" if at else name, getattr(item, name, None))
                           for name in type(item).model_fields)
        elif isinstance(item, dict):
            pending.extend((f"{at}.{key}" if at else str(key), sub) for key, sub in item.items())
        elif isinstance(item, (list, tuple)):
            pending.extend((f"{at}.{i}", sub) for i, sub in enumerate(item))
    return sorted(issues, key=lambda issue: issue.where)


def validate_core(data: dict[str, Any]) -> tuple[RunConfig | None, list[Issue]]:
    moved = moved_key_issues(data)
    try:
        config = RunConfig.model_validate(drop_moved_keys(data) if moved else data)
    except ValidationError as exc:
        return None, moved + _pydantic_issues(exc, model=RunConfig)
    # The plugins' sections (settings:) are their models' to check (validate_settings), non-finite floats too.
    infinite = non_finite_issues(config.model_copy(update={"settings": {}}), "")
    if moved or infinite:
        return None, moved + infinite
    return config, []


def salvage_config(data: dict[str, Any]) -> RunConfig | None:
    """A config from ``data`` with the keys the core rejects left out (defaults in their place), so that
    ``config validate`` can still check plugin settings and stages and report every problem at once."""
    data = drop_moved_keys(data)
    for _ in range(5):
        try:
            return RunConfig.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                node: Any = data
                *parents, last = err["loc"] or ("",)
                for part in parents:
                    node = node.get(part) if isinstance(node, dict) else None
                if isinstance(node, dict):
                    node.pop(last, None)
        except Exception:
            return None
    return None


def validate_settings(
    config: RunConfig, models: dict[str, type[BaseModel]]
) -> tuple[dict[str, BaseModel], list[Issue]]:
    """Validate every plugin's section; absent sections take the model's defaults."""
    issues: list[Issue] = []
    settings: dict[str, BaseModel] = {}
    for section in config.settings:
        if section not in models:
            owners = ", ".join(sorted(models)) or "none"
            meant = close_key(section, list(models))
            guess = f"did you mean 'settings.{meant}'? " if meant else ""
            issues.append(
                Issue(f"settings.{section}", "no loaded plugin owns this section",
                      f"{guess}sections owned by loaded plugins: {owners}; is the plugin installed and not blocked?")
            )
    for section, model in models.items():
        raw = config.settings.get(section) or {}
        if not isinstance(raw, dict):
            issues.append(Issue(f"settings.{section}", "must be a mapping of keys to values"))
            continue
        try:  # ${NAME} references read from the environment: the plugin gets the values, the config keeps the names
            raw = expand_settings(raw, model, f"settings.{section}")
        except ConfigError as exc:
            where, _, what = str(exc).partition(": ")
            issues.append(Issue(where, what.rstrip(".")))
            continue
        try:
            validated = model.model_validate(raw, extra=None if _chooses_extra(model) else "forbid")
        except ValidationError as exc:
            issues.extend(_pydantic_issues(exc, prefix=f"settings.{section}", model=model))
            continue
        infinite = non_finite_issues(validated, f"settings.{section}")
        if infinite:
            issues.extend(infinite)
        else:
            settings[section] = validated
    return settings, issues


def hint_settings_sections(issues: list[Issue], data: dict[str, Any], models: dict[str, type[BaseModel]]) -> None:
    """Give each "unknown key" issue of a top-level key that names a plugin's settings section (``grpo:``,
    an override ``grpo.overlong_filter=true``) the key it was meant as: ``settings.grpo.overlong_filter`` (its
    keys followed into the plugin's model as far as they, or a close spelling of them, exist there; else
    ``settings.grpo``). Changes the issues in place."""
    for issue in issues:
        section = issue.where
        if issue.what != "unknown key" or section not in models:
            continue
        raw = data.get(section)
        meant = [f"settings.{section}"]
        if isinstance(raw, dict) and raw:
            meant = []
            for key, value in raw.items():
                parents: list[str] = []
                node: Any = {key: value}
                while isinstance(node, dict) and len(node) == 1:
                    [(sub, node)] = node.items()
                    fields = known_keys(models[section], parents)
                    name = str(sub) if str(sub) in fields else close_key(str(sub), fields)
                    if name is None:
                        break
                    parents.append(name)
                meant.append(".".join(["settings", section, *parents]))
        shown = ", ".join(repr(m) for m in dict.fromkeys(meant))
        issue.fix = (f"did you mean {shown}? {section!r} is a plugin's settings section: its keys go under "
                     f"settings.{section}")


def _chooses_extra(model: type[BaseModel], seen: set[type] | None = None) -> bool:
    """Whether ``model`` or a model nested in its fields says itself what becomes of unknown keys
    (``model_config["extra"]``). A plugin's section whose models leave it unsaid is validated with unknown keys
    refused, so a misspelt key is an error, not a setting silently ignored; one that allows them keeps them."""
    seen = set() if seen is None else seen
    if model in seen:
        return False
    seen.add(model)
    if model.model_config.get("extra") is not None:
        return True
    pending = [field.annotation for field in model.model_fields.values()]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if _chooses_extra(annotation, seen):
                return True
        else:
            pending.extend(getattr(annotation, "__args__", ()))  # list[M], M | None, dict[str, M], ...
    return False


# ``json_schema_extra`` of a plugin setting that says where the run runs, not what it computes (a cluster's
# address, say): ``run --resume RUN settings.SECTION.KEY=VALUE`` may give it again.
RUNTIME: dict[str, Any] = {"runtime": True}


def runtime_keys(models: dict[str, type[BaseModel]]) -> list[str]:
    """The ``settings.SECTION.KEY`` of every plugin setting marked :data:`RUNTIME`."""
    return [f"settings.{section}.{name}" for section, model in sorted(models.items())
            for name, field in model.model_fields.items()
            if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("runtime")]


def resume_overrides(config: RunConfig, overrides: list[str], models: dict[str, type[BaseModel]]) -> RunConfig:
    """``config`` (a resumed run's) with ``overrides`` applied: each must name a :data:`RUNTIME` setting, or a
    secret the store holds redacted (written out in the recipe, so not stored: the resume gives it again,
    best as a ``${NAME}`` reference). The values are validated with the rest when the run is planned."""
    from .recipe_secrets import redacted_paths

    allowed = runtime_keys(models)
    redacted = redacted_paths({"settings": config.settings})
    settings = copy.deepcopy(config.settings)
    for text in overrides:
        path, value = parse_override(text)
        key = ".".join(path)
        if key in redacted and len(path) > 2:
            _set_path(settings, path[1:], value)
            continue
        if key not in allowed:
            secrets = f"; and the secrets the store holds redacted: {', '.join(redacted)}" if redacted else ""
            raise ConfigError(f"override {text!r}: a resumed run keeps its recipe and overrides; only settings that "
                              f"say where it runs may be given again ({', '.join(allowed) or 'none'}{secrets}).")
        settings.setdefault(path[1], {})[path[2]] = value
    return config.model_copy(update={"settings": settings})


def _set_path(data: Any, path: list[str], value: Any) -> None:
    """Set ``value`` at ``path`` in nested mappings and lists (a list's index given as its number)."""
    for part in path[:-1]:
        data = data[int(part)] if isinstance(data, list) else data[part]
    if isinstance(data, list):
        data[int(path[-1])] = value
    else:
        data[path[-1]] = value


def refuse_redacted(config: RunConfig, run_id: str, resume_hint: str) -> None:
    """ConfigError naming every secret a resumed run's stored config holds redacted (it was written out in the
    recipe, and a secret is never stored): the run cannot go on with ``<redacted>`` in their place."""
    from .recipe_secrets import redacted_paths

    redacted = redacted_paths({"settings": config.settings})
    if redacted:
        example = " ".join(f"'{key}=${{VARIABLE}}'" for key in redacted[:2])
        raise ConfigError(f"run {run_id}'s recipe wrote out secret(s) that were not stored ({', '.join(redacted)}): "
                          f"give them again from the environment, e.g. `{resume_hint} {example}` with VARIABLE "
                          "exported (docs/mcp.md, 'Secrets'); nothing was changed.")


def raise_for(issues: list[Issue], source: str) -> None:
    """Raise one :class:`ConfigError` listing ``issues`` (nothing when there are none)."""
    if issues:
        lines = "\n".join(f"  - {issue}" for issue in issues)
        overridden = any(issue.source.startswith("override ") for issue in issues)
        head = (f"{len(issues)} problem(s) in the recipe {source} and its command-line overrides" if overridden
                else f"{source}: {len(issues)} problem(s) in the recipe")
        raise ConfigError(f"{head}:\n{lines}", issues=issues)

