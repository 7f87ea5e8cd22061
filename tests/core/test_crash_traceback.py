"""A crashed run's traceback is not only in the store's crash event: `<run dir>/run.log` ends with it, `show
--json` has the run's events with their data, and `show RUN` says where to get it (`show RUN --traceback`
prints it), without re-running with SEAL_PLATFORM_DEBUG=1."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.store import RunStore


def _crashed_run(toy_recipe: Path, tmp_path: Path) -> tuple[str, str, Path]:
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=1", "settings.toy.fail_in=optimize",
                                      "--quiet"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output  # the terminal: one paragraph, as before
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    store = RunStore(url)
    try:
        (run,) = store.list_runs()
        assert run.status == "failed"
        return run.id, url, Path(run.run_dir)
    finally:
        store.close()


def test_the_run_log_ends_with_the_crash_traceback(toy_recipe, toy_site, tmp_path):
    _, _, run_dir = _crashed_run(toy_recipe, tmp_path)
    log = (run_dir / "run.log").read_text()
    assert "Traceback (most recent call last)" in log, log
    # The plugin's own frame and error, under the error the core raised from it.
    assert "toy_plugin.py" in log and "RuntimeError: toy failure in optimize" in log, log
    assert "failed: PluginError:" in log, log


def test_show_json_has_the_events_with_the_crash_traceback(toy_recipe, toy_site, tmp_path):
    run_id, url, _ = _crashed_run(toy_recipe, tmp_path)
    shown = CliRunner().invoke(cli, ["show", run_id, "--store", url, "--json"])
    assert shown.exit_code == 0, shown.output
    events = json.loads(shown.output)["events"]
    (crash,) = [e for e in events if e["kind"] == "crash"]
    assert "PluginError" in crash["message"] and crash["at"]
    assert "toy_plugin.py" in crash["data"]["traceback"] and "toy failure in optimize" in crash["data"]["traceback"]
    assert any(e["kind"] == "stage_time" and "seconds" in e["data"] for e in events)


def test_show_offers_the_traceback_within_80_columns_and_prints_it(toy_recipe, toy_site, tmp_path):
    run_id, url, _ = _crashed_run(toy_recipe, tmp_path)
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", run_id, "--store", url], terminal_width=80, env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert f"traceback: seal-platform show {run_id} --traceback" in shown.output, shown.output
    assert "Traceback (most recent call last)" not in shown.output
    # Wider lines only where one word is (a path stays whole, for copying).
    long = [line for line in shown.output.splitlines() if len(line) > 80 and max(map(len, line.split())) < 60]
    assert not long, long
    traced = runner.invoke(cli, ["show", run_id[-6:], "--store", url, "--traceback"], terminal_width=80)
    assert traced.exit_code == 0, traced.output
    assert traced.output.startswith("crash at "), traced.output
    assert "Traceback (most recent call last)" in traced.output and "toy_plugin.py" in traced.output
    assert "RuntimeError: toy failure in optimize" in traced.output


def test_a_run_that_did_not_crash_offers_no_traceback(toy_recipe, toy_site, tmp_path):
    runner = CliRunner()
    done = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "--quiet"])
    assert done.exit_code == 0, done.output
    run_id = done.output.split("run ", 1)[1].split()[0]
    url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    shown = runner.invoke(cli, ["show", run_id, "--store", url], terminal_width=80)
    assert shown.exit_code == 0 and "traceback" not in shown.output.lower(), shown.output
    traced = runner.invoke(cli, ["show", run_id, "--store", url, "--traceback"])
    assert traced.exit_code == 0 and f"run {run_id} recorded no traceback" in traced.output, traced.output
    log = (Path(json.loads(runner.invoke(cli, ["show", run_id, "--store", url, "--json"]).output)["run_dir"])
           / "run.log").read_text()
    assert "Traceback" not in log
