"""Resume keeps everything an uninterrupted run has: evaluations after the resumed checkpoint, no partial
checkpoint directories left behind."""

from __future__ import annotations

import sys
from datetime import UTC

import pytest

from seal_platform.errors import PluginError
from tests.core.test_loop import _runner


def interrupted_then_resumed(toy_recipe, tmp_path, overrides):
    """Run ``overrides`` (which name ``settings.toy.interrupt_step``) until the toy plugin interrupts it, then
    resume it in a fresh plugin module to the end. Returns the run id, the store after the resume and the toy
    plugin object of the interrupted process (what it saw before the interruption)."""
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = [*overrides, f"settings.toy.interrupt_file={flag}"]
    sys.modules.pop("toy_plugin", None)
    runner, store = _runner(toy_recipe, overrides)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    interrupted = sys.modules.pop("toy_plugin").plugin
    resumed, store2 = _runner(toy_recipe, overrides, resume=runner.run_id)
    resumed.run()
    return runner.run_id, store2, interrupted


def _evaluation_steps(store, run_id):
    return sorted({e.step for e in store.evaluations(run_id)})


def test_a_kill_after_a_checkpoint_loses_no_evaluation(toy_site, toy_recipe, tmp_path):
    # Checkpoint after step 1, evaluation at 2, killed in step 3: resuming from the checkpoint re-does the
    # evaluation at 2 (dropped with everything after the checkpoint) before step 2.
    base = ["training.steps=5", "training.checkpoint_every=2", "evaluation.every=2"]
    run_id, store, _ = interrupted_then_resumed(toy_recipe, tmp_path, [*base, "settings.toy.interrupt_step=3"])
    assert store.get_run(run_id).status == "completed"
    assert _evaluation_steps(store, run_id) == [0, 2, 4, 5]
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3, 4]


def test_a_kill_during_the_final_evaluation_is_resumed_into_it(toy_site, toy_recipe, tmp_path):
    base = ["training.steps=3", "training.checkpoint_every=0", "evaluation.every=0",
            "settings.toy.interrupt_stage=evaluate", "settings.toy.interrupt_step=3"]
    run_id, store, _ = interrupted_then_resumed(toy_recipe, tmp_path, base)
    assert store.get_run(run_id).status == "completed"
    assert _evaluation_steps(store, run_id) == [0, 3]
    assert len([e for e in store.evaluations(run_id) if e.step == 3]) == 2  # both categories, once each
    assert sys.modules["toy_plugin"].plugin.calls.count("collect") == 0  # nothing re-trained


def test_partial_checkpoint_directories_are_removed_at_resume(toy_site, toy_recipe, tmp_path):
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = ["training.steps=5", "training.checkpoint_every=2", "evaluation.every=0",
                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=3"]
    runner, store = _runner(toy_recipe, overrides)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    root = runner.run_dir / "checkpoints"
    (root / ".tmp-step-000003-abcdef").mkdir()
    (root / ".tmp-step-000003-abcdef" / "model.bin").write_bytes(b"x" * 1000)
    (root / "step-000003").mkdir()  # renamed into place, killed before the store row
    sys.modules.pop("toy_plugin", None)
    resumed, store2 = _runner(toy_recipe, overrides, resume=runner.run_id)
    resumed.run()
    names = sorted(p.name for p in root.iterdir())
    assert names == ["step-000001", "step-000003", "step-000004"]
    assert [c.step for c in store2.checkpoints(runner.run_id)] == [1, 3, 4]
    assert any("partial checkpoint" in e.message for e in store2.events(runner.run_id))


def test_resume_of_a_run_killed_before_its_first_interface(toy_site, toy_recipe):
    # Found by benchmarks/kill_anywhere.py: a kill between the run row and the pristine interface row.
    base = ["training.steps=2", "training.checkpoint_every=0"]
    runner, store = _runner(toy_recipe, [*base, "settings.toy.fail_in=start_run"])
    with pytest.raises(PluginError, match="toy failure in start_run"):
        runner.run()
    assert store.interfaces(runner.run_id) == []
    sys.modules.pop("toy_plugin", None)
    resumed, store2 = _runner(toy_recipe, base, resume=runner.run_id)
    resumed.run()
    assert store2.get_run(runner.run_id).status == "completed"
    assert [s.step for s in store2.steps(runner.run_id)] == [0, 1]
    assert store2.interfaces(runner.run_id)[0].revision == 0


def _interrupted_cli_run(runner, toy_recipe, tmp_path, *extra):
    flag = tmp_path / "interrupt"
    flag.touch()
    from seal_platform.cli import cli

    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=5", "training.checkpoint_every=2",
                                 f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=3", *extra,
                                 "--quiet"])
    assert result.exit_code == 130, result.output
    return result.output.split("--resume ", 1)[1].split()[0]


def test_a_resume_that_finds_no_checkpoint_where_the_store_says_stops_and_loses_nothing(toy_site, toy_recipe, tmp_path):
    import shutil

    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    store = RunStore(url)
    steps_before = [s.step for s in store.steps(run_id)]
    moved = tmp_path / "elsewhere" / run_id
    shutil.move(str(tmp_path / "runs" / run_id), str(moved))  # the runs directory was moved
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "none of them is on disk" in text and "--run-dir" in text, result.output
    assert "--restart-from-step" in text and f"{len(steps_before)} step(s) of history" in text
    assert [s.step for s in store.steps(run_id)] == steps_before and store.checkpoints(run_id)
    result = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--run-dir", str(moved), "--quiet"])
    assert result.exit_code == 0, result.output
    assert store.get_run(run_id).status == "completed" and [s.step for s in store.steps(run_id)] == [0, 1, 2, 3, 4]
    assert all(c.path.startswith(str(moved)) for c in store.checkpoints(run_id))


def test_restart_from_step_discards_only_what_it_names(toy_site, toy_recipe, tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    before = RunStore(url).get_run(run_id)
    bad = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--restart-from-step", "1", "--quiet"])
    assert bad.exit_code == 2 and "no durable checkpoint after step 0" in " ".join(bad.output.split())
    # "nothing was changed" holds: the run is still interrupted (it was marked failed), with no new event.
    after = RunStore(url).get_run(run_id)
    assert (after.status, after.error, after.ended_at) == (before.status, before.error, before.ended_at)
    assert "is marked failed" not in bad.output
    ok = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--restart-from-step", "0", "--quiet"])
    assert ok.exit_code == 0, ok.output
    store = RunStore(url)
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3, 4]
    assert any("restart from step 0 asked for" in e.message for e in store.events(run_id))


def test_complete_checkpoints_the_store_does_not_know_are_kept_aside_partial_ones_removed(
    toy_site, toy_recipe, tmp_path
):
    from click.testing import CliRunner

    from seal_platform.checkpoints import CORE_CHECKPOINT_FILE
    from seal_platform.cli import cli

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    folder = tmp_path / "runs" / run_id / "checkpoints"
    complete, partial = folder / "step-000007", folder / "step-000008"  # e.g. the store is an older backup
    complete.mkdir()
    (complete / CORE_CHECKPOINT_FILE).write_text("{}")
    partial.mkdir()
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    assert runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"]).exit_code == 0
    names = [p.name for p in folder.iterdir()]
    assert not complete.exists() and not partial.exists()
    assert any(n.startswith(".orphan-step-000007-") for n in names)
    assert (folder / next(n for n in names if n.startswith(".orphan-step-000007-")) / CORE_CHECKPOINT_FILE).is_file()


def test_two_resumes_started_together_exactly_one_proceeds(toy_site, toy_recipe, tmp_path):
    import os
    import subprocess

    from click.testing import CliRunner

    from seal_platform.store import RunStore

    # A slow last step (3 s; the run before the resumes, cut at step 3, does not get there), so that the two
    # resumes overlap.
    run_id = _interrupted_cli_run(CliRunner(), toy_recipe, tmp_path, "settings.toy.optimize_sleep_s=3.0",
                                  "settings.toy.optimize_sleep_from_step=4")
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "seal_platform", "run", "--resume", run_id, "--store", url, "--quiet"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes[0] == 0 and codes[1] == 2, outs
    loser = next(out + err for p, (out, err) in zip(procs, outs) if p.returncode == 2)
    assert "taken over by another process" in loser or "is still running" in loser or "is running" in loser, loser
    store = RunStore(url)
    assert store.get_run(run_id).status == "completed"
    evaluations = [(e.step, e.category) for e in store.evaluations(run_id)]
    assert len(evaluations) == len(set(evaluations))  # no duplicate rows from a second writer
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3, 4]


def test_a_run_marked_running_is_resumed_only_with_takeover(toy_site, toy_recipe, tmp_path):
    import sqlite3

    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    with sqlite3.connect(db) as conn:  # as a run on a machine that died looks
        conn.execute("UPDATE runs SET status = 'running', host = 'gone-host', pid = 4242 WHERE id = ?", (run_id,))
    url = f"sqlite:///{db}"
    refused = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    assert refused.exit_code == 2 and "--takeover" in " ".join(refused.output.split())
    taken = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--takeover", "--quiet"])
    assert taken.exit_code == 0, taken.output
    assert RunStore(url).get_run(run_id).status == "completed"


def test_the_takeover_is_one_compare_and_set(toy_site, toy_recipe, tmp_path):
    """Two processes that saw the same row: the first claim wins, the second finds the row changed."""
    from click.testing import CliRunner

    from seal_platform.store import RunStore

    run_id = _interrupted_cli_run(CliRunner(), toy_recipe, tmp_path)
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    row = store.get_run(run_id)
    seen = (row.status, row.pid, row.host, row.heartbeat_at)
    assert seen[0] == "interrupted"
    assert store.claim_run(run_id, seen, []) is True
    assert store.claim_run(run_id, seen, []) is False
    assert store.get_run(run_id).status == "running"


def test_a_resume_that_finds_the_run_taken_by_a_live_process_writes_nothing(toy_site, toy_recipe, tmp_path):
    """The window the compare-and-set alone would miss: the other process claimed the run after this one's
    command-line check but before this runner read the row; the row then reads `running` with a live pid."""
    from click.testing import CliRunner

    from seal_platform.errors import SealError

    run_id = _interrupted_cli_run(CliRunner(), toy_recipe, tmp_path)
    first, store = _runner(toy_recipe, [], resume=run_id)
    assert store.claim_run(run_id, first._seen, [])  # the other process wins
    steps = [s.step for s in store.steps(run_id)]
    second, _ = _runner(toy_recipe, [], resume=run_id)
    with pytest.raises(SealError, match="is running"):
        second.run()
    assert [s.step for s in store.steps(run_id)] == steps and store.get_run(run_id).status == "running"


def _as_if_owned_elsewhere(db, run_id, seconds_ago, form="%Y-%m-%d %H:%M:%S.%f"):
    """The row as a live (or dead) process on another machine leaves it, its heartbeat in the store's format
    (or in ``form``: another writer's)."""
    import sqlite3
    from datetime import datetime, timedelta

    beat = (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime(form)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'running', host = 'other-host', pid = 4242, heartbeat_at = ? "
                     "WHERE id = ?", (beat, run_id))


def test_a_run_whose_owner_stopped_beating_is_taken_over_without_the_flag(toy_site, toy_recipe, tmp_path):
    """A `running` row from another host: refused while its heartbeat is fresh (the message gives its age),
    resumed without --takeover once the heartbeat is older than STALE_AFTER_S."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    url = f"sqlite:///{db}"
    _as_if_owned_elsewhere(db, run_id, 5)
    fresh = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    assert fresh.exit_code == 2 and "last heartbeat" in fresh.output and "other-host" in fresh.output, fresh.output
    assert RunStore(url).get_run(run_id).pid == 4242  # nothing written
    _as_if_owned_elsewhere(db, run_id, 7200)
    stale = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    assert stale.exit_code == 0, stale.output
    assert "taking it over" in " ".join(stale.output.split())
    assert RunStore(url).get_run(run_id).status == "completed"


@pytest.mark.parametrize("form", ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S+00:00"])
def test_a_heartbeat_another_writer_stored_is_read_as_the_time_it_says(toy_site, toy_recipe, tmp_path, form):
    """A heartbeat without microseconds (``sqlite3``'s ``datetime('now')``), with a ``T`` or an offset: a stale
    one is taken over by a plain --resume (before, the compare-and-set never matched the stored text and the
    resume was refused as if the owner had just beaten), a fresh one is refused."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    url = f"sqlite:///{db}"
    _as_if_owned_elsewhere(db, run_id, 5, form)
    fresh = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    assert fresh.exit_code == 2 and "last heartbeat" in fresh.output, fresh.output
    _as_if_owned_elsewhere(db, run_id, 7200, form)
    stale = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    assert stale.exit_code == 0, stale.output
    assert RunStore(url).get_run(run_id).status == "completed"


def test_a_claim_fails_when_the_owner_beat_after_the_row_was_read(toy_site, toy_recipe, tmp_path):
    from click.testing import CliRunner

    from seal_platform.store import RunStore

    run_id = _interrupted_cli_run(CliRunner(), toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    _as_if_owned_elsewhere(db, run_id, 7200)
    store = RunStore(f"sqlite:///{db}")
    row = store.get_run(run_id)
    seen = (row.status, row.pid, row.host, row.heartbeat_at)
    _as_if_owned_elsewhere(db, run_id, 0)  # the owner is alive after all
    assert store.claim_run(run_id, seen, []) is False
    assert store.get_run(run_id).pid == 4242


def test_the_heartbeat_beats_and_a_process_whose_run_was_taken_over_stops_writing(tmp_path):
    """The owner's heartbeat thread refreshes heartbeat_at; once another process has claimed the row, the
    next beat fails, check() raises at the runner's next safe point and finish_run leaves the new owner's
    row alone."""
    import time

    from seal_platform.errors import StoreError
    from seal_platform.store import Heartbeat, RunStore, heartbeat_age

    store = RunStore(f"sqlite:///{tmp_path / 's.sqlite'}")
    store.create_run("r1", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    first = store.get_run("r1").heartbeat_at
    with Heartbeat(store, "r1", every=0.05) as beat:
        deadline = time.monotonic() + 10  # a beat every 0.05 s; a loaded machine may delay the thread
        while store.get_run("r1").heartbeat_at <= first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.get_run("r1").heartbeat_at > first
        beat.check()  # still ours
        _as_if_owned_elsewhere(tmp_path / "s.sqlite", "r1", 0)
        deadline = time.monotonic() + 5
        while beat.lost_to is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(StoreError, match="taken over by another process .*other-host"):
            beat.check()
    assert store.finish_run("r1", "failed", "x") is False
    row = store.get_run("r1")
    assert (row.status, row.pid, row.host) == ("running", 4242, "other-host")
    assert heartbeat_age(row) < 60


def test_a_resume_whose_task_data_changed_stops_unless_the_change_is_accepted(toy_site, toy_recipe, tmp_path):
    """A task file edited between an interrupt and --resume: the resume stops, naming the split whose data
    changed, before the history is touched; --accept-changes goes on and records the change."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.resume import TASK_DATA_EVENT
    from seal_platform.store import RunStore

    tasks = tmp_path / "tasks.txt"
    tasks.write_text("version 1")
    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path, f"settings.toy.task_file={tasks}",
                                  "evaluation.benchmarks=[{environment: toy, split: ood, name: toy-ood, max_tasks: 4}]")
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    store = RunStore(url)
    steps = [s.step for s in store.steps(run_id)]
    recorded = [e.data["fingerprints"] for e in store.events(run_id) if e.kind == TASK_DATA_EVENT]
    assert len(recorded) == 1 and set(recorded[0]) - {"toy train", "toy eval:eval"} == {"benchmark toy-ood"}
    tasks.write_text("version 2")
    refused = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and f"run {run_id}: its task data changed since it started (" in text
    assert "toy eval:eval: sha256:" in text
    assert "toy train: sha256:" in text and "benchmark toy-ood: sha256:" in text and "--accept-changes" in text
    assert "Traceback" not in text
    assert [s.step for s in store.steps(run_id)] == steps  # nothing resumed, nothing dropped
    # The tasks are known only once the environment is built, after the resume took the run over: the row
    # then says why it stopped (failed, with this error), and a later resume goes on from the same checkpoint.
    assert store.get_run(run_id).status == "failed" and "task data changed" in store.get_run(run_id).error
    accepted = runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet", "--accept-changes"])
    assert accepted.exit_code == 0, accepted.output
    assert store.get_run(run_id).status == "completed"
    last = [e for e in store.events(run_id) if e.kind == TASK_DATA_EVENT][-1]
    assert "accepted (--accept-changes)" in last.message and last.data["previous"] == recorded[0]
    # Unchanged data resumes as before (the other resume tests), and a new run is not told about the option.
    new = runner.invoke(cli, ["run", str(toy_recipe), "--accept-changes"])
    assert new.exit_code == 2 and "go with --resume RUN" in new.output
