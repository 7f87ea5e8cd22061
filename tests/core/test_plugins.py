"""The plugin manager factory: entry points loaded one by one; broken, blocked, duplicate and required plugins."""

from __future__ import annotations

import pytest

from seal_platform.errors import PluginError, SealError
from seal_platform.plugins import make_plugin_manager

from .conftest import RAISING_REGISTRATION, make_dist

GOOD = """
from seal_platform.hookspecs import hookimpl

@hookimpl
def diagnose(ctx, trajectories):
    return []
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    make_dist(root, "seal-good", "1.2.0", {"good": "good_plugin"}, {"good_plugin.py": GOOD})
    make_dist(root, "seal-broken", "0.0.1", {"broken": "broken_plugin"},
              {"broken_plugin.py": "raise ImportError('needs libfoo, which is not installed')\n"})
    make_dist(root, "seal-good-fork", "9.9.9", {"good": "good_fork_plugin"}, {"good_fork_plugin.py": GOOD})
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    monkeypatch.delenv("SEAL_PLATFORM_BLOCK_PLUGINS", raising=False)
    return root


def _records(host):
    return {(r.name, r.distribution): r for r in host.records}


def test_broken_plugin_is_reported_and_skipped(site):
    host = make_plugin_manager(allow=["good", "broken"])
    broken = _records(host)[("broken", "seal-broken")]
    assert broken.status == "failed" and broken.version == "0.0.1"
    assert "ImportError: needs libfoo" in broken.error
    assert host.is_loaded("good") and not host.is_loaded("broken")
    assert _records(host)[("good", "seal-good")].hooks == ["diagnose"]


def test_broken_plugin_named_by_the_recipe_stops_with_its_error(site):
    with pytest.raises(
        PluginError, match="depends on plugin 'broken', which failed to load: ImportError: needs libfoo"
    ):
        make_plugin_manager(allow=["good", "broken"], required=["broken"])


def test_duplicate_name_keeps_the_first_and_reports_the_second(site):
    host = make_plugin_manager(allow=["good"])
    statuses = sorted((r.distribution, r.status) for r in host.records if r.name == "good")
    assert statuses == [("seal-good", "loaded"), ("seal-good-fork", "duplicate")] or statuses == [
        ("seal-good", "duplicate"), ("seal-good-fork", "loaded")]
    dup = next(r for r in host.records if r.status == "duplicate")
    assert "already loaded" in dup.error


def test_block_by_recipe_and_by_environment(site, monkeypatch):
    host = make_plugin_manager(allow=["good", "broken"], block=["broken"])
    assert _records(host)[("broken", "seal-broken")].status == "blocked"
    monkeypatch.setenv("SEAL_PLATFORM_BLOCK_PLUGINS", "good, broken")
    host = make_plugin_manager(allow=["good", "broken"])
    assert {r.status for r in host.records if r.name in ("good", "broken")} == {"blocked"}
    with pytest.raises(PluginError, match="plugin 'good', which is blocked by SEAL_PLATFORM_BLOCK_PLUGINS"):
        make_plugin_manager(allow=["good"], required=["good"])


def test_allow_by_environment(site, monkeypatch):
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "broken")
    host = make_plugin_manager()
    assert not host.is_loaded("good")
    assert {r.status for r in host.records if r.name == "good"} == {"not-allowed"}


def test_a_plugin_left_out_by_an_allow_list_is_explained_in_a_sentence(site, monkeypatch):
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "broken")
    with pytest.raises(PluginError) as info:
        make_plugin_manager(required=["good"])
    assert str(info.value) == ("the recipe depends on plugin 'good', which is not allowed by SEAL_PLATFORM_PLUGINS "
                               "(it lists only broken).")
    # A name no plugin has (a typo) is said, with the installed names.
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "nope")
    with pytest.raises(PluginError) as info:
        make_plugin_manager(required=["good"])
    text = str(info.value)
    assert text.startswith("the recipe depends on plugin 'good', which is not allowed by SEAL_PLATFORM_PLUGINS "
                           "(it lists only nope; no installed plugin is called 'nope'; installed plugins: "), text
    assert "broken, " in text and "good" in text.split("installed plugins:")[1]
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS")
    with pytest.raises(
        PluginError, match=r"plugin 'good', which is not allowed by plugins.allow \(it lists only broken\)\.$"
    ):
        make_plugin_manager(allow=["broken"], required=["good"])
    with pytest.raises(PluginError, match=r"plugin 'good', which is blocked by plugins.block\.$"):
        make_plugin_manager(block=["good"], required=["good"])


def test_each_call_makes_an_independent_manager(site):
    first = make_plugin_manager(allow=["good"])
    first.pm.unregister(name="good")
    second = make_plugin_manager(allow=["good"])
    assert second.is_loaded("good") and not first.is_loaded("good")


def test_registration_conflicts_are_errors(site):
    from seal_platform.hookspecs import hookimpl
    from seal_platform.registry import EnvironmentSpec

    class A:
        @hookimpl
        def register_environments(self):
            return [EnvironmentSpec("bench", lambda ctx: None)]

    host = make_plugin_manager(allow=[], extra=[("a", A()), ("b", A())])
    # Left out of the registry (a command that does not use it goes on); what uses it names both plugins.
    assert host.environments() == {} and list(host.clashes("environments")) == ["bench"]
    with pytest.raises(SealError, match="environment 'bench' is registered by more than one plugin: 'a' and 'b'"):
        host.require("environment", "bench")


GARBAGE = """
from seal_platform.hookspecs import hookimpl

@hookimpl
def register_environments():
    return "not a list"

@hookimpl
def register_diagnosers():
    return [42]

@hookimpl
def register_settings():
    return {"garbage": int}

@hookimpl
def register_metrics():
    return {"loss": "the loss"}
"""


PROVIDER = """
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec

@hookimpl
def register_environments():
    return [EnvironmentSpec("bench", lambda ctx: None)]

@hookimpl
def register_diagnosers():
    return [DiagnoserSpec("judge")]

@hookimpl
def diagnose(ctx, trajectories):
    return []
"""


@pytest.fixture
def bad_site(site):
    make_dist(site, "seal-garbage", "0.1", {"garbage": "garbage_plugin"}, {"garbage_plugin.py": GARBAGE})
    make_dist(site, "seal-raises", "0.2", {"raises": "raises_plugin"}, {"raises_plugin.py": RAISING_REGISTRATION})
    make_dist(site, "seal-provider", "1.0", {"provider": "provider_plugin"}, {"provider_plugin.py": PROVIDER})
    return site


def test_registration_hooks_returning_the_wrong_types_fail_their_plugin(bad_site):
    host = make_plugin_manager(allow=["good", "garbage", "provider"])
    garbage = _records(host)[("garbage", "seal-garbage")]
    assert garbage.status == "failed" and not host.is_loaded("garbage")
    # Every wrong answer is named: the hook and what it returned.
    assert "register_environments returned 'not a list' (type str), not a list of EnvironmentSpec" in garbage.error
    assert "register_diagnosers returned [42]: 42 (type int) is not a DiagnoserSpec" in garbage.error
    assert "register_settings returned {'garbage': <class 'int'>}: section 'garbage' maps to <class 'int'>, " \
        "not a pydantic model class" in garbage.error
    assert "register_metrics returned {'loss': 'the loss'} (type dict), not a list of MetricSpec" in garbage.error
    assert [r.name for r in host.failed() if r.status == "failed"] == ["garbage"]
    assert "'garbage' (seal-garbage)" in host.failure_note()
    # The others are not affected.
    assert list(host.environments()) == ["bench"] and list(host.diagnosers()) == ["judge"]
    assert "garbage" not in host.settings_models() and host.is_loaded("good")


@pytest.mark.parametrize(("hook", "returned", "said"), [
    ("register_rollout_engines", "[EnvironmentSpec('e', print)]", "(type EnvironmentSpec) is not a EngineSpec"),
    ("register_executors", "ExecutorSpec('x', print)", "(type ExecutorSpec), not a list of ExecutorSpec"),
    ("register_clusters", "[None]", "None (type NoneType) is not a ClusterSpec"),
    ("register_environments", "{'e': EnvironmentSpec('e', print)}", "(type dict), not a list of EnvironmentSpec"),
    ("register_diagnosers", "[DiagnoserSpec(3)]", "whose name is not a non-empty string"),
    ("register_settings", "[('s', BaseModel)]", "(type list), not a dict of settings section name"),
    ("register_metrics", "MetricSpec('loss')", "(type MetricSpec), not a list of MetricSpec"),
    ("register_metrics", "[MetricSpec('loss'), DiagnoserSpec('d')]", "(type DiagnoserSpec) is not a MetricSpec"),
    ("register_metrics", "[MetricSpec('')]", "whose name is not a non-empty string"),
])
def test_each_registration_hook_checks_what_it_returns(site, hook, returned, said):
    from seal_platform.hookspecs import hookimpl
    from seal_platform.registry import (  # noqa: F401
        ClusterSpec,
        DiagnoserSpec,
        EngineSpec,
        EnvironmentSpec,
        ExecutorSpec,
        MetricSpec,
    )

    namespace = {"BaseModel": __import__("pydantic").BaseModel, **locals()}

    class Wrong:
        pass

    setattr(Wrong, hook, hookimpl(lambda self: eval(returned, namespace)))
    host = make_plugin_manager(allow=["good"], extra=[("wrong", Wrong())])
    wrong = next(r for r in host.records if r.name == "wrong")
    assert wrong.status == "failed" and not host.is_loaded("wrong")
    assert wrong.error.startswith(f"{hook} returned ") and said in wrong.error, wrong.error
    for listing in (host.settings_models, host.environments, host.engines, host.diagnosers, host.executors,
                    host.clusters):
        assert listing() == {}
    assert host.metric_specs() == []


def test_register_metrics_that_raises_fails_its_plugin_and_the_others_declarations_are_shown(site):
    from seal_platform.hookspecs import hookimpl
    from seal_platform.present.metrics import MetricCatalog
    from seal_platform.registry import EnvironmentSpec, MetricSpec

    class Raises:
        @hookimpl
        def register_metrics(self):
            raise RuntimeError("no metrics today")

        @hookimpl
        def register_environments(self):
            return [EnvironmentSpec("bench", lambda ctx: None)]

    class Declares:
        @hookimpl
        def register_metrics(self):
            return [MetricSpec("opt_steps", "optimizer steps", role="updates")]

    host = make_plugin_manager(allow=["good"], extra=[("raises", Raises()), ("declares", Declares())])
    raises = next(r for r in host.records if r.name == "raises")
    # Failed at load, as a plugin whose register_environments raises is: recorded with the reason, left out
    # whole (its environment too), named where a recipe needs what it would have provided.
    assert raises.status == "failed" and not host.is_loaded("raises") and raises.hooks == []
    assert raises.error.startswith("register_metrics raised RuntimeError: no metrics today (at "), raises.error
    assert host.environments() == {} and "'raises' (no distribution): register_metrics raised" in host.failure_note()
    # The others' declarations are read as they were at load.
    assert [s.name for s in host.metric_specs()] == ["opt_steps"] and host.is_loaded("declares")
    assert MetricCatalog.from_host(host).name_of("updates") == "opt_steps"


def test_metric_declarations_are_read_in_the_order_pluggy_calls_the_plugins(site):
    from seal_platform.hookspecs import hookimpl
    from seal_platform.present.metrics import MetricCatalog
    from seal_platform.registry import MetricSpec

    def declaring(label):
        class Declares:
            @hookimpl
            def register_metrics(self):
                return [MetricSpec("loss", label=label, role="update"), MetricSpec(f"{label}_only")]
        return Declares()

    host = make_plugin_manager(allow=[], extra=[("first", declaring("first")), ("second", declaring("second"))])
    called = [name for name, _ in host.call_per_plugin("register_metrics")]
    assert called == ["second", "first"]
    assert [s.name for s in host.metric_specs()] == ["loss", "second_only", "loss", "first_only"]
    # A name declared twice keeps the declaration of the plugin called first.
    catalog = MetricCatalog.from_host(host)
    assert catalog.get("loss").label == "second" and catalog.get("first_only") is not None


def test_a_registration_hook_that_raises_fails_its_plugin_like_an_import_error(bad_site, monkeypatch):
    host = make_plugin_manager(allow=["good", "raises", "provider"])
    raises = _records(host)[("raises", "seal-raises")]
    assert raises.status == "failed" and not host.is_loaded("raises") and not host.implements("raises", "optimize")
    assert raises.error.startswith("register_environments raised RuntimeError: boom in register_environments (at ")
    assert raises.hooks == []
    # Commands that do not need it go on: what the others register is all there.
    assert host.require("benchmark", "bench")[0] == "provider"
    # What needs it says why it is unavailable.
    problem = host.missing("environment", "raised-env")
    assert problem is not None and "'raises' (seal-raises): register_environments raised RuntimeError" in problem[1]
    with pytest.raises(PluginError, match="depends on plugin 'raises', which failed to load: register_environments "
                                          "raised RuntimeError: boom in register_environments"):
        make_plugin_manager(allow=["good", "raises"], required=["raises"])


def test_a_registration_hook_is_read_once_so_a_later_answer_changes_nothing(site):
    from seal_platform.hookspecs import hookimpl

    class Fickle:
        answers = [[], [42]]

        @hookimpl
        def register_diagnosers(self):
            return self.answers.pop(0)

    host = make_plugin_manager(allow=[], extra=[("fickle", Fickle())])
    assert host.is_loaded("fickle")
    # The registries answer from what was read and checked at load: the hook is not asked again.
    assert host.diagnosers() == {} and host.diagnosers() == {} and Fickle.answers == [[42]]


def test_the_cli_lists_a_plugin_with_bad_registrations_as_failed(bad_site):
    import json

    from click.testing import CliRunner

    from seal_platform.cli import cli

    result = CliRunner().invoke(
        cli, ["plugins", "--json"], env={"SEAL_PLATFORM_PLUGINS": "good,garbage,raises,provider"}
    )
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["garbage"]["status"] == "failed" and "register_diagnosers returned [42]" in rows["garbage"]["error"]
    assert "register_metrics returned {'loss': 'the loss'}" in rows["garbage"]["error"]
    assert rows["raises"]["status"] == "failed" and "boom in register_environments" in rows["raises"]["error"]
    assert rows["provider"]["provides"] == ["environment:bench", "diagnoser:judge"]
    result = CliRunner().invoke(cli, ["labels"], env={"SEAL_PLATFORM_PLUGINS": "good,garbage,raises,provider"})
    assert result.exit_code == 0, result.output


EXITING = """
import sys

sys.exit("plugin called sys.exit at import")
"""


def test_a_plugin_calling_sys_exit_at_import_is_failed_and_named(site):
    make_dist(site, "seal-exits", "0.4", {"exits": "exits_plugin"}, {"exits_plugin.py": EXITING})
    host = make_plugin_manager(allow=["good", "exits"])
    exits = _records(host)[("exits", "seal-exits")]
    assert exits.status == "failed" and not host.is_loaded("exits") and host.is_loaded("good")
    assert exits.error.startswith("raised SystemExit('plugin called sys.exit at import') at import (at ")
    assert "exits_plugin.py:4)" in exits.error
    with pytest.raises(PluginError, match=r"depends on plugin 'exits', which failed to load: raised SystemExit\("):
        make_plugin_manager(allow=["good", "exits"], required=["exits"])


def test_every_command_still_runs_beside_a_plugin_that_exits_at_import(site):
    import os
    import subprocess
    import sys

    make_dist(site, "seal-exits", "0.4", {"exits": "exits_plugin"}, {"exits_plugin.py": EXITING})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "SEAL_PLATFORM_PLUGINS": "good,exits"}
    for args in (["--help"], ["plugins"]):
        done = subprocess.run([sys.executable, "-m", "seal_platform", *args], capture_output=True, text=True,
                              env=env, cwd=site, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "plugin called sys.exit" not in done.stdout + done.stderr or args == ["plugins"]
    # `plugins` names it, with what it did (it used to print only the plugin's own text, and exit 1).
    assert "exits" in done.stdout and "SystemExit('plugin called sys.exit at import') at import" in " ".join(
        (done.stdout + done.stderr).split()
    )


class _Exits:
    """A plugin whose registration hooks (or settings model, or commands) call sys.exit."""

    def __init__(self, hook: str) -> None:
        from seal_platform.hookspecs import hookimpl

        def exits(*args, **kwargs):
            raise SystemExit(4)

        if hook == "settings model":
            from pydantic import BaseModel, field_validator

            class Settings(BaseModel):
                level: int = 1

                @field_validator("level")
                @classmethod
                def leave(cls, value):
                    raise SystemExit(5)

            Settings.model_config["validate_default"] = True
            Settings.model_rebuild(force=True)
            self.register_settings = hookimpl(lambda: {"exits": Settings})
        elif hook == "register_commands":
            self.register_commands = hookimpl(lambda cli: exits())
        else:
            setattr(self, hook, hookimpl(lambda: exits()))


@pytest.mark.parametrize(("hook", "said"), [
    ("register_environments", "register_environments raised SystemExit(4) (at "),
    ("register_diagnosers", "register_diagnosers raised SystemExit(4) (at "),
    ("register_metrics", "register_metrics raised SystemExit(4) (at "),
    ("settings model", "validating its defaults raised SystemExit(5) (at "),
])
def test_a_registration_hook_calling_sys_exit_fails_its_plugin(site, hook, said):
    host = make_plugin_manager(allow=["good"], extra=[("exits", _Exits(hook))])
    exits = next(r for r in host.records if r.name == "exits")
    assert exits.status == "failed" and not host.is_loaded("exits") and host.is_loaded("good")
    assert said in exits.error, exits.error


def test_register_commands_calling_sys_exit_fails_its_plugin(site):
    import click

    host = make_plugin_manager(allow=["good"], extra=[("exits", _Exits("register_commands"))])
    [failed] = host.register_commands(click.Group("seal-platform"))
    assert failed.name == "exits" and failed.error.startswith("register_commands raised SystemExit(4) (at ")


def test_a_keyboard_interrupt_at_import_still_stops_the_command(site):
    make_dist(site, "seal-interrupted", "0.1", {"interrupted": "interrupted_plugin"},
              {"interrupted_plugin.py": "raise KeyboardInterrupt\n"})
    with pytest.raises(KeyboardInterrupt):
        make_plugin_manager(allow=["good", "interrupted"])


def test_every_hookspec_has_a_full_docstring():
    import inspect

    from seal_platform import hookspecs

    specs = [f for name, f in vars(hookspecs).items() if inspect.isfunction(f) and hasattr(f, "seal_platform_spec")]
    names = {f.__name__ for f in specs}
    assert {"collect", "diagnose", "evolve_interface", "reweight", "optimize", "evaluate", "register_settings",
            "register_environments", "register_diagnosers", "register_rollout_engines"} <= names
    for f in specs:
        doc = inspect.getdoc(f) or ""
        assert "Called" in doc, f.__name__
        params = [p for p in inspect.signature(f).parameters]
        for p in params:
            assert f":param {p}:" in doc, (f.__name__, p)
        assert (":returns:" in doc) or ("Return value ignored" in doc), f.__name__
        assert ("result wins" in doc) or ("collected" in doc) or ("ignored" in doc), f.__name__


def test_core_never_imports_the_default_plugins():
    import ast
    from pathlib import Path

    import seal_platform

    root = Path(seal_platform.__file__).parent
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:  # relative ones stay in the core
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith(("seal_platform_plugins", "plugins")), f"{path} imports {name}"
