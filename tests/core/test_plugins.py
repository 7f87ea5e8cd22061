"""The plugin manager factory: entry points loaded one by one; broken, blocked, duplicate and required plugins."""

from __future__ import annotations

import pytest

from seal_platform.errors import PluginError
from seal_platform.plugins import make_plugin_manager

from .conftest import make_dist

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
    with pytest.raises(PluginError, match="depends on plugin 'broken' is failed: ImportError: needs libfoo"):
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
    with pytest.raises(PluginError, match="'good' is blocked"):
        make_plugin_manager(allow=["good"], required=["good"])


def test_allow_by_environment(site, monkeypatch):
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "broken")
    host = make_plugin_manager()
    assert not host.is_loaded("good")
    assert {r.status for r in host.records if r.name == "good"} == {"not-allowed"}


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
    with pytest.raises(PluginError, match="environment 'bench' is registered by both"):
        host.environments()


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
