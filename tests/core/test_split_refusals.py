"""A split the environment does not have (``evaluation.split``, a benchmark's ``split``, or no ``train`` split to
train on) is a recipe problem when the environment declares its splits (``EnvironmentSpec.splits``): refused
with the recipe's other problems by ``run`` (before the run's row is written or anything is loaded), ``eval``
and ``config validate``, naming the split and the environment's splits. An environment that declares none is
refused when the run lists its tasks, as before (``test_setup_failures``: the toy declares none)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.errors import ConfigError
from seal_platform.planning import plan_recipe
from seal_platform.store import RunStore

from .conftest import make_dist

# Environments of the toy's engine and stages: `declared` (train and eval), `evalonly`, `fromsettings` (its
# splits read from the toy's settings, as a task file's would be), `buggy` (its splits callable raises).
SPLIT_ENVS = """
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import EnvironmentSpec
from seal_platform.types import Interface, Task


class Env:
    name = "declared"

    def tasks(self, split):
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}")
        return [Task(id=f"{split}-{i}", category="c", split=split) for i in range(4)]

    def pristine_interface(self):
        return Interface()


def _from_settings(settings):
    toy = settings.get("toy")
    return None if toy is None or toy.n_tasks == 10 else {"train", f"split{toy.n_tasks}"}


@hookimpl
def register_environments():
    return [EnvironmentSpec("declared", lambda ctx: Env(), "train and eval", splits=("train", "eval")),
            EnvironmentSpec("evalonly", lambda ctx: Env(), "eval only", splits=("eval",)),
            EnvironmentSpec("fromsettings", lambda ctx: Env(), "from the settings", splits=_from_settings),
            EnvironmentSpec("buggy", lambda ctx: Env(), "a bug", splits=lambda settings: 1 / 0)]


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    raise AssertionError("never called: the recipe is refused")


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    raise AssertionError("never called: the recipe is refused")
"""


@pytest.fixture
def split_envs(toy_site: Path) -> list[str]:
    make_dist(toy_site, "seal-split-envs", "0.1.0", {"splitenvs": "split_envs_plugin"},
              {"split_envs_plugin.py": SPLIT_ENVS})
    return ["plugins.allow=[toy,splitenvs]"]


def _text(result) -> str:
    return " ".join(result.output.split())  # the console wraps long lines


def test_run_refuses_an_evaluation_split_the_environment_lacks_before_writing_anything(toy_recipe, tmp_path,
                                                                                       split_envs):
    store = tmp_path / "store.sqlite"
    runs = tmp_path / "runs"
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "environment=declared", *split_envs,
                                      "evaluation.split=bogus", "--store", str(store), "--quiet"])
    assert result.exit_code == 2, result.output
    assert ("override 'evaluation.split=bogus': evaluation.split: environment 'declared' (plugin 'splitenvs') has "
            "no split 'bogus'; its splits: eval, train (set evaluation.split to one of them)") in _text(result), \
        result.output
    assert not store.exists()  # no row: not even the store was created
    assert not runs.exists() or not any(runs.iterdir())  # and no run folder
    assert "trained anything" not in _text(result), result.output


def test_a_benchmark_split_no_train_split_and_a_failing_declaration_are_recipe_problems(toy_recipe, split_envs):
    benchmark = "evaluation.benchmarks=[{environment: declared, split: dev}]"
    with pytest.raises(ConfigError) as raised:
        plan_recipe(toy_recipe, [*split_envs, benchmark])
    assert ("evaluation.benchmarks[0].split: environment 'declared' (plugin 'splitenvs') has no split 'dev'; its "
            "splits: eval, train (set evaluation.benchmarks[0].split to one of them)") in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        plan_recipe(toy_recipe, ["environment=evalonly", *split_envs])
    assert ("environment: environment 'evalonly' (plugin 'splitenvs') has no 'train' split to train on; its splits: "
            "eval") in str(raised.value)
    assert "evaluation.split" not in str(raised.value)  # eval is one of its splits
    with pytest.raises(ConfigError) as raised:
        plan_recipe(toy_recipe, ["environment=buggy", *split_envs])
    assert ("plugin 'splitenvs' failed listing the splits of environment 'buggy': ZeroDivisionError: division by "
            "zero") in str(raised.value)


def test_splits_that_depend_on_the_settings_and_those_it_cannot_tell(toy_recipe, split_envs):
    with pytest.raises(ConfigError) as raised:  # settings.toy.n_tasks=3: the splits are train and split3
        plan_recipe(toy_recipe, ["environment=fromsettings", *split_envs, "settings.toy.n_tasks=3"])
    assert ("evaluation.split: environment 'fromsettings' (plugin 'splitenvs') has no split 'eval'; its splits: "
            "split3, train") in str(raised.value)
    plan = plan_recipe(toy_recipe, ["environment=fromsettings", *split_envs, "settings.toy.n_tasks=3",
                                    "evaluation.split=split3"])
    assert plan.config.evaluation.split == "split3"
    # n_tasks 10: it cannot tell (None), so the split is left to the run, as for an environment declaring none
    assert plan_recipe(toy_recipe, ["environment=fromsettings", *split_envs, "evaluation.split=bogus"])


def test_config_validate_and_eval_refuse_it_too(toy_recipe, tmp_path, split_envs):
    runner = CliRunner()
    checked = runner.invoke(cli, ["config", "validate", str(toy_recipe), "environment=declared", *split_envs,
                                  "evaluation.split=bogus"])
    assert checked.exit_code != 0, checked.output
    assert "environment 'declared' (plugin 'splitenvs') has no split 'bogus'" in _text(checked), checked.output
    # `eval` of a run of that environment with --split bogus: refused with the plan, before its checkpoints are
    # looked at or any plugin starts (the run here has none).
    plan = plan_recipe(toy_recipe, ["environment=declared", *split_envs])
    store = RunStore(f"sqlite:///{tmp_path / 'eval.sqlite'}")
    store.create_run(
        "20260101-000000-abcdef",
        name="toy",
        recipe=str(toy_recipe),
        config=plan.config.model_dump(mode="json"),
        config_hash="h",
        seed=0,
        run_dir=str(tmp_path),
        plugins=[],
    )
    bad = runner.invoke(cli, ["eval", "20260101-000000-abcdef", "--split", "bogus", "--store", str(store.url)])
    assert bad.exit_code == 2, bad.output
    assert "evaluation.split: environment 'declared' (plugin 'splitenvs') has no split 'bogus'" in _text(bad), (
        bad.output
    )
    good = runner.invoke(cli, ["eval", "20260101-000000-abcdef", "--split", "eval", "--store", str(store.url)])
    assert good.exit_code == 2 and "has no durable checkpoint" in _text(good), good.output  # past the plan
