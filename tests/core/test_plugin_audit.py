"""Defects a plugin-author audit found, each with the behaviour it asks for: real plugins (installed as
distributions next to the toy plugin, or registered directly) on a real plugin manager, no mocks.

1. a plugin whose ``register_commands`` raises is failed by name and the others' commands stay;
2. a name two plugins register fails only the recipes that use it, naming both;
3. a settings model with a required field fails its plugin at load, the reason naming the model;
5. unknown environment, engine, diagnoser and stage-owner names get a "did you mean";
6. ``seal-platform plugins`` fits 80 columns;
7. failing trackers and ``end_run`` hooks are said on the terminal, once a plugin;
8. each registration hook is called once per plugin.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from seal_platform import hookimpl
from seal_platform.errors import ConfigError
from seal_platform.planning import plan_recipe
from seal_platform.plugins import make_plugin_manager

from .conftest import make_dist


def _install(root, name: str, source: str) -> None:
    """Plugin ``name`` (module ``<name>_plugin``, distribution ``seal-<name>``) installed in site dir ``root``."""
    make_dist(root, f"seal-{name}", "0.1.0", {name: f"{name}_plugin"}, {f"{name}_plugin.py": source})
    sys.modules.pop(f"{name}_plugin", None)


def _record(host, name):
    return next(r for r in host.records if r.name == name)


# --- 1. register_commands -------------------------------------------------------------------------------

GOOD_COMMANDS = '''
import click
from seal_platform import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command("hello-good")
    @click.argument("who")
    def hello(who):
        click.echo(f"hello {who}")
'''

RAISING_COMMANDS = '''
from seal_platform import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command("half-bad")
    def half():
        pass

    raise RuntimeError("boom in register_commands")
'''


def test_a_plugin_whose_register_commands_raises_is_failed_and_the_others_commands_stay(tmp_path, monkeypatch,
                                                                                          capsys):
    from seal_platform import cli as cli_module

    # The good plugin's site comes first on sys.path, so it is registered first and called after the bad one.
    _install(tmp_path / "bad", "cmdbad", RAISING_COMMANDS)
    _install(tmp_path / "good", "cmdgood", GOOD_COMMANDS)
    monkeypatch.syspath_prepend(str(tmp_path / "bad"))
    monkeypatch.syspath_prepend(str(tmp_path / "good"))
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "cmdgood,cmdbad")
    before = dict(cli_module.cli.commands)
    try:
        group = cli_module.build_cli()
        err = capsys.readouterr().err
        assert "warning: plugin 'cmdbad' (seal-cmdbad) was not loaded and its commands are unavailable: " \
            "register_commands raised RuntimeError: boom in register_commands" in err, err
        result = CliRunner().invoke(group, ["hello-good", "world"])
        assert result.exit_code == 0 and result.output == "hello world\n", result.output
        assert "half-bad" not in group.commands  # what a failed plugin added before it raised is left out too
        result = CliRunner().invoke(group, ["plugins", "--json"])
        assert result.exit_code == 0, result.output
        rows = {row["name"]: row for row in json.loads(result.stdout)}
        assert rows["cmdbad"]["status"] == "failed"
        assert "register_commands raised RuntimeError: boom in register_commands" in rows["cmdbad"]["error"]
        assert rows["cmdgood"]["status"] == "loaded"
    finally:
        for name in set(cli_module.cli.commands) - set(before):
            cli_module.cli.commands.pop(name)


def test_a_plugin_command_named_like_an_existing_one_is_refused_and_the_others_are_added(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)

    class Takes:
        def __init__(self, name):
            self.name = name

        @hookimpl
        def register_commands(self, cli):
            cli.command(self.name)(lambda: click.echo(self.name))

    host = make_plugin_manager(allow=[], extra=[("one", Takes("one-cmd")), ("thief", Takes("core")),
                                                 ("other", Takes("other-cmd"))])
    group = click.Group("seal-platform")
    group.command("core")(lambda: click.echo("core"))
    failed = host.register_commands(group)
    assert [r.name for r in failed] == ["thief"] and not host.is_loaded("thief")
    assert "register_commands adds command(s) named like existing ones: 'core' (a core command)" in failed[0].error
    assert CliRunner().invoke(group, ["core"]).output == "core\n"
    assert sorted(group.commands) == ["core", "one-cmd", "other-cmd"]
    # The CLI built again in the same process: each plugin replaces its own commands, no clash with itself.
    again = make_plugin_manager(allow=[], extra=[("one", Takes("one-cmd")), ("other", Takes("other-cmd"))])
    assert again.register_commands(group) == [] and sorted(group.commands) == ["core", "one-cmd", "other-cmd"]


# --- 2. a name two plugins register ---------------------------------------------------------------------

TWIN = '''
from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec


@hookimpl
def register_environments():
    return [EnvironmentSpec("twin", lambda ctx: None)]


@hookimpl
def register_diagnosers():
    return [DiagnoserSpec("twin-judge", environments=("twin",)), DiagnoserSpec("everywhere")]


@hookimpl
def diagnose(ctx, trajectories):
    return []


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    return []


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    return None
'''


@pytest.fixture
def twins(toy_site, monkeypatch):
    _install(toy_site, "twina", TWIN)
    _install(toy_site, "twinb", TWIN)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return toy_site


def test_a_name_two_plugins_register_is_a_problem_only_for_the_recipes_that_use_it(twins, toy_recipe):
    allow = "plugins.allow=[toy,twina,twinb]"
    # Neither the environment nor the diagnosers named: the plan is made with the toy's.
    plan = plan_recipe(toy_recipe, [allow, "diagnosis.diagnosers=[toy]"])
    assert plan.env_owner == "toy" and plan.diagnoser_names == ["toy"]
    # The environment and a diagnoser several plugins register: each a problem naming both plugins.
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, [allow, "environment=twin", "diagnosis.diagnosers=[toy,twin-judge]"])
    text = str(info.value)
    for where, what in (("environment", "environment 'twin'"), ("diagnosis.diagnosers", "diagnoser 'twin-judge'")):
        line = next(line for line in text.splitlines() if f"{where}:" in line)
        assert f"{what} is registered by more than one plugin: 'twina' (seal-twina) and 'twinb' (seal-twinb)" in line
        assert "block all but one of them" in line
    # diagnosis.diagnosers null enables every non-explicit diagnoser of the environment: a shared one among
    # them is a problem too, and the hint says how to leave it out.
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, [allow])
    line = next(line for line in str(info.value).splitlines() if "diagnosis.diagnosers:" in line)
    assert "diagnoser 'everywhere' is registered by more than one plugin" in line
    assert "list the diagnosers to run in diagnosis.diagnosers" in line
    assert "twin-judge" not in str(info.value)  # it labels only 'twin': not this recipe's


def test_plugins_json_lists_each_plugins_names_and_the_clash(twins):
    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["plugins", "--json"], env={"SEAL_PLATFORM_PLUGINS": "toy,twina,twinb"})
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for name, other in (("twina", "twinb"), ("twinb", "twina")):
        assert rows[name]["provides"] == ["environment:twin", "diagnoser:twin-judge", "diagnoser:everywhere"]
        assert f"environment:twin (also registered by '{other}')" in rows[name]["clashes"]
        assert f"diagnoser:twin-judge (also registered by '{other}')" in rows[name]["clashes"]
    assert rows["toy"]["provides"][0] == "environment:toy" and rows["toy"]["clashes"] == []
    result = CliRunner().invoke(cli, ["plugins"], env={"SEAL_PLATFORM_PLUGINS": "toy,twina,twinb"})
    assert result.exit_code == 0
    assert "clash: environment:twin (also registered by 'twinb')" in " ".join(result.output.split())


# --- 3. a settings model with a required field ------------------------------------------------------------

REQUIRED_SETTING = '''
from pydantic import BaseModel

from seal_platform import hookimpl


class ReqSettings(BaseModel):
    endpoint: str
    retries: int = 3


@hookimpl
def register_settings():
    return {"reqset": ReqSettings}
'''


def test_a_settings_model_with_a_required_field_fails_its_plugin_not_every_recipe(toy_site, toy_recipe, monkeypatch):
    _install(toy_site, "reqset", REQUIRED_SETTING)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    # A recipe that does not use it plans without it; the plugin is failed, the reason naming the model.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,reqset]"])
    assert plan.host is not None and not plan.host.is_loaded("reqset")
    record = _record(plan.host, "reqset")
    assert record.status == "failed"
    assert "register_settings: the settings model reqset_plugin.ReqSettings of section 'reqset' cannot be built for " \
        "a recipe that leaves the section out (field(s) without a default: endpoint); a plugin's settings model " \
        "must give every field a default" in record.error
    # One that sets the section is told which plugin failed and why, not that its own keys are wrong.
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,reqset]", "settings.reqset={endpoint: http://x}"])
    line = next(line for line in str(info.value).splitlines() if "settings.reqset" in line)
    assert "no loaded plugin owns this section" in line and "'reqset' (seal-reqset): register_settings: the " \
        "settings model reqset_plugin.ReqSettings" in line


# --- 5. did you mean ------------------------------------------------------------------------------------


def test_unknown_names_in_a_recipe_get_a_did_you_mean(toy_site, toy_recipe):
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["environment=toyy", "rollout.engine=toy-engin", "diagnosis.diagnosers=[toyy]",
                                 "stages.optimize=toyy"])
    lines = str(info.value).splitlines()
    for where, meant in (("environment", "toy"), ("rollout.engine", "toy-engine"), ("diagnosis.diagnosers", "toy"),
                         ("stages.optimize", "toy")):
        line = next(line for line in lines if f"{where}:" in line)
        assert f"did you mean {meant!r}?" in line, line
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["diagnosis.primary=toyy"])
    line = next(line for line in str(info.value).splitlines() if "diagnosis.primary:" in line)
    assert "diagnoser 'toyy' is not enabled" in line and "did you mean 'toy'?" in line, line
    # Nothing close: no guess, the registered names as before.
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["environment=unrelated"])
    line = next(line for line in str(info.value).splitlines() if "environment:" in line)
    assert "did you mean" not in line and "registered environments: toy" in line


# --- 6. seal-platform plugins at 80 columns -------------------------------------------------------------


def test_the_plugins_table_is_readable_at_80_columns():
    import os

    env = {**os.environ, "COLUMNS": "80"}
    env.pop("SEAL_PLATFORM_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "seal_platform", "plugins"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in proc.stdout  # nothing cut short
    listed = json.loads(subprocess.run([sys.executable, "-m", "seal_platform", "plugins", "--json"],
                                       capture_output=True, text=True, env=env, timeout=120).stdout)
    words = proc.stdout.replace("\n", " ")
    for row in listed:
        assert row["name"] in words
        # Every name a plugin provides is shown whole (its table cell wraps between entries, not inside one).
        for item in row["provides"]:
            assert item.split(":", 1)[1] in words, item
        assert set(row) == {"name", "distribution", "version", "status", "error", "hooks", "provides", "clashes"}
    # One plugin in full: every hook, the registration ones too.
    proc = subprocess.run([sys.executable, "-m", "seal_platform", "plugins", "policy_engines"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    assert "register_rollout_engines" in proc.stdout and "entry point" in proc.stdout


# --- 7. failing trackers and end_run hooks on the terminal ------------------------------------------------

FLAKY = '''
from seal_platform import hookimpl


@hookimpl
def track(ctx, event):
    raise RuntimeError("tracker down")


@hookimpl
def end_run(ctx, status):
    raise RuntimeError("cannot flush")
'''


def test_failing_trackers_and_end_run_hooks_are_said_once_a_plugin_and_the_run_stays_completed(toy_site, toy_recipe,
                                                                                                monkeypatch):
    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    _install(toy_site, "flaky", FLAKY)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=2", "plugins.allow=[toy,flaky]",
                                      "--quiet", "--no-report"])
    assert result.exit_code == 0, result.output
    tracker = [line for line in result.output.splitlines() if line.startswith("warning: tracker 'flaky'")]
    ended = [
        line for line in result.output.splitlines() if line.startswith("warning: plugin 'flaky' failed in 'end_run'")
    ]
    assert len(tracker) == 1 and len(ended) == 1, result.output
    assert "RuntimeError: tracker down" in tracker[0] and "more failure(s) of it" in tracker[0]
    assert "RuntimeError: cannot flush" in ended[0]
    # The run is completed, and the other plugin's end_run ran too.
    [run] = RunStore(f"sqlite:///{toy_recipe.parent / 'runs' / 'store.sqlite'}").list_runs()
    assert run.status == "completed" and f"run {run.id} (toy): completed" in result.output
    assert "end_run:completed" in sys.modules["toy_plugin"].plugin.calls


# --- 8. registration hooks called once ------------------------------------------------------------------

COUNTING = '''
from pydantic import BaseModel

from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec

calls = []


class CountSettings(BaseModel):
    level: int = 1


@hookimpl
def register_settings():
    calls.append("register_settings")
    return {"counting": CountSettings}


@hookimpl
def register_environments():
    calls.append("register_environments")
    return [EnvironmentSpec("counted", lambda ctx: None)]


@hookimpl
def register_diagnosers():
    calls.append("register_diagnosers")
    return [DiagnoserSpec("counted", environments=("counted",))]


@hookimpl
def diagnose(ctx, trajectories):
    return []
'''


def test_each_registration_hook_is_called_once_per_plugin(toy_site, toy_recipe, monkeypatch, tmp_path):
    from seal_platform.loop import run_plan
    from seal_platform.store import RunStore

    _install(toy_site, "counting", COUNTING)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,counting]", "training.steps=1"])
    counting = sys.modules["counting_plugin"]
    assert sorted(counting.calls) == ["register_diagnosers", "register_environments", "register_settings"]
    run_plan(plan, RunStore(f"sqlite:///{tmp_path / 'count.sqlite'}"))
    assert sorted(counting.calls) == ["register_diagnosers", "register_environments", "register_settings"]
    assert plan.settings["counting"].level == 1 and plan.host is not None
    assert plan.host.environments()["counted"][0] == "counting"
    # `seal-platform run` checks the recipe, then plans and runs it, with one load of the plugins.
    from seal_platform.cli import cli

    del counting.calls[:]
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=1", "plugins.allow=[toy,counting]",
                                      "--quiet", "--no-report"])
    assert result.exit_code == 0, result.output
    assert sorted(counting.calls) == ["register_diagnosers", "register_environments", "register_settings"]
