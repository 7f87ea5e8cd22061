"""A run that fails before it trains anything (audit finding 17): an environment factory that raises, an
evaluation split the environment does not have, a plugin's ``start_run`` raising. The store records it as
failed with its error; the command says that nothing was trained (no step, no checkpoint), and that the
recipe can be run again as a new run or the run resumed to reuse its id and folder (from step 0), instead of
"continue it" as if there were something to continue. A run that trained a step and then failed keeps the
"continue it" hint."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.store import RunStore

from .conftest import make_dist

# An environment plugin whose factory raises (the toy provides the engine and the stages).
BROKEN_ENV = """
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import EnvironmentSpec


def _build(ctx):
    raise OSError("the task file /nowhere/tasks.jsonl does not exist")


@hookimpl
def register_environments():
    return [EnvironmentSpec("broken", _build, "an environment that cannot be set up")]


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    raise AssertionError("never called: the environment is never built")


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    raise AssertionError("never called: the environment is never built")
"""


# A plugin whose start_run fails while a flag file exists (a server it needs is down): a cause outside the recipe.
FLAKY = """
import os
from pathlib import Path

from seal_platform.hookspecs import hookimpl


@hookimpl
def start_run(ctx, resumed):
    if Path(os.environ["SEAL_TEST_FLAKY_FLAG"]).exists():
        raise ConnectionError("the licence server is down")
"""


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"


def _text(result) -> str:
    return " ".join(result.output.split())  # the console wraps long lines


@pytest.fixture
def broken_env(toy_site: Path, tmp_path: Path) -> list[str]:
    """The recipe arguments that run the toy's engine and stages on the `broken` environment."""
    make_dist(toy_site, "seal-broken-env", "0.1.0", {"brokenenv": "broken_env_plugin"},
              {"broken_env_plugin.py": BROKEN_ENV})
    return ["environment=broken", "plugins.allow=[toy,brokenenv]"]


@pytest.mark.parametrize("case", ["environment factory", "unknown split", "start_run"])
def test_a_run_that_fails_in_set_up_says_nothing_was_trained_and_both_ways_on(toy_site, toy_recipe, tmp_path,
                                                                               broken_env, case):
    args, said = {
        "environment factory": (broken_env, "setting up the environment failed in plugin 'brokenenv'"),
        "unknown split": (["evaluation.split=bogus"], "listing the tasks of split 'bogus' failed in plugin 'toy'"),
        "start_run": (["settings.toy.fail_in=start_run"], "plugin 'toy' failed in 'start_run'"),
    }[case]
    command = ["run", str(toy_recipe), *args, "--store", str(tmp_path / "runs" / "store.sqlite"), "--quiet"]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 2, result.output
    text = _text(result)
    store = RunStore(_url(tmp_path))
    (run,) = store.list_runs()
    assert run.status == "failed" and said in (run.error or ""), run.error  # recorded, naming the set-up step
    assert store.steps(run.id) == [] and store.checkpoints(run.id) == []
    assert said in text, text
    assert (f"The run {run.id} failed before it trained anything and is marked failed with this error: the store "
            "holds no step and no checkpoint of it, so there is nothing to continue.") in text, text
    rerun = shlex.join(["seal-platform", "run", str(toy_recipe), *args, "--store", _url(tmp_path)])
    assert f"run the recipe again as a new run (this one was `{rerun}`)" in text, text
    assert (f"reuse this run's id and folder with `seal-platform run --resume {run.id} --store {_url(tmp_path)}`, "
            "which starts it from step 0") in text, text
    assert "continue it with" not in text, text


def test_a_resume_of_a_run_that_failed_in_set_up_keeps_its_recipe(toy_site, toy_recipe, tmp_path):
    """A resume runs the recipe the run was started with: a cause in it fails the same way, and the message of
    a resumed run (whose command line holds no recipe) names no command for the new run."""
    runner = CliRunner()
    first = runner.invoke(cli, ["run", str(toy_recipe), "settings.toy.fail_in=start_run", "--quiet"])
    assert first.exit_code == 2, first.output
    store = RunStore(_url(tmp_path))
    (run,) = store.list_runs()
    again = runner.invoke(cli, ["run", "--resume", run.id, "--store", _url(tmp_path), "--quiet"])
    assert again.exit_code == 2 and "failed in 'start_run'" in again.output, again.output
    text = _text(again)
    assert f"The run {run.id} failed before it trained anything" in text, text
    assert (f"After fixing the cause, run its recipe again as a new run, or reuse this run's id and folder with "
            f"`seal-platform run --resume {run.id} --store {_url(tmp_path)}`") in text, text
    assert [r.id for r in store.list_runs()] == [run.id]


def test_a_run_that_failed_in_set_up_resumes_from_step_0_once_the_cause_is_gone(toy_site, toy_recipe, tmp_path,
                                                                                monkeypatch):
    """What the message says of --resume holds: with the cause outside the recipe fixed (here a flag file a
    plugin's start_run refuses to start with, removed), the resume trains the run from step 0 under its id."""
    # A module name of its own: test_plugin_audit installs another `flaky` plugin, and an imported module stays.
    make_dist(toy_site, "seal-licence", "0.1.0", {"licence": "licence_plugin"}, {"licence_plugin.py": FLAKY})
    sys.modules.pop("licence_plugin", None)
    flag = tmp_path / "server-down"
    flag.touch()
    monkeypatch.setenv("SEAL_TEST_FLAKY_FLAG", str(flag))
    runner = CliRunner()
    first = runner.invoke(cli, ["run", str(toy_recipe), "plugins.allow=[toy,licence]", "--quiet"])
    assert first.exit_code == 2 and "plugin 'licence' failed in 'start_run'" in first.output, first.output
    assert "failed before it trained anything" in _text(first), first.output
    store = RunStore(_url(tmp_path))
    (run,) = store.list_runs()
    flag.unlink()
    again = runner.invoke(cli, ["run", "--resume", run.id, "--store", _url(tmp_path), "--quiet", "--no-report"])
    assert again.exit_code == 0, again.output
    assert store.get_run(run.id).status == "completed" and [s.step for s in store.steps(run.id)] == [0, 1, 2]
    assert any(e.message.startswith("no checkpoint: restarting from step 0") for e in store.events(run.id))


def test_a_run_that_trained_a_step_and_then_failed_keeps_the_continue_hint(toy_site, toy_recipe, tmp_path):
    # steps 3, checkpoint every 2, evaluation every 2: steps 0 and 1 and their checkpoint, then the evaluation fails
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "settings.toy.fail_in=evaluate",
                                      "evaluation.before_training=false", "--quiet"])
    assert result.exit_code == 2, result.output
    text = _text(result)
    store = RunStore(_url(tmp_path))
    (run,) = store.list_runs()
    assert run.status == "failed" and len(store.steps(run.id)) == 2 and len(store.checkpoints(run.id)) == 1
    assert (f"The run {run.id} is marked failed; after fixing the cause, continue it with "
            f"`seal-platform run --resume {run.id} --store {_url(tmp_path)}`.") in text, text
    assert "before it trained anything" not in text and "as a new run" not in text, text


def test_a_run_that_trained_a_step_without_a_checkpoint_keeps_the_continue_hint(toy_site, toy_recipe, tmp_path):
    recipe = yaml.safe_load(toy_recipe.read_text())
    recipe["training"]["checkpoint_every"] = 0
    toy_recipe.write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "settings.toy.fail_in=evaluate",
                                      "evaluation.before_training=false", "--quiet"])
    assert result.exit_code == 2, result.output
    store = RunStore(_url(tmp_path))
    (run,) = store.list_runs()
    assert len(store.steps(run.id)) == 2 and store.checkpoints(run.id) == []
    assert f"The run {run.id} is marked failed; after fixing the cause, continue it with" in _text(result)
