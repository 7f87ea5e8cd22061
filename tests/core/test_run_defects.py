"""Defects of ``seal-platform run``'s resume, takeover and interrupt paths found by a user audit:

1. ``--resume RUN --takeover`` while the run's owner is alive on this host is refused before anything is
   changed (both processes would write the run); a writer that loses a race on a step's row says the run
   was taken over, not the database's UNIQUE-constraint text.
2. The Ctrl-C / SIGTERM message says where a resume starts (no checkpoint yet: from step 0).
3. A resume refused for changed plugins suggests unblocking an installed plugin that is blocked or not
   allowed now, a reinstall only for versions that differ or plugins that are gone.
4. A Ctrl-C while the command line is still being imported is "interrupted" and exit status 130, no traceback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import update

from seal_platform.cli import cli
from seal_platform.errors import StoreError
from seal_platform.store import RunStore
from seal_platform.store import models as m
from tests.core.conftest import make_dist
from tests.core.test_loop import _runner
from tests.core.test_resume_reliability import _as_if_owned_elsewhere, _interrupted_cli_run


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"


def _env(toy_site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}


def _text(output: str) -> str:
    return " ".join(output.split())


# --- 1: a takeover of a run whose owner is alive here ------------------------------------------------------


def test_a_takeover_of_a_run_whose_owner_is_alive_on_this_host_is_refused_and_changes_nothing(toy_site, toy_recipe,
                                                                                                tmp_path):
    cmd = [sys.executable, "-m", "seal_platform", "run", str(toy_recipe), "training.steps=40",
           "training.checkpoint_every=0", "evaluation.every=0", "settings.toy.optimize_sleep_s=0.3", "--quiet"]
    owner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(toy_site))
    try:
        store_file = tmp_path / "runs" / "store.sqlite"
        store = RunStore(_url(tmp_path))
        deadline = time.time() + 60
        while time.time() < deadline and not (store_file.exists() and store.list_runs()
                                              and store.steps(store.list_runs()[0].id)):  # a step is done
            time.sleep(0.2)
        (run,) = store.list_runs()
        assert (run.status, run.pid, run.host) == ("running", owner.pid, socket.gethostname())
        before = (run.status, run.pid, run.host, run.started_at)
        taken = subprocess.run([sys.executable, "-m", "seal_platform", "run", "--resume", run.id, "--store",
                                _url(tmp_path), "--takeover", "--quiet"], capture_output=True, text=True,
                               env=_env(toy_site), timeout=90)
        said = _text(taken.stdout + taken.stderr)
        assert taken.returncode == 2, said
        assert f"pid {owner.pid}, is alive on this host" in said and "Stop that process first" in said, said
        assert "--takeover is for a run whose owner is gone" in said and "Traceback" not in said, said
        after = store.get_run(run.id)
        assert (after.status, after.pid, after.host, after.started_at) == before
        assert not [e for e in store.events(run.id) if e.kind in ("resume", "plugins_changed")]
        # The owner goes on alone: it stops as asked, marked interrupted, with no database error.
        owner.send_signal(signal.SIGTERM)
        out, err = owner.communicate(timeout=60)
        assert owner.returncode == 143, out + err
        assert "IntegrityError" not in out + err and "UNIQUE" not in out + err, out + err
        assert store.get_run(run.id).status == "interrupted"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()


def test_a_live_pid_that_started_after_the_last_heartbeat_is_not_the_owner(toy_site, toy_recipe, tmp_path):
    """A reused pid (after a reboot, say): a process younger than the run's last heartbeat cannot be its owner,
    and the run whose heartbeat is stale is taken over as before."""
    import sqlite3

    runner = CliRunner()
    run_id = _interrupted_cli_run(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    _as_if_owned_elsewhere(db, run_id, 7200)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE runs SET host = ?, pid = ? WHERE id = ?", (socket.gethostname(), stranger.pid, run_id))
        result = runner.invoke(cli, ["run", "--resume", run_id, "--store", _url(tmp_path), "--quiet"])
        assert result.exit_code == 0, result.output
        assert RunStore(_url(tmp_path)).get_run(run_id).status == "completed"
    finally:
        stranger.kill()
        stranger.wait()


def _taken_over_at_step_1(monkeypatch, db: Path, *, elsewhere: bool) -> None:
    """``record_step`` as a race with another writer of the run loses it: the other process (on another
    host, taking the run over first when ``elsewhere``) records step 1 before this one does."""
    real = RunStore.record_step

    def racing(self, run_id, **kwargs):
        if kwargs["step"] == 1:
            if elsewhere:
                _as_if_owned_elsewhere(db, run_id, 0)
            real(self, run_id, **kwargs)
        return real(self, run_id, **kwargs)

    monkeypatch.setattr(RunStore, "record_step", racing)


def test_a_writer_that_loses_a_step_to_a_takeover_says_so_not_the_sql(toy_site, toy_recipe, tmp_path, monkeypatch):
    _taken_over_at_step_1(monkeypatch, tmp_path / "runs" / "store.sqlite", elsewhere=True)
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=3", "training.checkpoint_every=0",
                                      "--quiet"])
    said = _text(result.output)
    assert result.exit_code == 2, said
    assert "was taken over by another process (pid 4242 on other-host" in said, said
    assert "belongs to another process now (pid 4242 on other-host)" in said, said
    assert "UNIQUE" not in said and "IntegrityError" not in said and "INSERT" not in said, said
    (run,) = RunStore(_url(tmp_path)).list_runs()
    assert (run.status, run.pid, run.host) == ("running", 4242, "other-host")  # the new owner's row, untouched


def test_a_step_recorded_twice_while_this_process_owns_the_run_is_one_paragraph(toy_site, toy_recipe, tmp_path,
                                                                                 monkeypatch):
    _taken_over_at_step_1(monkeypatch, tmp_path / "runs" / "store.sqlite", elsewhere=False)
    runner, store = _runner(toy_recipe, ["training.steps=3", "training.checkpoint_every=0"])
    with pytest.raises(StoreError, match="step 1 of run .* was already recorded by another process") as raised:
        runner.run()
    assert "UNIQUE" not in str(raised.value)
    row = store.get_run(runner.run_id)
    assert row.status == "failed" and "UNIQUE" not in (row.error or ""), row.error


# --- 2: where a resume of an interrupted run starts ------------------------------------------------------


def _interrupt(toy_recipe: Path, tmp_path: Path, *overrides: str):
    flag = tmp_path / "interrupt"
    flag.touch()
    return CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=5", "evaluation.every=0",
                                    f"settings.toy.interrupt_file={flag}", "settings.toy.interrupt_step=3",
                                    *overrides, "--quiet"])


def test_the_interrupt_message_says_a_run_without_a_checkpoint_starts_again_from_step_0(toy_site, toy_recipe,
                                                                                         tmp_path):
    result = _interrupt(toy_recipe, tmp_path, "training.checkpoint_every=0")
    assert result.exit_code == 130, result.output
    said = _text(result.output)
    assert "no checkpoint yet (training.checkpoint_every: 0 writes one only at the end): a resume starts again " \
           "from step 0." in said, said
    assert "continue with: seal-platform run --resume " in said and "resumes after" not in said, said
    assert result.output.rstrip().splitlines()[-1].split("continue with: ")[1].startswith("seal-platform run")


def test_the_interrupt_message_says_after_which_checkpoint_a_resume_continues(toy_site, toy_recipe, tmp_path):
    result = _interrupt(toy_recipe, tmp_path, "training.checkpoint_every=2")
    assert result.exit_code == 130, result.output
    said = _text(result.output)
    assert "a resume continues after step 1 (its last checkpoint), from step 2." in said, said
    assert "no checkpoint yet" not in said, said


# --- 3: a plugin blocked now is unblocked, not reinstalled -------------------------------------------------


EXTRA_PLUGIN = """
from seal_platform import hookimpl


@hookimpl
def track(ctx, event):
    return None
"""


def _with_extra_recorded(toy_site: Path, toy_recipe: Path, tmp_path: Path) -> tuple[str, str]:
    """An interrupted toy run that (as its recorded plugins say) also ran with plugin `extra` from seal-extra
    1.0.0, which is installed now; its id and store URL."""
    make_dist(toy_site, "seal-extra", "1.0.0", {"extra": "extra_plugin:plugin"},
              {"extra_plugin.py": EXTRA_PLUGIN + "\n\nimport sys\nplugin = sys.modules[__name__]\n"})
    run_id = _interrupted_cli_run(CliRunner(), toy_recipe, tmp_path)
    store = RunStore(_url(tmp_path))
    with store.session() as s:
        s.execute(update(m.RunPlugin).where(m.RunPlugin.run_id == run_id, m.RunPlugin.name == "extra")
                  .values(status="loaded"))
    return run_id, _url(tmp_path)


def test_a_resume_refused_for_a_plugin_blocked_now_suggests_unblocking_it_not_a_reinstall(toy_site, toy_recipe,
                                                                                          tmp_path, monkeypatch):
    run_id, url = _with_extra_recorded(toy_site, toy_recipe, tmp_path)
    monkeypatch.setenv("SEAL_PLATFORM_BLOCK_PLUGINS", "extra")
    result = CliRunner().invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    said = _text(result.output)
    assert result.exit_code == 2, said
    assert "seal-extra 1.0.0 (plugin extra): loaded -> blocked" in said, said
    assert "take the plugin(s) the run ran with out of SEAL_PLATFORM_BLOCK_PLUGINS (plugin extra)" in said, said
    assert "pip install" not in said, said


def test_a_resume_refused_for_a_plugin_not_allowed_now_names_the_allow_list(toy_site, toy_recipe, tmp_path,
                                                                            monkeypatch):
    run_id, url = _with_extra_recorded(toy_site, toy_recipe, tmp_path)
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "toy")
    result = CliRunner().invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"])
    said = _text(result.output)
    assert result.exit_code == 2, said
    assert "add the plugin(s) the run ran with to SEAL_PLATFORM_PLUGINS (or unset it) (plugin extra)" in said, said
    assert "pip install" not in said, said
    # A version that differs is still a reinstall.
    store = RunStore(url)
    with store.session() as s:
        s.execute(update(m.RunPlugin).where(m.RunPlugin.run_id == run_id, m.RunPlugin.name == "extra")
                  .values(version="0.9.0"))
    said = _text(CliRunner().invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet"]).output)
    assert "pip install seal-extra==0.9.0" in said and "SEAL_PLATFORM_PLUGINS" in said, said


# --- 4: Ctrl-C while the command line is imported -------------------------------------------------------


# Installed as sitecustomize in the child: Ctrl-C arrives exactly while `seal_platform.cli` imports click (its
# first import of it), deterministically.
CTRL_C_IN_IMPORT = """
import sys


class _CtrlCWhileImporting:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            raise KeyboardInterrupt
        return None


sys.meta_path.insert(0, _CtrlCWhileImporting())
"""


def _entries() -> list[list[str]]:
    entries = [[sys.executable, "-m", "seal_platform"]]
    script = Path(sys.executable).with_name("seal-platform")
    if script.is_file():  # the installed console script (pip install -e . refreshes it)
        entries.append([str(script)])
    return entries


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: "console-script" if len(e) == 1 else "python-m")
def test_ctrl_c_while_the_command_line_imports_is_interrupted_not_a_traceback(entry, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CTRL_C_IN_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*entry, "runs"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 130, done.stdout + done.stderr
    assert done.stderr.strip() == "interrupted" and "Traceback" not in done.stderr, done.stderr
    # Without the hook the same entry runs the command.
    plain = subprocess.run([*entry, "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert plain.returncode == 0 and "seal-platform" in plain.stdout, plain.stdout + plain.stderr
