"""What `seal-platform verify` does before its work, whose start-up is the serial part of scoring a file.

The command line imports the recipe planning and the package's version only when a command uses them, and
`verify` uses neither. Its consoles are :mod:`seal_platform.commands`' own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .test_cli_startup import _command

_LATE = """
import json, sys

import seal_platform.cli as cli
import seal_platform.commands as commands

imported = sorted(m for m in sys.modules if m == "seal_platform.planning")
from seal_platform.cli import console, errors, load_recipe, plugin_host_for
from rich.console import Console

print(json.dumps({"imported": imported, "same": [console is commands.console, errors is commands.errors],
                  "consoles": [isinstance(c, Console) for c in (console, errors)], "stderr": errors.stderr,
                  "planning": [load_recipe.__module__, plugin_host_for.__module__]}))
"""


def test_verify_starts_without_the_planning_and_the_cli_serves_the_commands_consoles(tmp_path: Path, toy_site):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1", "answer": 42}) + "\n")
    done, probe = _command(["verify", "--benchmark", "toy", str(data)], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"task_id": "t1", "success": True}
    assert "seal_platform.planning" not in probe["modules"]

    late = subprocess.run([sys.executable, "-c", _LATE], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ), timeout=120)
    assert late.returncode == 0, late.stderr
    seen = json.loads(late.stdout)
    assert seen["imported"] == []  # importing the command line does not import the planning
    assert seen["same"] == [True, True] and seen["consoles"] == [True, True] and seen["stderr"] is True
    assert seen["planning"] == ["seal_platform.planning", "seal_platform.planning"]

    version = subprocess.run([sys.executable, "-m", "seal_platform", "--version"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
    from seal_platform import __version__

    assert (version.returncode, version.stdout) == (0, f"seal-platform, version {__version__}\n"), version.stderr
