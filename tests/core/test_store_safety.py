"""The store opened by many processes at once, and each store problem as one paragraph naming the fix."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from seal_platform.errors import StoreError
from seal_platform.store import RunStore

from .conftest import damaged_store_files


def _open_and_write(url: str, index: int, barrier, errors) -> None:
    try:
        barrier.wait(timeout=60)
        store = RunStore(url)
        store.add_event(None, "hello", f"process {index}")
        store.close()
    except BaseException as exc:  # reported to the parent
        errors.put(f"{index}: {type(exc).__name__}: {exc}")


def test_many_processes_create_the_same_new_store_at_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'new' / 'store.sqlite'}"
    ctx = mp.get_context("fork")
    barrier, errors = ctx.Barrier(9), ctx.Queue()
    procs = [ctx.Process(target=_open_and_write, args=(url, i, barrier, errors)) for i in range(9)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    failures = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
    assert failures == [] and all(p.exitcode == 0 for p in procs)
    store = RunStore(url)
    assert store.schema_revision() == RunStore.head_revision()
    with sqlite3.connect(tmp_path / "new" / "store.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE kind = 'hello'").fetchone()[0] == 9
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1


def test_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes\n")
    with pytest.raises(StoreError, match=r"notes.sqlite is not a seal-platform database .*give --store"):
        RunStore(f"sqlite:///{path}")
    assert path.read_text() == "these are my notes\n"  # untouched


def test_a_directory_given_as_the_store(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        RunStore(f"sqlite:///{tmp_path}")


def test_a_store_with_a_newer_schema(tmp_path):
    path = tmp_path / "store.sqlite"
    RunStore(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(StoreError, match=r"schema revision 9999_from_the_future, newer than .*upgrade seal-platform"):
        RunStore(f"sqlite:///{path}")


def test_a_read_only_store(tmp_path):
    path = tmp_path / "store.sqlite"
    store = RunStore(f"sqlite:///{path}")
    store.create_run("r1", name="x", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    store.close()
    read_only = RunStore(f"sqlite:///file:{path}?mode=ro&uri=true")
    with pytest.raises(StoreError, match=r"cannot be written .*make the file and its directory writable"):
        read_only.add_event("r1", "note", "x")


def _foreign_database(path):
    """Another application's SQLite database (rollback journal, one table with a row)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'ada')")
    return path.read_bytes()


@pytest.mark.parametrize("create", [True, False])
def test_another_applications_database_is_refused_and_left_byte_for_byte_unchanged(tmp_path, create):
    path = tmp_path / "customers.sqlite"
    before = _foreign_database(path)
    with pytest.raises(StoreError, match=r"customers.sqlite is not a seal-platform run store \(its tables: "
                                         r"customers\); nothing was changed: give --store"):
        RunStore(f"sqlite:///{path}", create=create)
    assert path.read_bytes() == before  # no tables added, no switch to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["customers.sqlite"]  # no -wal, -shm or .lock either
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["customers"]


def test_an_existing_store_is_not_created_where_none_is(tmp_path):
    missing = tmp_path / "typo.sqlite"
    with pytest.raises(StoreError, match=rf"no run store at {missing}: nothing was created"):
        RunStore(f"sqlite:///{missing}", create=False)
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match=r"empty.sqlite is an empty database, not a seal-platform run store"):
        RunStore(f"sqlite:///{empty}", create=False)
    assert empty.read_bytes() == b""
    store = RunStore(f"sqlite:///{empty}")  # a new store where one is to be made: as before
    store.add_event(None, "hello", "x")
    store.close()
    assert [e.kind for e in RunStore(f"sqlite:///{empty}", create=False).events(None)] == ["hello"]  # it exists now


@pytest.mark.parametrize("how", [dict(read_only=True), dict(create=False), dict()])
def test_a_damaged_store_is_one_paragraph(tmp_path, how):
    for path in damaged_store_files(tmp_path):
        before = path.read_bytes()
        with pytest.raises(StoreError, match=rf"run store {path} is not a usable SQLite database \((database disk "
                                             r"image is malformed|file is not a database)\): give --store"):
            RunStore(f"sqlite:///{path}", **how)
        assert path.read_bytes() == before


def test_a_missing_database_driver_is_one_paragraph_naming_it():
    import importlib.util

    if importlib.util.find_spec("pg8000") is not None:
        pytest.skip("pg8000 is installed")
    with pytest.raises(StoreError, match=r"cannot open run store postgresql\+pg8000://x@127.0.0.1:1/x: its database "
                                         r"driver for 'postgresql\+pg8000' \(pg8000\) is not installed: install it"):
        RunStore("postgresql+pg8000://x@127.0.0.1:1/x")


def test_cli_errors_for_bad_stores_are_one_paragraph(tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    path = tmp_path / "store.sqlite"
    path.write_bytes(b"\x00\x01 not sqlite")
    for args in (["runs"], ["show", "abc"], ["report", "abc"]):
        result = CliRunner().invoke(cli, [*args, "--store", f"sqlite:///{path}"])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and "not a seal-platform database" in result.output


def test_a_kill_during_store_creation_leaves_a_store_the_next_open_migrates(tmp_path):
    # Found by benchmarks/kill_anywhere.py: the sqlite3 driver committed each CREATE TABLE on its own, so a
    # kill mid-migration left tables without an alembic_version and every later open failed.
    import os
    import random
    import signal
    import time

    rng = random.Random(0)
    start = time.monotonic()
    RunStore(f"sqlite:///{tmp_path / 'timing.sqlite'}").close()
    full = time.monotonic() - start
    for i in range(12):
        url = f"sqlite:///{tmp_path / f'store-{i}.sqlite'}"
        pid = os.fork()
        if pid == 0:
            try:
                RunStore(url)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, full))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        store = RunStore(url)
        assert store.schema_revision() == RunStore.head_revision()
        store.add_event(None, "ok", "opened after a kill")
        store.close()
