"""Ctrl-C during ``seal-platform run``'s start-up (plugins importing, the environment and the model loading):
libraries do not always let the KeyboardInterrupt through as it is. transformers' lazy imports re-raise it as a
ModuleNotFoundError / RuntimeError caused by it, and one raised in a finalizer is swallowed ("Exception ignored
in ..."). Either way the run must end ``interrupted`` (resumable, exit 130, the resume hint), not ``failed``
with a misleading error, and must not go on as if no Ctrl-C had come."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.errors import Terminated
from seal_platform.interrupts import as_interruption
from seal_platform.store import RunStore

from .conftest import make_dist

# A plugin whose engine factory (and start_run) fail the ways a library turns a Ctrl-C into (SEAL_TEST_KI picks
# one), with the toy plugin's environment and engine.
KI_PLUGIN = '''
import os
import signal
import time

from seal_platform.errors import Terminated
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import EngineSpec


def _mode():
    return os.environ.get("SEAL_TEST_KI", "")


def _fail(where):
    mode = _mode()
    if not mode.startswith(where + ":"):
        return
    how = mode.split(":", 1)[1]
    if how == "module-not-found":  # transformers' _LazyModule: `raise ModuleNotFoundError(...) from e`
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise ModuleNotFoundError("Could not import module 'AutoModelForCausalLM'. Are this object's "
                                      "requirements defined correctly?") from ki
    if how == "runtime-context":  # an error raised while handling it (implicitly chained, as __context__)
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Failed to import transformers.models.auto.modeling_auto")
    if how == "terminated":
        try:
            raise Terminated()
        except Terminated as stop:
            raise RuntimeError("Failed to import transformers.models.auto.modeling_auto") from stop
    if how == "plain":
        raise KeyboardInterrupt


class _Finalizer:
    def __del__(self):
        # A real Ctrl-C whose handler runs inside a finalizer: Python prints "Exception ignored in ..." and the
        # KeyboardInterrupt is gone.
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2)


@hookimpl
def register_rollout_engines():
    def build(ctx):
        _fail("engine")
        if _mode() == "engine:swallowed":
            _Finalizer()
        from toy_plugin import ToyEngine

        class SwallowingEngine(ToyEngine):
            calls = 0

            def generate(self, prompts, sampling):
                SwallowingEngine.calls += 1
                if _mode() == "stage:swallowed" and SwallowingEngine.calls == 5:
                    _Finalizer()  # during the first step's collect
                return super().generate(prompts, sampling)

        return SwallowingEngine(ctx.shared["toy.skill"], ctx.seed)

    return [EngineSpec("ki-engine", build, "a toy engine whose model load can be interrupted")]


@hookimpl
def start_run(ctx, resumed):  # as a tracker whose start imports its library
    _fail("start_run")


if _mode() == "import:swallowed":  # a Ctrl-C while the plugin's own imports run, turned into an import error
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2)
    except KeyboardInterrupt as ki:
        raise ModuleNotFoundError("No module named 'torch._C'") from ki
'''


@pytest.fixture
def ki_site(toy_site: Path) -> Path:
    make_dist(toy_site, "seal-ki", "0.1.0", {"ki": "ki_plugin"}, {"ki_plugin.py": KI_PLUGIN})
    sys.modules.pop("ki_plugin", None)
    return toy_site


@pytest.fixture
def ki_recipe(toy_recipe: Path, tmp_path: Path) -> Path:
    recipe = yaml.safe_load(toy_recipe.read_text())
    recipe["rollout"]["engine"] = "ki-engine"
    recipe["plugins"]["allow"] = ["toy", "ki"]
    path = tmp_path / "ki.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _store(tmp_path: Path) -> RunStore:
    return RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")


@pytest.mark.parametrize("mode", [
    "engine:module-not-found",
    "engine:runtime-context",
    "start_run:module-not-found",
    "engine:plain",  # a KeyboardInterrupt as it is: handled right before the fix too
])
def test_a_ctrl_c_that_surfaces_as_another_error_marks_the_run_interrupted(ki_site, ki_recipe, tmp_path,
                                                                           monkeypatch, mode):
    monkeypatch.setenv("SEAL_TEST_KI", mode)
    result = CliRunner().invoke(cli, ["run", str(ki_recipe), "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 130, result.output
    assert "Error:" not in text and "marked failed" not in text, text
    (run,) = _store(tmp_path).list_runs()
    assert f"interrupted; the run is marked interrupted; continue with: seal-platform run --resume {run.id}" in text
    stored = _store(tmp_path).get_run(run.id)
    assert stored.status == "interrupted" and stored.error.startswith("interrupted by the user"), stored.error
    assert not [e for e in _store(tmp_path).events(run.id) if e.kind == "crash"]
    if mode != "engine:plain":  # what it surfaced as is kept
        assert "it surfaced as PluginError" in stored.error and mode.split(":")[0] in stored.error


def test_a_sigterm_that_surfaces_as_another_error_stops_the_run_with_143(ki_site, ki_recipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SEAL_TEST_KI", "engine:terminated")
    result = CliRunner().invoke(cli, ["run", str(ki_recipe), "--quiet"])
    assert result.exit_code == 143, result.output
    (run,) = _store(tmp_path).list_runs()
    assert "stopped by SIGTERM; the run is marked interrupted" in " ".join(result.output.split())
    stored = _store(tmp_path).get_run(run.id)
    assert stored.status == "interrupted" and stored.error.startswith("stopped by SIGTERM; it surfaced as PluginError")


def test_the_interrupted_run_resumes(ki_site, ki_recipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SEAL_TEST_KI", "engine:module-not-found")
    first = CliRunner().invoke(cli, ["run", str(ki_recipe), "--quiet"])
    assert first.exit_code == 130, first.output
    run_id = first.output.split("--resume ", 1)[1].split()[0]
    monkeypatch.setenv("SEAL_TEST_KI", "")
    again = CliRunner().invoke(cli, ["run", "--resume", run_id, "--store", str(tmp_path / "runs" / "store.sqlite"),
                                     "--quiet"])
    assert again.exit_code == 0, again.output
    assert _store(tmp_path).get_run(run_id).status == "completed"


def _run_in_a_process(ki_site: Path, recipe: Path, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEAL_TEST_KI": mode,
           "PYTHONPATH": os.pathsep.join([str(ki_site), os.environ.get("PYTHONPATH", "")])}
    # SIGINT as a terminal gives it, whatever this process inherited: a shell's background job (`CMD &`
    # without job control) starts with SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    return subprocess.run([sys.executable, "-m", "seal_platform", "run", str(recipe), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_ctrl_c_swallowed_while_the_model_loads_stops_the_run(ki_site, ki_recipe, tmp_path):
    """A real SIGINT whose KeyboardInterrupt a finalizer swallows: the run stops when the engine is built,
    marked interrupted, instead of training on as if no Ctrl-C had come."""
    done = _run_in_a_process(ki_site, ki_recipe, "engine:swallowed")
    store = _store(tmp_path)
    (run,) = store.list_runs()
    log = (Path(run.run_dir) / "run.log").read_text()
    assert "Exception ignored in" in log and "KeyboardInterrupt" in log, log  # it was swallowed
    assert done.returncode == 130, done.stdout + done.stderr
    assert f"interrupted; the run is marked interrupted; continue with: seal-platform run --resume {run.id}" in \
        " ".join(done.stderr.split())
    assert store.get_run(run.id).status == "interrupted" and store.steps(run.id) == []


def test_a_ctrl_c_swallowed_inside_a_stage_stops_the_run_when_the_stage_returns(ki_site, ki_recipe, tmp_path):
    """The swallowing finalizer runs inside an episode of the first step's collect (episodes one at a time in
    the main thread, the toy plugin's serial executor): the run stops at the end of that stage, before training
    on it, instead of completing."""
    recipe = yaml.safe_load(ki_recipe.read_text())
    recipe["rollout"]["executor"] = "toy-serial"
    path = tmp_path / "ki-serial.yaml"
    path.write_text(yaml.safe_dump(recipe))
    done = _run_in_a_process(ki_site, path, "stage:swallowed")
    store = _store(tmp_path)
    (run,) = store.list_runs()
    log = (Path(run.run_dir) / "run.log").read_text()
    assert "Exception ignored in" in log and "KeyboardInterrupt" in log, log  # it was swallowed
    assert done.returncode == 130, done.stdout + done.stderr
    assert store.get_run(run.id).status == "interrupted" and store.steps(run.id) == []


def test_a_ctrl_c_swallowed_while_the_plugins_import_stops_the_command(ki_site, ki_recipe, tmp_path):
    """The plugin loader records a plugin whose import fails (here: from a Ctrl-C) and goes on; the run then
    lacks its engine. With the SIGINT noted, that is an interruption (130), not a missing plugin (exit 2)."""
    done = _run_in_a_process(ki_site, ki_recipe, "import:swallowed")
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.strip().endswith("interrupted") and "Error:" not in done.stderr, done.stderr
    assert not (tmp_path / "runs" / "store.sqlite").exists() or not _store(tmp_path).list_runs()


def test_as_interruption_follows_causes_contexts_and_groups():
    def chained(inner: BaseException, outer: Exception, implicit: bool = False) -> Exception:
        try:
            try:
                raise inner
            except BaseException as exc:
                if implicit:
                    raise outer  # noqa: B904 the implicit chain (a __context__, no __cause__) is what is tested
                raise outer from exc
        except Exception as exc:
            return exc

    assert isinstance(as_interruption(chained(KeyboardInterrupt(), ModuleNotFoundError("x"))), KeyboardInterrupt)
    assert isinstance(as_interruption(chained(KeyboardInterrupt(), RuntimeError("x"), implicit=True)),
                      KeyboardInterrupt)
    deeper = chained(chained(KeyboardInterrupt(), ModuleNotFoundError("x")), RuntimeError("y"))
    assert isinstance(as_interruption(deeper), KeyboardInterrupt)
    assert isinstance(as_interruption(chained(Terminated(), RuntimeError("x"))), Terminated)
    assert isinstance(as_interruption(ExceptionGroup("g", [ValueError(), chained(KeyboardInterrupt(), OSError())])),
                      KeyboardInterrupt)
    assert as_interruption(chained(ValueError("a"), RuntimeError("b"))) is None
    assert as_interruption(RuntimeError("no cause")) is None
    cyclic_a, cyclic_b = RuntimeError("a"), RuntimeError("b")
    cyclic_a.__context__, cyclic_b.__context__ = cyclic_b, cyclic_a
    assert as_interruption(cyclic_a) is None
