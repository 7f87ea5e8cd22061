"""A full disk, for real: a small tmpfs mounted for the test (skipped where this process may not mount one).

What must hold: the message says the disk is full (not "cannot open the store", not torch's "unexpected pos"),
no traceback, nothing half-written is kept, the command says truthfully what the store holds about the run, and
after space is freed the run resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from seal_platform import hookimpl
from seal_platform.capability import CapabilityState
from seal_platform.checkpoints import CoreState, write_checkpoint
from seal_platform.context import RunContext
from seal_platform.errors import SealError, StoreError, disk_full
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs at ``tmp_path / "disk"``."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_kib: int) -> Path:
    """Take all but ``leave_kib`` KiB of ``disk`` with a ballast file; returns it (delete it to free space)."""
    ballast = disk / f"ballast-{uuid.uuid4().hex[:6]}"
    free = shutil.disk_usage(disk).free
    with open(ballast, "wb") as fh:
        fh.truncate(0)
        fh.write(b"\0" * max(0, free - leave_kib * 1024))
    return ballast


class TorchSaver:
    """A plugin whose checkpoint is a torch file, as grpo's is."""

    @hookimpl
    def save_checkpoint(self, ctx, directory, step):
        import torch

        torch.save({"weights": torch.zeros(256 * 1024)}, Path(directory) / "weights.pt")  # 1 MiB
        return {"torch": True}


def test_torchs_unexpected_pos_on_a_full_disk_is_reported_as_a_full_disk(small_disk, tmp_path):
    ballast = fill(small_disk, 256)
    host = make_plugin_manager(allow=[], extra=[("saver", TorchSaver())])
    ctx = RunContext(config=None, run_id="r", run_dir=small_disk / "run", settings={}, store=None)  # type: ignore[arg-type]
    with pytest.raises(SealError) as caught:
        write_checkpoint(host, ctx, CoreState(0, 0, CapabilityState()))
    text = str(caught.value)
    assert "writing the checkpoint after step 0" in text and "the disk is full" in text, text
    assert not list((small_disk / "run" / "checkpoints").iterdir())  # the partial folder is gone
    ballast.unlink()
    assert disk_full(small_disk) is None  # with space again, a failure is not blamed on the disk
    write_checkpoint(host, ctx, CoreState(0, 0, CapabilityState()))
    assert (small_disk / "run" / "checkpoints" / "step-000000" / "weights.pt").is_file()


def test_a_store_on_a_full_disk_says_so_on_write(small_disk):
    store = RunStore(f"sqlite:///{small_disk / 'store.sqlite'}")
    store.create_run("r", name="r", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    fill(small_disk, 0)
    with pytest.raises(StoreError) as caught:
        for n in range(2000):
            store.add_event("r", "note", "x" * 4096 + str(n))
    text = str(caught.value)
    assert "cannot be written: the disk is full" in text and "cannot open" not in text, text


def _recipe(tmp_path: Path, runs: Path) -> Path:
    path = tmp_path / "toy-full.yaml"
    path.write_text(yaml.safe_dump({
        "name": "toy", "seed": 7, "environment": "toy", "runs_dir": str(runs), "plugins": {"allow": ["toy"]},
        "training": {"steps": 3, "tasks_per_step": 4, "group_size": 2, "checkpoint_every": 1},
        "rollout": {"engine": "toy-engine", "workers": 3}, "evaluation": {"every": 2, "max_tasks": 6},
        "stages": {"evolve_interface": "toy", "reweight": "toy", "optimize": "toy"},
        "settings": {"toy": {"n_tasks": 10}},
    }))
    return path


def _cli(toy_site: Path, *args: str) -> subprocess.CompletedProcess:
    """The command in a process of its own, as a user runs it (its exit is what makes a row it could not
    finish read as crashed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "seal_platform", *args, "--quiet", "--no-report"], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("leave_kib", [40, 120])
def test_a_run_whose_disk_fills_says_what_the_store_holds_and_resumes_once_space_is_freed(
        small_disk, tmp_path, toy_site, leave_kib):
    # With 40 KiB left the store holds the new run's row but not its end; with 120 KiB the run is marked
    # failed. Either way the message names the full disk and tells the truth about the run's row.
    runs = small_disk / "runs"
    recipe = _recipe(tmp_path, runs)
    first = _cli(toy_site, "run", str(recipe), "training.steps=1")
    assert first.returncode == 0, first.stderr
    ballast = fill(small_disk, leave_kib)
    result = _cli(toy_site, "run", str(recipe))
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output, output
    assert "the disk is full" in output and "cannot open" not in output, output
    run_id = output.split("run ", 1)[1].split()[0]
    ballast.unlink()
    store = RunStore(f"sqlite:///{runs / 'store.sqlite'}")
    if run_id not in {r.id for r in store.list_runs()}:
        assert f"Nothing of run {run_id} is in the store" in output, output
        return
    status = store.get_run(run_id).status  # the process is gone: a row it could not finish reads crashed
    assert status in ("failed", "crashed"), status
    said = "is marked failed" if status == "failed" else "could not record how the run ended"
    assert said in output, output
    resumed = _cli(toy_site, "run", "--resume", run_id, "--store", str(runs / "store.sqlite"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert store.get_run(run_id).status == "completed" and len(store.steps(run_id)) == 3


def test_disk_full_reads_the_errno_through_a_chain(tmp_path):
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as inner:
            raise RuntimeError("a plugin's wrapper") from inner
    except RuntimeError as outer:
        assert disk_full(tmp_path, outer) == "the disk is full"
    assert disk_full(tmp_path, RuntimeError("unexpected pos 704 vs 598")) is None  # tmp_path has room
    assert disk_full(tmp_path) is None


def test_a_failure_the_full_store_cannot_record_keeps_its_own_error_and_still_closes_the_engine(
        small_disk, tmp_path, toy_site):
    # The plugin fails in `optimize` after the disk filled: the crash event, the end_run events and the final
    # status cannot be written. The run's own error must be what is raised, and the engine still closed.
    import sys as _sys

    from seal_platform.errors import PluginError

    from .test_loop import _runner

    runs = small_disk / "runs"
    recipe = _recipe(tmp_path, runs)
    runner, store = _runner(recipe, ["settings.toy.fail_in=optimize", f"settings.toy.fill_disk_at_failure={runs}"])
    with pytest.raises(PluginError) as caught:
        runner.run()
    assert "toy failure in optimize" in str(caught.value), caught.value
    plugin = _sys.modules["toy_plugin"].plugin
    assert plugin.last_engine.closed
    assert store.get_run(runner.run_id).status == "running"  # what the store could not update (this process lives)


# --- the end of a run (issue 52, item 8) ---------------------------------------------------------------------

END_RUN_PLUGIN = '''
import os
import shutil

from seal_platform import hookimpl


@hookimpl
def end_run(ctx, status):
    if os.environ.get("H7_AT_END") == "fill":  # the disk fills as the run ends: nothing more can be written
        with open(ctx.run_dir.parent / "ballast-at-end", "wb") as fh:
            fh.write(b"\\0" * shutil.disk_usage(ctx.run_dir).free)
    elif os.environ.get("H7_AT_END") == "block-report":  # the report's path cannot be written
        (ctx.run_dir / "report.html" / "report.html").mkdir(parents=True)
'''


def _run_ending(toy_site: Path, tmp_path: Path, runs: Path, at_end: str) -> subprocess.CompletedProcess:
    from tests.core.conftest import make_dist

    make_dist(toy_site, "seal-atend", "0.1.0", {"atend": "atend_plugin"}, {"atend_plugin.py": END_RUN_PLUGIN})
    recipe = _recipe(tmp_path, runs)
    data = yaml.safe_load(recipe.read_text())
    data["plugins"]["allow"] = ["toy", "atend"]
    data["training"]["steps"] = 2
    recipe.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")]),
           "H7_AT_END": at_end}
    # Not --no-report: the report is written at the end, while descriptors 1 and 2 point at run.log.
    return subprocess.run([sys.executable, "-m", "seal_platform", "run", str(recipe), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_disk_that_fills_as_the_run_ends_ends_the_command_in_one_paragraph(small_disk, tmp_path, toy_site):
    # It used to end in two tracebacks: the report's warning, printed while stdout pointed at the full run.log,
    # raised an OSError of its own, whose traceback hid the real error.
    result = _run_ending(toy_site, tmp_path, small_disk / "runs", "fill")
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in output, output
    assert output.count("Error:") == 1 and "the disk is full" in result.stderr, output
    assert "could not record how the run ended" in result.stderr or "is marked failed" in result.stderr, output


def test_a_report_that_cannot_be_written_is_said_on_the_terminal(tmp_path, toy_site):
    runs = tmp_path / "runs"
    result = _run_ending(toy_site, tmp_path, runs, "block-report")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Traceback" not in output, output
    # On the terminal (it used to go to run.log, where no one saw it), naming why and how to write it later.
    said = " ".join(result.stdout.split())
    assert "warning: the report could not be written: cannot write" in said, output
    assert "seal-platform report" in said and "--out FILE" in said, output
    [log] = runs.glob("*/run.log")
    assert "the report could not be written" not in log.read_text()
