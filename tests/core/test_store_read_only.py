"""A store that cannot be written: the read commands read it without writing a byte; `run`, `eval` and
writes through the API are one paragraph; a read-only store with another schema version is one paragraph.

The files are made read-only with chmod, and as root (whom chmod does not stop) also with `chattr +i`."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.errors import StoreError
from seal_platform.store import RunStore


@pytest.fixture
def lock_down():
    """``lock_down(*paths)`` makes files and directories read-only for this process; undone afterwards."""
    locked: list[tuple[Path, int]] = []
    immutable: list[Path] = []

    def lock(*paths: Path) -> None:
        for path in paths:
            locked.append((path, path.stat().st_mode))
            path.chmod(0o555 if path.is_dir() else 0o444)
            if os.geteuid() == 0:
                if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                    pytest.skip("running as root and chattr +i is not available: cannot make a file read-only")
                immutable.append(path)
            assert not os.access(path, os.W_OK), path

    yield lock
    for path in immutable:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    for path, mode in locked:
        path.chmod(mode)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished_runs(runner: CliRunner, toy_recipe: Path, tmp_path: Path) -> tuple[str, list[str]]:
    ids = []
    for steps in (1, 2):
        result = runner.invoke(cli, ["run", str(toy_recipe), f"training.steps={steps}", "--quiet"])
        assert result.exit_code == 0, result.output
        ids.append(result.output.split("run ", 1)[1].split()[0])
    db = tmp_path / "runs" / "store.sqlite"
    with sqlite3.connect(db) as conn:  # the first run now looks like one left `running` by a dead process
        conn.execute("UPDATE runs SET status = 'running', pid = 999999999 WHERE id = ?", (ids[0],))
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return f"sqlite:///{db}", ids


@pytest.mark.parametrize("directory_too", [False, True], ids=["file", "file-and-directory"])
def test_read_commands_read_a_read_only_store_without_writing(toy_recipe, toy_site, tmp_path, lock_down, directory_too):
    runner = CliRunner()
    url, ids = _finished_runs(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    for suffix in ("-wal", "-shm"):  # as after a clean close
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    before = _digest(db)
    lock_down(db, *([db.parent] if directory_too else []))

    listed = runner.invoke(cli, ["runs", "--store", url, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["id"]: r for r in json.loads(listed.output)}
    assert set(rows) == set(ids) and rows[ids[1]]["status"] == "completed" and rows[ids[1]]["steps"] == 2
    assert rows[ids[0]]["status"] == "crashed"  # the dead process's run reads as crashed ...
    table = runner.invoke(cli, ["runs", "--store", url], terminal_width=200)
    assert table.exit_code == 0 and ids[1] in table.output, table.output
    shown = runner.invoke(cli, ["show", ids[1], "--store", url, "--json"])
    assert shown.exit_code == 0, shown.output
    digest = json.loads(shown.output)
    assert digest["id"] == ids[1] and [s["step"] for s in digest["steps"]] == [0, 1]
    shown = runner.invoke(cli, ["show", ids[1], "--store", url], terminal_width=200)
    assert shown.exit_code == 0 and "Traceback" not in shown.output, shown.output
    report = runner.invoke(cli, ["report", ids[1], "--store", url, "--out", str(tmp_path / "report.html")])
    assert report.exit_code == 0 and (tmp_path / "report.html").stat().st_size > 0, report.output
    compared = runner.invoke(cli, ["compare", *ids, "--store", url, "--json"])
    assert compared.exit_code == 0, compared.output

    # ... but is not marked so: not a byte of the store changed.
    assert _digest(db) == before
    with sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True) as conn:
        assert conn.execute("SELECT status FROM runs WHERE id = ?", (ids[0],)).fetchone()[0] == "running"


def test_writing_to_a_read_only_store_is_one_paragraph(toy_recipe, toy_site, tmp_path, lock_down):
    runner = CliRunner()
    url, ids = _finished_runs(runner, toy_recipe, tmp_path)
    db = tmp_path / "runs" / "store.sqlite"
    before = _digest(db)
    lock_down(db)

    for args in (["run", str(toy_recipe), "--quiet", "--store", url], ["run", "--resume", ids[0], "--store", url],
                 ["eval", ids[1], "--store", url]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and "cannot be written" in result.output, result.output
        assert "make the file and its directory writable" in " ".join(result.output.split())
    with pytest.raises(StoreError, match="cannot be written"):
        RunStore(url)
    read_only = RunStore(url, read_only=True)
    assert [r.id for r in read_only.list_runs()] == ids[::-1]
    with pytest.raises(StoreError, match="cannot be written"):
        read_only.add_event(ids[1], "note", "not stored")
    assert _digest(db) == before


def _store_at(tmp_path: Path, revision: str | None) -> tuple[str, Path]:
    db = tmp_path / "old" / "store.sqlite"
    url = f"sqlite:///{db}"
    store = RunStore(url, migrate=False)
    store.migrate(revision or "head")
    store.close()
    return url, db


def test_a_read_only_store_with_an_older_schema_is_one_paragraph(tmp_path, lock_down):
    url, db = _store_at(tmp_path, "0002")
    before = _digest(db)
    lock_down(db, db.parent)
    result = CliRunner().invoke(cli, ["runs", "--store", url])
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "schema revision 0002, older than this seal-platform's" in text and "make it writable" in text
    assert _digest(db) == before


def test_a_read_only_store_with_a_newer_schema_is_one_paragraph(tmp_path, lock_down):
    url, db = _store_at(tmp_path, None)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    lock_down(db)
    result = CliRunner().invoke(cli, ["show", "abc", "--store", url])
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "schema revision 9999_from_the_future, newer than this seal-platform knows" in text
    assert "upgrade seal-platform" in text


def test_an_empty_read_only_file_is_one_paragraph(tmp_path, lock_down):
    db = tmp_path / "empty.sqlite"
    db.write_bytes(b"")
    lock_down(db)
    result = CliRunner().invoke(cli, ["runs", "--store", f"sqlite:///{db}"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is empty and cannot be written" in " ".join(result.output.split())


def test_an_evaluation_over_several_categories_counts_its_tasks_once(tmp_path):
    from seal_platform.present.digest import load_digest
    from seal_platform.store import RunStore
    from seal_platform.types import EvalResult

    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r1", name="n", recipe="", config={"environment": "toy"}, config_hash="h", seed=0,
                     run_dir=str(tmp_path), plugins=[])
    store.add_evaluation("r1", 2, EvalResult(split="eval", per_category={"a": 50.0, "b": 25.0}, n_tasks=8))
    [point] = load_digest(store, "r1").evaluations["toy:eval"]
    assert point.n_tasks == 8 and point.per_category == {"a": 50.0, "b": 25.0}


@pytest.mark.parametrize("alembic", [False, True])
def test_read_commands_refuse_another_applications_database_and_change_nothing(tmp_path, alembic):
    """A read command pointed at someone else's SQLite file: one paragraph saying it is not a run store
    (no upgrade advice), and the file is byte for byte as it was: no tables added, no WAL switch."""
    db = tmp_path / "app.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users VALUES (1, 'ada')")
        if alembic:  # another application's Alembic-managed database
            conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
            conn.execute("INSERT INTO alembic_version VALUES ('1f2e3d4c5b6a')")
        conn.commit()
    before = _digest(db)
    for cmd in (["runs"], ["show", "x"], ["report", "x"], ["compare", "x", "y"]):
        result = CliRunner().invoke(cli, [*cmd, "--store", f"sqlite:///{db}"])
        text = " ".join(result.output.split())
        assert result.exit_code != 0 and "Traceback" not in result.output, (cmd, result.output)
        assert "is not a seal-platform run store" in text and "upgrade" not in text.lower(), (cmd, text)
    assert _digest(db) == before
    assert not (tmp_path / "app.sqlite-wal").exists() and not (tmp_path / "app.sqlite-shm").exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    result = CliRunner().invoke(cli, ["upgrade-store", "--store", f"sqlite:///{db}"])
    assert result.exit_code != 0 and "not a seal-platform run store" in result.output
    assert _digest(db) == before


def test_an_old_store_is_read_after_an_explicit_upgrade_only(tmp_path):
    url, db = _store_at(tmp_path, "0002")
    before = _digest(db)
    result = CliRunner().invoke(cli, ["runs", "--store", url])
    assert result.exit_code == 2 and "seal-platform upgrade-store --store" in " ".join(result.output.split())
    assert _digest(db) == before
    upgraded = CliRunner().invoke(cli, ["upgrade-store", "--store", url])
    assert upgraded.exit_code == 0 and "schema 0002 -> " in upgraded.output, upgraded.output
    assert CliRunner().invoke(cli, ["runs", "--store", url]).exit_code == 0
    again = CliRunner().invoke(cli, ["upgrade-store", "--store", url])  # already current: says so
    assert again.exit_code == 0 and "nothing to upgrade" in again.output and " -> " not in again.output, again.output


def test_an_unwritable_runs_folder_is_one_paragraph_naming_it_and_stores_nothing(toy_site, toy_recipe, tmp_path,
                                                                                 lock_down):
    runs = tmp_path / "runs"
    runs.mkdir()
    lock_down(runs)
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'store.sqlite'}"
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "--quiet", "--store", url])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{runs}/" in text and "cannot be written" in text and "runs_dir=" in text
    assert RunStore(url).list_runs() == []  # no row for a run that could not start
