"""`make bytecode` compiles every source folder of the project ahead of time.

Editable installs get no bytecode from the installer, and where ``PYTHONDONTWRITEBYTECODE`` is set (CI,
containers) a folder left out is compiled again by every process that imports it -- each command, test worker,
tool worker and verify child (``seal_platform_libs`` was left out this way until the check below)."""

from __future__ import annotations

import shlex
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _source_folders() -> set[str]:
    """The folders that hold the installed packages' Python modules (pyproject's packages and package-dir)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {})
    tops = {name.split(".")[0] for name in setuptools["packages"]}
    folders = {package_dir.get(top, top) for top in tops}
    return {folder for folder in folders if any((ROOT / folder).rglob("*.py"))}


def test_every_source_folder_is_compiled_ahead():
    dry_run = subprocess.run(["make", "--no-print-directory", "-n", "bytecode"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    compile_line = next(line for line in dry_run.splitlines() if "compileall" in line)
    compiled = set(shlex.split(compile_line.split(">")[0])[1:])
    missing = _source_folders() - compiled
    assert not missing, f"`make bytecode` leaves out {sorted(missing)}: add them to its compileall line"
