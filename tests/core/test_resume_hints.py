"""What ``seal-platform run --resume`` refuses and what the run's messages tell the user to do next: another
run's folder given as --run-dir, a damaged checkpoint, a signal after the run completed, the resume hints
(with the store they need), --restart-from-step 0."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.store import RunStore


def _text(result) -> str:
    return " ".join(result.output.split())


def _interrupted(runner, toy_recipe, tmp_path, *extra, step=5):
    """A CLI run of 6 steps (checkpoints after steps 1 and 3) interrupted in step ``step``; its id."""
    flag = tmp_path / "interrupt"
    flag.touch()
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=6", "training.checkpoint_every=2",
                                 f"settings.toy.interrupt_file={flag}", f"settings.toy.interrupt_step={step}",
                                 *extra, "--quiet"])
    assert result.exit_code == 130, result.output
    return result.output.split("--resume ", 1)[1].split()[0]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.log"}


def _snapshot(store: RunStore, run_id: str):
    run = store.get_run(run_id)
    return (run.status, run.run_dir, [(c.step, c.path) for c in store.checkpoints(run_id)],
            [s.step for s in store.steps(run_id)])


# --- 1: --run-dir must be the run's own folder --------------------------------------------------------


def test_run_dir_of_another_run_is_refused_before_anything_is_changed(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    mine = _interrupted(runner, toy_recipe, tmp_path)
    other = _interrupted(runner, toy_recipe, tmp_path)  # same recipe, same store: the same config.json
    url = _url(tmp_path)
    store = RunStore(url)
    other_dir = Path(store.get_run(other).run_dir)
    before = (_snapshot(store, mine), _snapshot(store, other), _tree(other_dir))

    # The other run's folder where it is, and moved under another name (its checkpoints name their run).
    renamed = tmp_path / "elsewhere" / "my-run"
    for folder in (other_dir, renamed):
        if folder == renamed:
            shutil.copytree(other_dir, renamed)
        result = runner.invoke(cli, ["run", "--resume", mine, "--store", url, "--run-dir", str(folder), "--quiet"])
        text = _text(result)
        assert result.exit_code == 2, result.output
        assert f"that folder is not run {mine}'s" in text and other in text and "nothing was changed" in text, text
        assert "Traceback" not in result.output
        assert (_snapshot(store, mine), _snapshot(store, other), _tree(other_dir)) == before
        assert _tree(renamed if folder == renamed else other_dir) == before[2]

    # The run's own folder, moved: accepted, and the run completes from it.
    moved = tmp_path / "moved" / "renamed"
    shutil.move(store.get_run(mine).run_dir, str(moved))
    result = runner.invoke(cli, ["run", "--resume", mine, "--store", url, "--run-dir", str(moved), "--quiet"])
    assert result.exit_code == 0, result.output
    assert store.get_run(mine).status == "completed"
    assert all(c.path.startswith(str(moved)) for c in store.checkpoints(mine))
    assert _tree(other_dir) == before[2] and _snapshot(store, other) == before[1]


def test_run_dir_whose_config_is_another_runs_is_refused(toy_site, toy_recipe, tmp_path):
    # A folder from another store (so not known here) of a run with another config, written before checkpoints
    # recorded their run: the config.json tells them apart.
    runner = CliRunner()
    mine = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    foreign_store = tmp_path / "foreign.sqlite"
    other = _interrupted(runner, toy_recipe, tmp_path, "settings.toy.skill_step=0.2", "--store", str(foreign_store))
    foreign_dir = tmp_path / "copied"
    shutil.copytree(RunStore(f"sqlite:///{foreign_store}").get_run(other).run_dir, foreign_dir)
    for core in foreign_dir.glob("checkpoints/*/core.json"):  # as an older version wrote them
        data = json.loads(core.read_text())
        data.pop("run_id", None)
        core.write_text(json.dumps(data))
    store = RunStore(url)
    before = _snapshot(store, mine)
    result = runner.invoke(cli, ["run", "--resume", mine, "--store", url, "--run-dir", str(foreign_dir), "--quiet"])
    text = _text(result)
    assert result.exit_code == 2, result.output
    assert "config.json" in text and "is not the config the store holds" in text and mine in text, text
    assert _snapshot(store, mine) == before


# --- 2: a damaged checkpoint --------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "{not json", "{}"])
def test_a_damaged_core_file_is_one_error_naming_it_with_the_restart_step(toy_site, toy_recipe, tmp_path, content):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    steps = [s.step for s in store.steps(run_id)]
    core = Path(store.get_run(run_id).run_dir) / "checkpoints" / "step-000003" / "core.json"
    core.write_text(content)
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    text = _text(result)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and "JSONDecodeError(" not in result.output
    assert str(core) in text, text
    hint = f"seal-platform run --resume {run_id} --store {url} --restart-from-step 2"
    assert hint in text, text
    assert [s.step for s in store.steps(run_id)] == steps  # nothing of its history was dropped
    # Following the hint trains again from the checkpoint after step 1.
    again = runner.invoke(cli, hint.split()[1:] + ["--quiet"])
    assert again.exit_code == 0, again.output
    assert store.get_run(run_id).status == "completed" and [s.step for s in store.steps(run_id)] == list(range(6))
    assert "steps 1-2 came from the checkpoint" in again.output


def test_a_damaged_only_checkpoint_suggests_restarting_from_step_0(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path, step=3)  # only the checkpoint after step 1
    url = _url(tmp_path)
    core = Path(RunStore(url).get_run(run_id).run_dir) / "checkpoints" / "step-000001" / "core.json"
    core.write_text("")
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    text = _text(result)
    assert result.exit_code == 2 and str(core) in text and "is empty" in text, text
    assert "--restart-from-step 0" in text and "no durable checkpoint before it" in text, text


def test_a_plugin_that_cannot_load_its_checkpoint_gets_the_restart_hint_too(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    steps = [s.step for s in store.steps(run_id)]
    (Path(store.get_run(run_id).run_dir) / "checkpoints" / "step-000003" / "toy.json").write_text('{"sk')  # truncated
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    text = _text(result)
    assert result.exit_code == 2, result.output
    assert "plugin 'toy' failed in 'load_checkpoint'" in text and "the checkpoint after step 3" in text, text
    assert f"seal-platform run --resume {run_id} --store {url} --restart-from-step 2" in text, text
    assert "after fixing the cause" not in text  # a plain resume fails the same way
    assert [s.step for s in store.steps(run_id)] == steps


# --- 3: a signal after the run completed --------------------------------------------------------------


@pytest.mark.parametrize("signal_name", ["KeyboardInterrupt", "Terminated"])
def test_a_signal_after_the_run_completed_says_it_completed(toy_site, toy_recipe, tmp_path, monkeypatch,
                                                            signal_name):
    from seal_platform import errors
    from seal_platform.present import run_display

    exc = KeyboardInterrupt if signal_name == "KeyboardInterrupt" else errors.Terminated

    def interrupted_report(store, run_id, console, catalog=None, **_options):
        raise exc()

    monkeypatch.setattr(run_display, "_write_report", interrupted_report)
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=2", "--quiet"])
    text = _text(result)
    (run,) = RunStore(_url(tmp_path)).list_runs()
    assert run.status == "completed"
    assert result.exit_code == (130 if signal_name == "KeyboardInterrupt" else 143), result.output
    assert f"the run {run.id} completed" in text and f"seal-platform report {run.id} --store" in text, text
    assert "marked interrupted" not in text and "--resume" not in text


def test_a_real_interruption_is_still_reported_as_one(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    assert RunStore(_url(tmp_path)).get_run(run_id).status == "interrupted"


# --- 4: the hints name the store ----------------------------------------------------------------------


def test_the_interruption_hint_names_the_store_and_works_from_another_directory(toy_site, toy_recipe, tmp_path,
                                                                                 monkeypatch):
    runner = CliRunner()
    flag = tmp_path / "interrupt"
    flag.touch()
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=4", "training.checkpoint_every=2",
                                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=3", "--quiet"])
    assert result.exit_code == 130, result.output
    text = _text(result)
    assert "the run is marked interrupted" in text
    hint = text.split("continue with: ", 1)[1]
    assert hint.startswith("seal-platform run --resume ") and f"--store {_url(tmp_path)}" in hint, hint
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where the default store (runs/store.sqlite) is not
    done = runner.invoke(cli, hint.split()[1:] + ["--quiet"])
    assert done.exit_code == 0, done.output


def test_the_failure_hint_names_the_store_and_is_punctuated(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    # A failure after steps were trained (one before any: tests/core/test_setup_failures.py).
    result = runner.invoke(cli, ["run", str(toy_recipe), "settings.toy.fail_in=evaluate",
                                 "evaluation.before_training=false", "--quiet"])
    assert result.exit_code == 2, result.output
    text = _text(result)
    (run,) = RunStore(_url(tmp_path)).list_runs()
    assert f"continue it with `seal-platform run --resume {run.id} --store {_url(tmp_path)}`." in text, text
    assert re.search(rf"[.!?] The run {run.id} is marked failed", text), text


# --- 5: --restart-from-step 0 -------------------------------------------------------------------------


def test_restart_from_step_0_says_it_was_asked_for(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--restart-from-step", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    text = _text(result)
    assert "no durable checkpoint yet" not in text
    assert "started again from step 1 as asked (--restart-from-step 0)" in text, text
    events = [e.message for e in RunStore(url).events(run_id)]
    assert not any(m.startswith("no checkpoint") for m in events), events
