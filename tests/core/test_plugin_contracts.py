"""Plugin contracts the plugin manager enforces: implementations must match a spec (name and arguments), the
setup hooks go through pluggy, and a plugin that failed to load is named wherever it matters."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from seal_platform import hookimpl
from seal_platform.errors import ConfigError, PluginError
from seal_platform.planning import load_recipe, plan_config, plan_recipe
from seal_platform.plugins import make_plugin_manager
from seal_platform.registry import EnvironmentSpec

from .conftest import RAISING_REGISTRATION, make_dist


class Misspelt:
    @hookimpl
    def save_checkpoints(self, ctx, directory, step):  # the spec is save_checkpoint
        return {}

    @hookimpl
    def diagnose(self, trajectories):
        return []


class WrongArguments:
    @hookimpl
    def collect(self, ctx, batch):  # the spec has no `batch`
        return []


class Optional:
    @hookimpl(optionalhook=True)
    def my_own_extension_point(self):
        return 1

    @hookimpl
    def diagnose(self, trajectories):
        return []


def _record(host, name):
    return next(r for r in host.records if r.name == name)


def test_a_misspelt_hook_fails_its_plugin_with_the_reason(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = make_plugin_manager(allow=[], extra=[("typo", Misspelt()), ("fine", Optional())])
    typo = _record(host, "typo")
    assert typo.status == "failed"
    assert "'save_checkpoints' matches no hook spec (did you mean 'save_checkpoint'?)" in typo.error
    # Left out whole: none of its hooks is called, so a run never half-uses it.
    assert not host.is_loaded("typo") and not host.implements("typo", "diagnose")
    assert host.is_loaded("fine") and host.implements("fine", "diagnose")
    assert [r.name for r in host.failed()] == ["typo"]


def test_arguments_that_match_no_spec_fail_the_plugin(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = make_plugin_manager(allow=[], extra=[("wrong", WrongArguments())])
    wrong = _record(host, "wrong")
    assert wrong.status == "failed" and not host.is_loaded("wrong")
    assert "does not match its spec" in wrong.error and "batch" in wrong.error


def test_setup_hooks_are_called_through_pluggy(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)

    class Provider:
        @hookimpl
        def register_environments(self):
            return [EnvironmentSpec("bench", lambda ctx: None)]

    host = make_plugin_manager(allow=[], extra=[("provider", Provider())])
    seen = []
    host.pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append((name, [i.plugin_name for i in impls])),
                                    lambda outcome, name, impls, kwargs: None)
    assert host.environments()["bench"][0] == "provider"
    assert ("register_environments", ["provider"]) in seen


def test_register_commands_adds_a_working_subcommand(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)

    class Commands:
        @hookimpl
        def register_commands(self, cli):
            @cli.command("hello")
            @click.argument("who")
            def hello(who):
                click.echo(f"hello {who}")

    host = make_plugin_manager(allow=[], extra=[("commands", Commands())])
    group = click.Group("seal-platform")
    host.hook.register_commands(cli=group)
    result = CliRunner().invoke(group, ["hello", "world"])
    assert result.exit_code == 0 and result.output == "hello world\n"


@pytest.fixture
def broken_site(toy_site, tmp_path, monkeypatch):
    make_dist(toy_site, "seal-kv", "0.1.0", {"kv": "kv_plugin"},
              {"kv_plugin.py": "raise ImportError('kv needs libkv, which is not installed')\n"})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return toy_site


def test_a_recipe_naming_what_a_failed_plugin_provides_gets_its_error(broken_site, toy_recipe):
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,kv]", "environment=kv", "settings.kv={}",
                                 "diagnosis.diagnosers=[kv]"])
    text = str(info.value)
    for where in ("environment:", "settings.kv:", "diagnosis.diagnosers:"):
        line = next(line for line in text.splitlines() if where in line)
        assert "'kv' (seal-kv): ImportError: kv needs libkv" in line, line


def test_environment_and_diagnoser_names_are_not_plugin_names(broken_site, toy_recipe):
    config, issues, path = load_recipe(toy_recipe, ["plugins.allow=[toy,kv]"])
    assert not issues
    # The recipe names an environment, an engine and diagnosers, none of them a plugin it requires by name.
    assert config.named_plugins() == {"toy"}
    plan = plan_config(config, str(path))
    assert plan.primary_diagnoser == "toy" and plan.diagnosers == ["toy"]


def test_every_run_names_the_plugins_that_failed_to_load(broken_site, toy_recipe):
    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=1", "plugins.allow=[toy,kv]", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning: plugin 'kv' (seal-kv) was not loaded: ImportError: kv needs libkv" in result.output
    # config validate names it too, whether the recipe is valid or not (a failed plugin may be why it is not).
    for extra, code in (([], 0), (["training.steps=-3"], 1)):
        result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), "plugins.allow=[toy,kv]", *extra])
        assert result.exit_code == code, result.output
        assert "warning: plugin 'kv' (seal-kv) was not loaded: ImportError: kv needs libkv" in result.output


def test_a_plugin_whose_registration_raises_is_skipped_unless_the_recipe_needs_it(toy_site, toy_recipe, monkeypatch):
    from seal_platform.cli import cli

    make_dist(toy_site, "seal-badreg", "0.1.0", {"badreg": "badreg_plugin"}, {"badreg_plugin.py": RAISING_REGISTRATION})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    # A recipe that does not need it plans (and runs) without it; the run names it with its error.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]"])
    assert plan.host is not None and not plan.host.is_loaded("badreg")
    assert _record(plan.host, "badreg").status == "failed"
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=1", "plugins.allow=[toy,badreg]", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning: plugin 'badreg' (seal-badreg) was not loaded: register_environments raised RuntimeError: " \
        "boom in register_environments" in result.output
    # One that names it gets why it is unavailable.
    with pytest.raises(PluginError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]", "stages.optimize=badreg"])
    assert "the recipe depends on plugin 'badreg', which failed to load: register_environments raised " \
        "RuntimeError: boom in register_environments" in str(info.value)
    with pytest.raises(ConfigError) as info:
        plan_recipe(toy_recipe, ["plugins.allow=[toy,badreg]", "environment=bad"])
    assert "'badreg' (seal-badreg): register_environments raised RuntimeError" in str(info.value)
    # verify scores with the plugins that loaded and says on stderr which did not (stdout stays the results).
    data = toy_recipe.parent / "in.jsonl"
    data.write_text('{"task_id": "a", "answer": 42}\n')
    result = CliRunner().invoke(cli, ["verify", "--benchmark", "toy", str(data)])
    assert result.exit_code == 0 and result.stdout.strip() == '{"task_id": "a", "success": true}', result.output
    assert "warning: plugin 'badreg' (seal-badreg) was not loaded" in result.stderr


OTHER_DIAGNOSERS = '''
from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec


@hookimpl
def register_diagnosers():
    return [DiagnoserSpec("elsewhere", environments=("not-toy",)), DiagnoserSpec("control", explicit=True),
            DiagnoserSpec("anywhere")]


@hookimpl
def diagnose(ctx, trajectories):
    return []
'''


@pytest.fixture
def other_site(toy_site, monkeypatch):
    make_dist(toy_site, "seal-other", "0.1.0", {"other": "other_plugin"}, {"other_plugin.py": OTHER_DIAGNOSERS})
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return toy_site


def test_the_core_enables_diagnosers_by_environment_and_passes_the_list(other_site, toy_recipe, tmp_path):
    from seal_platform.loop import Runner
    from seal_platform.store import RunStore

    # Default (null): every diagnoser but the explicit ones, of those that label the run's environment.
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]"])
    assert plan.diagnoser_names == ["anywhere", "toy"] and plan.diagnosers == ["other", "toy"]
    assert plan.primary_diagnoser == "toy"
    # Named: an explicit one runs; one for another environment is left out (it would label nothing).
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[elsewhere,toy,control]"])
    assert plan.diagnoser_names == ["toy", "control"] and plan.primary_diagnoser == "toy"
    # Plugins read the list from the run context the core builds.
    assert plan.host is not None
    runner = Runner(plan, plan.host, RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}"))
    assert runner.ctx.diagnosers == ["toy", "control"]
    runner.ctx.executor.close()
    plan = plan_recipe(toy_recipe, ["plugins.allow=[toy,other]", "diagnosis.diagnosers=[elsewhere]"])
    assert plan.diagnoser_names == [] and plan.diagnosers == [] and plan.primary_diagnoser is None
