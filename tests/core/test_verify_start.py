"""What `seal-platform verify` does before its work, whose start-up is the serial part of scoring a file.

The command line makes its rich consoles (and imports rich, the recipe planning and the package's version)
only when a command uses them, and `verify` uses none of them. Made late, the consoles still behave as when
they were made at import: they keep nothing of an environment that a command ran with (COLUMNS set by a
test's CliRunner, say), and read the live one later. While `verify` runs, the cyclic collector leaves what
was alive before out of its passes and runs less often; afterwards it is as it was."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec

from .test_cli_startup import _command

_LATE = """
import json, os, sys

import seal_platform.cli as cli

imported = sorted(m for m in sys.modules if m == "rich" or m.startswith("rich.") or m == "seal_platform.planning")
os.environ["COLUMNS"] = "50"  # set after the import, as a CliRunner(env=...) does around one command
first = cli.console.width  # the console is made here, on first use
os.environ["COLUMNS"] = "90"
later = cli.console.width  # and reads the live environment afterwards, as one made at import does
from seal_platform.cli import console, errors, load_recipe, plugin_host_for
from rich.console import Console

print(json.dumps({"imported": imported, "first": first, "later": later, "same": console is cli.console,
                  "consoles": [isinstance(c, Console) for c in (console, errors)], "stderr": errors.stderr,
                  "planning": [load_recipe.__module__, plugin_host_for.__module__]}))
"""


def test_verify_starts_without_rich_and_the_consoles_made_late_act_as_made_at_import(tmp_path: Path, toy_site):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1", "answer": 42}) + "\n")
    done, probe = _command(["verify", "--benchmark", "toy", str(data)], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"task_id": "t1", "success": True}
    assert sorted(m for m in probe["modules"] if m.split(".")[0] == "rich" or m == "seal_platform.planning") == []

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    late = subprocess.run([sys.executable, "-c", _LATE], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert late.returncode == 0, late.stderr
    seen = json.loads(late.stdout)
    assert seen["imported"] == []  # importing the command line imports neither rich nor the planning
    assert (seen["first"], seen["later"]) == (50, 90)
    assert seen["same"] and seen["consoles"] == [True, True] and seen["stderr"] is True
    assert seen["planning"] == ["seal_platform.planning", "seal_platform.planning"]

    version = subprocess.run([sys.executable, "-m", "seal_platform", "--version"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
    from seal_platform import __version__

    assert (version.returncode, version.stdout) == (0, f"seal-platform, version {__version__}\n"), version.stderr


class _CollectorWatch:
    """An environment that verifies and notes the cyclic collector's state while it does."""

    name = "watched"
    seen: list[tuple[int, bool]] = []

    def tasks(self, split):
        return []

    def pristine_interface(self):
        from seal_platform.types import Interface

        return Interface()

    def verify_record(self, record):
        self.seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        return {"task_id": record["task_id"], "success": True}


class _WatchPlugin:
    @hookimpl
    def register_environments(self):
        return [EnvironmentSpec("watched", lambda ctx: _CollectorWatch())]


def test_verify_runs_with_few_collections_and_leaves_the_collector_as_it_was(tmp_path, monkeypatch):
    from seal_platform import cli as cli_module
    from seal_platform import verify as verify_module
    from seal_platform.plugins import make_plugin_manager

    monkeypatch.setattr(verify_module, "benchmark_host",
                        lambda benchmark, overrides: make_plugin_manager(entry_points=[], extra=[("watch", _WatchPlugin())]))
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1"}) + "\n" + json.dumps({"task_id": "t2"}) + "\n")
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    _CollectorWatch.seen.clear()
    result = CliRunner().invoke(cli_module.cli, ["verify", "--benchmark", "watched", str(data)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["task_id"] for line in result.stdout.splitlines()] == ["t1", "t2"]
    # While it verified: what was alive before was frozen, and the collector ran less often.
    assert _CollectorWatch.seen == [(cli_module.VERIFY_GC_THRESHOLD, True)] * 2
    assert cli_module.VERIFY_GC_THRESHOLD > threshold[0]
    # Afterwards the collector is as it was (this process goes on).
    assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)
