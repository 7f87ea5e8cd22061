"""`make test` distributes the suite with pytest-xdist's ``--dist loadgroup``: tests marked
``xdist_group(NAME)`` (tests/conftest.py marks every test that uses the session's local Ray) must run on one
worker. With pytest 9.2 and xdist 3.8 the marks were silently ignored (pytest-dev/pytest-xdist#1386); this runs a
small suite the way the Makefile does and checks where each test ran."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("xdist")

SUITE = '''
import os
import pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"grouped {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"free {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    where = tmp_path / "where.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path / "test_suite.py")],
        cwd=tmp_path, env={**__import__("os").environ, "WHERE": str(where)}, capture_output=True, text=True,
        timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line.split() for line in where.read_text().splitlines()]
    assert len(lines) == 12
    assert len({worker for kind, worker in lines if kind == "grouped"}) == 1, lines
