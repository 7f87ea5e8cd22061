"""The run lifecycle (seal_platform/lifecycle.py), the one place that starts and ends a run's plugins and
closes what the core built, as ``run``, ``eval`` and ``verify`` use it."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import pytest

from seal_platform import hookimpl
from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.errors import PluginError
from seal_platform.lifecycle import lifecycle
from seal_platform.plugins import make_plugin_manager


class Recorder:
    """A plugin that records its lifecycle hooks in a shared log (and can be told to fail in one)."""

    def __init__(self, name: str, log: list[str], fail_in: str = ""):
        self.name, self.log, self.fail_in = name, log, fail_in

    @hookimpl
    def start_run(self, ctx, resumed):
        self.log.append(f"{self.name}.start_run:{resumed}")
        if self.fail_in == "start_run":
            raise RuntimeError("cannot start")

    @hookimpl
    def end_run(self, ctx, status):
        self.log.append(f"{self.name}.end_run:{status}")
        if self.fail_in == "end_run":
            raise RuntimeError("cannot end")


class Closable:
    """An engine or executor that notes when it is closed (the core closes both)."""

    def __init__(self, name: str, log: list[str]):
        self.name, self.log = name, log

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return [fn(item) for item in items]

    def close(self) -> None:
        self.log.append(f"{self.name}.close")


def _setup(tmp_path, log: list[str], **fail: str):
    host = make_plugin_manager(entry_points=[], extra=[
        ("a", Recorder("a", log, fail.get("a", ""))), ("b", Recorder("b", log, fail.get("b", ""))),
    ])
    ctx = RunContext(config=RunConfig(environment="x"), run_id="r", run_dir=tmp_path)
    ctx.executor = Closable("executor", log)  # type: ignore[assignment]
    ctx.shared["engine"] = Closable("engine", log)
    return host, ctx


def _ends(log: list[str]) -> list[str]:
    return [entry for entry in log if "end_run" in entry or "close" in entry]


def test_a_body_that_completes_ends_the_plugins_then_closes_engine_and_executor(tmp_path):
    log: list[str] = []
    host, ctx = _setup(tmp_path, log)
    stopped: list[bool] = []
    with lifecycle(host, ctx, resumed=True, on_exit=lambda: stopped.append(True)):
        log.append("body")
    assert log == ["b.start_run:True", "a.start_run:True", "body", "b.end_run:completed", "a.end_run:completed",
                   "engine.close", "executor.close"]
    assert stopped == [True] and "engine" not in ctx.shared


@pytest.mark.parametrize("error,status", [(ValueError("bad"), "failed"), (KeyboardInterrupt(), "interrupted")])
def test_a_body_that_raises_ends_with_its_status_and_keeps_its_error(tmp_path, error, status):
    log: list[str] = []
    host, ctx = _setup(tmp_path, log)
    with pytest.raises(type(error)), lifecycle(host, ctx, resumed=False):
        raise error
    assert _ends(log) == [f"b.end_run:{status}", f"a.end_run:{status}", "engine.close", "executor.close"]


def test_a_failed_start_run_ends_nothing_but_still_closes(tmp_path):
    log: list[str] = []
    host, ctx = _setup(tmp_path, log, a="start_run")
    with pytest.raises(PluginError, match="plugin 'a' failed in 'start_run'"), lifecycle(host, ctx, resumed=False):
        log.append("body")
    assert "body" not in log and _ends(log) == ["engine.close", "executor.close"]


def test_a_failing_end_run_never_hides_the_bodys_error(tmp_path):
    log: list[str] = []
    host, ctx = _setup(tmp_path, log, b="end_run")
    with pytest.raises(ValueError, match="the run's own"), lifecycle(host, ctx, resumed=False):
        raise ValueError("the run's own error")
    assert _ends(log)[-2:] == ["engine.close", "executor.close"]
    # Without a store to record it in, an end_run failure after a completed body is raised.
    log.clear()
    host, ctx = _setup(tmp_path, log, b="end_run")
    with pytest.raises(PluginError, match="cannot end"), lifecycle(host, ctx, resumed=False):
        pass
    assert _ends(log)[-2:] == ["engine.close", "executor.close"]


def test_plugins_limits_the_hooks_to_the_named_plugins(tmp_path):
    log: list[str] = []
    host, ctx = _setup(tmp_path, log)
    with lifecycle(host, ctx, resumed=False, plugins=["a"]):
        pass
    assert [entry for entry in log if entry.startswith(("a.", "b."))] == ["a.start_run:False", "a.end_run:completed"]


def test_verify_starts_the_benchmarks_plugin_before_ending_it(toy_site, monkeypatch):
    from seal_platform.verify import verify_lines

    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "toy")
    out = list(verify_lines("toy", ['{"task_id": "a", "answer": 42}'], []))
    assert out == ['{"task_id": "a", "success": true}']
    calls = sys.modules["toy_plugin"].plugin.calls
    assert calls[-2:] == ["start_run", "end_run:completed"]


# Plugin `borrow`: an environment and an engine whose factories call the toy plugin's code, which fails there.
BORROW = '''
from seal_platform import hookimpl
from seal_platform.registry import EngineSpec, EnvironmentSpec

import toy_plugin


def build(ctx):
    return toy_plugin.ToyEnvironment(None).tasks("no-such-split")


@hookimpl
def register_environments():
    return [EnvironmentSpec("borrowed", build)]


@hookimpl
def register_rollout_engines():
    return [EngineSpec("borrowed-engine", build)]
'''


@pytest.mark.parametrize("what", ["environment", "engine"])
def test_a_factory_failing_in_another_plugin_s_code_names_that_plugin(toy_site, monkeypatch, tmp_path, what):
    from .conftest import make_dist

    make_dist(toy_site, "seal-borrow", "0.1.0", {"borrow": "borrow_plugin"}, {"borrow_plugin.py": BORROW})
    sys.modules.pop("borrow_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    host = make_plugin_manager(allow=["toy", "borrow"])
    config = RunConfig(environment="borrowed", rollout={"engine": "borrowed-engine"})
    ctx = RunContext(config=config, run_id="r", run_dir=tmp_path)
    ctx.executor = Closable("executor", [])  # type: ignore[assignment]
    with pytest.raises(PluginError) as raised, lifecycle(host, ctx, resumed=False) as life:
        getattr(life, what)()
    said = str(raised.value)
    doing = {"environment": "setting up the environment", "engine": "building the rollout engine"}[what]
    assert said.startswith(f"{doing} of plugin 'borrow' failed in the code of plugin 'toy' (tasks, "
                           "which 'borrow' called): ValueError: unknown split 'no-such-split'"), said
    assert re.search(r"\(at \S+/toy_plugin\.py:\d+\)$", said), said  # where it was raised
