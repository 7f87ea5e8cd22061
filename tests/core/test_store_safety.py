"""The store opened by many processes at once, and each store problem as one paragraph naming the fix."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from seal_platform.errors import StoreError
from seal_platform.store import RunStore


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
