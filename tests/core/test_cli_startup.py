"""What the command line imports: a command starts with what it uses and nothing else.

``--help``, ``plugins --json`` and ``verify`` (whose start-up is the serial part of scoring any file) run
without the heavy libraries (torch, transformers, vLLM, Ray, the OpenAI client), without the run store
(SQLAlchemy, Alembic) and without what only other commands use: yaml (recipes), the presentation modules.
Each is checked in a fresh process started the way the console script starts (``seal_platform.__main__``), so
a top-level import that creeps back in fails here; the commands that use them still get them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Never imported by these commands (heavy, or only for runs and the run store).
HEAVY = ("torch", "transformers", "vllm", "ray", "peft", "openai", "matplotlib", "sqlalchemy", "alembic",
         "seal_platform.store", "seal_platform.loop")
# Imported by the commands that use them, not at the command line's start-up.
LAZY = ("yaml", "seal_platform.present")

_PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)


def report():
    with open(out, "w") as fh:
        json.dump({"modules": sorted(sys.modules)}, fh)


atexit.register(report)
sys.argv[0] = "seal-platform"
from seal_platform.__main__ import main
main()
"""


def _command(
    args: list[str], tmp_path: Path, site: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``seal-platform ARGS`` in a fresh process started as the console script starts it (with ``site`` on its
    path), and the modules it had imported when it exited (``modules``, a set)."""
    listing = tmp_path / "probe.json"
    listing.unlink(missing_ok=True)
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _PROBE, str(listing), *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    probe = json.loads(listing.read_text()) if listing.exists() else {"modules": []}
    probe["modules"] = set(probe["modules"])
    return done, probe


def _found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [["--help"], ["plugins", "--json"]], ids=["help", "plugins-json"])
def test_listing_commands_import_nothing_heavy_nor_what_other_commands_use(args, tmp_path, toy_site):
    done, probe = _command(args, tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    modules = probe["modules"]
    assert "seal_platform.cli" in modules and "toy_plugin" in modules  # the probe saw the plugins load
    assert _found(modules, HEAVY) == []
    assert _found(modules, LAZY) == []


def test_verify_imports_nothing_heavy_nor_what_other_commands_use(tmp_path, toy_site):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1", "answer": 42}) + "\n")
    done, probe = _command(["verify", "--benchmark", "toy", str(data)], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"task_id": "t1", "success": True}
    assert _found(probe["modules"], HEAVY) == []
    assert _found(probe["modules"], LAZY) == []


def test_verify_reads_its_settings_as_yaml_values_when_given(tmp_path, toy_site):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1", "answer": 42}) + "\n")
    done, probe = _command(["verify", "--benchmark", "toy", "--set", "toy.n_tasks=3", str(data)], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"task_id": "t1", "success": True}
    assert "yaml" in probe["modules"] and _found(probe["modules"], HEAVY) == []


def test_config_show_still_reads_the_recipe(tmp_path, toy_site, toy_recipe):
    done, probe = _command(["config", "show", str(toy_recipe)], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert "environment: toy" in done.stdout and "n_tasks: 10" in done.stdout
    assert "yaml" in probe["modules"]
    assert _found(probe["modules"], ("torch", "vllm", "ray", "sqlalchemy", "seal_platform.store")) == []
