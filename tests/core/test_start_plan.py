"""``seal_platform.resume.plan_start``: the one decision of how ``seal-platform run`` (and a ``Runner``) starts --
a new run, a resume, a takeover, or a refusal with its reason -- for every state a stored run can be in."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from seal_platform.resume import RESUME_OPTIONS, StartPlan, plan_start
from seal_platform.store import STALE_AFTER_S


def _row(status: str, *, beat_s_ago: float | None = 5.0, host: str = "other-host", pid: int = 4242) -> SimpleNamespace:
    beat = None if beat_s_ago is None else datetime.now(UTC) - timedelta(seconds=beat_s_ago)
    return SimpleNamespace(id="r1", status=status, pid=pid, host=host, heartbeat_at=beat)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_new_run_starts_fresh_and_refuses_the_options_of_a_resume():
    assert plan_start(None) == StartPlan("fresh")
    refused = plan_start(None, resume_options=["--takeover"])
    assert refused.action == "refuse" and refused.run_id is None
    assert refused.reason == ("--run-dir, --restart-from-step, --takeover, --allow-plugin-changes and "
                              "--accept-changes go with --resume RUN.")
    assert all(option in refused.reason for option in RESUME_OPTIONS)


def test_a_completed_run_is_not_resumed_with_or_without_takeover():
    for takeover in (False, True):
        plan = plan_start(_row("completed"), takeover=takeover)
        assert (plan.action, plan.run_id) == ("refuse", "r1")
        assert plan.reason == "run r1 already completed; nothing to resume."


@pytest.mark.parametrize("status", ["interrupted", "crashed", "failed"])
def test_a_stopped_run_is_resumed_without_a_note(status):
    assert plan_start(_row(status)) == StartPlan("resume", "r1")
    assert plan_start(_row(status), takeover=True) == StartPlan("resume", "r1")


def test_a_run_still_beating_elsewhere_is_refused_unless_taken_over():
    refused = plan_start(_row("running", beat_s_ago=5))
    assert refused.action == "refuse"
    assert "still running (pid 4242 on other-host, last heartbeat 5 s ago)" in refused.reason
    assert "--takeover" in refused.reason and f"{STALE_AFTER_S / 60:.0f} min" in refused.reason
    assert plan_start(_row("running", beat_s_ago=5), takeover=True) == StartPlan("takeover", "r1")


def test_a_run_whose_owner_stopped_beating_is_taken_over_with_a_note():
    plan = plan_start(_row("running", beat_s_ago=2 * 3600))
    assert (plan.action, plan.run_id) == ("takeover", "r1")
    assert plan.reason == ("run r1: its owner (pid 4242 on other-host) has not written a heartbeat for 120 min; "
                           "taking it over.")


def test_a_row_that_never_beat_is_refused_without_takeover():
    plan = plan_start(_row("running", beat_s_ago=None))
    assert plan.action == "refuse" and "last heartbeat" not in plan.reason and "--takeover" in plan.reason


def test_a_run_whose_owner_is_alive_on_this_host_is_refused_even_with_takeover():
    # This process, which started before the run's last heartbeat: the owner, alive here.
    row = _row("running", beat_s_ago=0.0, host=socket.gethostname(), pid=os.getpid())
    for takeover in (False, True):
        plan = plan_start(row, takeover=takeover)
        assert plan.action == "refuse"
        assert f"its owner, pid {os.getpid()}, is alive on this host" in plan.reason
        assert "never for one still running here" in plan.reason


def test_a_live_pid_that_started_after_the_last_heartbeat_is_not_the_owner():
    # A heartbeat older than this process: the number was reused, so the owner is gone.
    row = _row("running", beat_s_ago=400 * 24 * 3600, host=socket.gethostname(), pid=os.getpid())
    assert plan_start(row, takeover=True) == StartPlan("takeover", "r1")
    assert plan_start(row).action == "takeover"  # stale: taken over without the flag, with the note


def test_a_dead_owner_on_this_host_is_treated_as_one_elsewhere():
    row = _row("running", beat_s_ago=5, host=socket.gethostname(), pid=_dead_pid())
    assert plan_start(row).action == "refuse"
    assert plan_start(row, takeover=True) == StartPlan("takeover", "r1")


@pytest.mark.parametrize("option", [["--restart-from-step", "0"], ["--takeover"], ["--run-dir", "somewhere"]])
def test_run_refuses_a_resume_option_without_resume_before_reading_a_recipe(option, tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    result = CliRunner().invoke(cli, ["run", "no-such-recipe.yaml", *option, "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "go with --resume RUN" in result.output, result.output
    assert not (tmp_path / "s.sqlite").exists()
