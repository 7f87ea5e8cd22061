"""A plugin calling ``sys.exit`` in a hook the core calls plugin by plugin (check_config, check_machine, end_run)
fails only itself, named, as an error in the hook does; and ``seal-platform verify`` says which plugin's
environment could not be built (or started), with exit status 2, instead of a traceback or a silent exit."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from seal_platform import hookimpl
from seal_platform.errors import PluginError
from seal_platform.plugins import PluginExit, make_plugin_manager

from .conftest import make_dist


class Exits:
    @hookimpl
    def check_config(self, config, settings, cluster):
        sys.exit(3)


class Interrupted:
    @hookimpl
    def check_config(self, config, settings, cluster):
        raise KeyboardInterrupt


class Fine:
    @hookimpl
    def check_config(self, config, settings, cluster):
        return ["fine's answer"]


def _host(*plugins):
    return make_plugin_manager(allow=[], extra=list(plugins))


def test_a_plugin_calling_sys_exit_in_a_hook_fails_only_itself_and_is_named(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = _host(("exits", Exits()), ("fine", Fine()))
    # With `failed`: the exiting plugin's answer is its failure; the other plugin is still called.
    answers = dict(host.call_per_plugin("check_config", failed=lambda name, exc: exc, config=None, settings={},
                                        cluster=None))
    assert answers["fine"] == ["fine's answer"]
    failure = answers["exits"]
    assert isinstance(failure, PluginExit) and isinstance(failure.__cause__, SystemExit)
    assert str(failure).startswith("it called sys.exit(3) (at ") and "test_plugin_exits.py:" in str(failure)
    # Without: a PluginError naming the plugin and the hook, not the end of the process.
    with pytest.raises(PluginError, match=r"^plugin 'exits' failed in 'check_config': PluginExit: it called "
                                          r"sys\.exit\(3\) \(at "):
        host.call_per_plugin("check_config", config=None, settings={}, cluster=None)
    # A Ctrl-C in a plugin is still the user's: it goes on up, `failed` or not.
    host = _host(("interrupted", Interrupted()), ("fine", Fine()))
    with pytest.raises(KeyboardInterrupt):
        host.call_per_plugin("check_config", failed=lambda name, exc: exc, config=None, settings={}, cluster=None)


EXITS_IN_CHECK_CONFIG = '''
import sys

from seal_platform import hookimpl


@hookimpl
def check_config(config, settings, cluster):
    sys.exit(3)
'''


def _install(site, name: str, source: str, monkeypatch) -> None:
    """Install plugin ``name`` (module ``<name>_plugin`` from ``source``) next to the toy plugin."""
    make_dist(site, f"seal-{name}", "0.1.0", {name: f"{name}_plugin"}, {f"{name}_plugin.py": source})
    sys.modules.pop(f"{name}_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)


def test_config_validate_names_a_check_config_that_calls_sys_exit_with_the_other_problems(toy_site, toy_recipe,
                                                                                           monkeypatch):
    from seal_platform.cli import cli

    _install(toy_site, "exiter", EXITS_IN_CHECK_CONFIG, monkeypatch)
    result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), "plugins.allow=[toy,exiter]",
                                      "training.steps=-3"])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "plugin 'exiter' failed in 'check_config': PluginExit: it called sys.exit(3)" in said
    assert "training.steps" in said and "Traceback" not in said


BROKEN_ENVIRONMENT = '''
import sys

from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec
from seal_platform.types import Interface


class Env:
    name = "brittle"

    def tasks(self, split):
        return []

    def pristine_interface(self):
        return Interface()

    def verify_record(self, record):
        return {"task_id": record["task_id"], "success": True}


def build(ctx):
    if HOW == "raise":
        raise ValueError("the benchmark's data is not there")
    if HOW == "exit":
        sys.exit(5)
    return Env()


@hookimpl
def register_environments():
    return [EnvironmentSpec("brittle", build)]


@hookimpl
def start_run(ctx, resumed):
    if HOW == "start":
        raise RuntimeError("no licence server")


@hookimpl
def end_run(ctx, status):
    if HOW == "end":
        sys.exit(4)
'''


def _verify(toy_site, tmp_path, monkeypatch, how: str):
    from seal_platform.cli import cli

    _install(toy_site, "brittle", BROKEN_ENVIRONMENT.replace("HOW", repr(how)), monkeypatch)
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "toy,brittle")
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1"}) + "\n")
    return CliRunner().invoke(cli, ["verify", "--benchmark", "brittle", str(data)])


@pytest.mark.parametrize("how, said", [
    ("raise", "benchmark 'brittle' (plugin 'brittle') cannot run: building its environment raised ValueError: the "
              "benchmark's data is not there (at "),
    ("exit", "benchmark 'brittle' (plugin 'brittle') cannot run: building its environment raised SystemExit(5) (at "),
    ("start", "benchmark 'brittle' (plugin 'brittle') cannot run: its start_run hook raised RuntimeError: no licence "
              "server (at "),
])
def test_verify_says_which_plugin_could_not_build_or_start_its_environment(toy_site, tmp_path, monkeypatch, how, said):
    result = _verify(toy_site, tmp_path, monkeypatch, how)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""  # nothing was scored
    assert said in " ".join(result.stderr.split()) and "brittle_plugin.py:" in result.stderr
    assert "Traceback" not in result.output


def test_verify_names_an_end_run_that_calls_sys_exit_after_writing_every_line(toy_site, tmp_path, monkeypatch):
    result = _verify(toy_site, tmp_path, monkeypatch, "end")
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"task_id": "t1", "success": True}]
    said = " ".join(result.stderr.split())
    assert "plugin 'brittle' failed in 'end_run': PluginExit: it called sys.exit(4) (at " in said
    assert "Traceback" not in result.output
    # The same plugin, well-behaved, verifies with exit status 0 (what the cases above change is the plugin).
    result = _verify(toy_site, tmp_path, monkeypatch, "nothing")
    assert result.exit_code == 0 and result.stderr == "", result.output
