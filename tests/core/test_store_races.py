"""Races on a run's store row between processes, each forced in one order (no sleeps): a second store opened
in a process must not drop that process's SQLite locks (else another process deletes the write-ahead log
under it and its reads go stale), a reader marking a dead owner's run `crashed` must not overwrite a resume
that claimed or finished the run after the read, and `finish_run` must not overwrite the row of a process
that took the run over after the read."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from seal_platform.store import RunStore

ROOT = Path(__file__).resolve().parents[2]

# Another process: "create" a run (and exit: the row is then `running` under a dead pid), or resume it as
# the ablation harness does ("claim" the row as read, then "finish" it).
OTHER = r"""
import sys
from seal_platform.store import RunStore
store = RunStore(sys.argv[1])
if sys.argv[2] == "create":
    store.create_run("r1", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir="/tmp", plugins=[])
else:
    row = store.get_run("r1")
    assert store.claim_run("r1", (row.status, row.pid, row.host, row.heartbeat_at), [])
    assert store.finish_run("r1", "completed")
"""


def _other_process(url: str, what: str) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-c", OTHER, url, what], env=env)
    assert proc.wait(timeout=120) == 0
    return proc.pid


@pytest.fixture
def dead_run(tmp_path: Path) -> tuple[Path, str, int]:
    """A store whose run r1 is `running` under the pid of a process that has exited."""
    db = tmp_path / "store.sqlite"
    url = f"sqlite:///{db}"
    return db, url, _other_process(url, "create")


def test_a_second_store_opened_in_a_process_keeps_its_other_connections_current(dead_run):
    """The CI failure of test_ablation_resume: the test process still had a connection to the store open (a
    raw sqlite3 one, freed only by the garbage collector) when it opened a RunStore; reading the file's header
    then closed a descriptor of the file, which drops every POSIX lock the process holds on it. The resuming
    process then found itself alone at its exit, checkpointed and deleted the write-ahead log, and the test
    process's connections went on reading the old log: the run read `crashed` under the killed process's pid
    after the resume had completed it."""
    db, url, killed = dead_run
    with closing(sqlite3.connect(db)) as held:  # a connection this process already has open on the store
        assert held.execute("SELECT status FROM runs").fetchone() == ("running",)
        store = RunStore(url)
        [row] = store.list_runs()
        assert (row.status, row.pid) == ("crashed", killed)
        resumed = _other_process(url, "resume")
        row = store.get_run("r1")
        assert (row.status, row.pid) == ("completed", resumed)
        assert held.execute("SELECT status, pid FROM runs").fetchone() == ("completed", resumed)


class _PauseBeforeUpdate:
    """Holds the thread that runs ``target`` just before its store session sends an ``UPDATE runs``, until
    released: the other side's writes land between that thread's read of the row and its write."""

    def __init__(self, store: RunStore, target: Any, *args: Any):
        self.reached, self.release = threading.Event(), threading.Event()
        self.result: list[Any] = []
        self.error: list[BaseException] = []
        self._store = store
        self._thread = threading.Thread(target=self._run, args=(target, *args))

    def _hook(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if threading.current_thread() is self._thread and statement.lstrip().upper().startswith("UPDATE RUNS"):
            self.reached.set()
            assert self.release.wait(60), "never released"

    def _run(self, target: Any, *args: Any) -> None:
        try:
            self.result.append(target(*args))
        except BaseException as exc:  # reported by join()
            self.error.append(exc)

    def __enter__(self) -> _PauseBeforeUpdate:
        event.listen(self._store.engine, "before_cursor_execute", self._hook)
        self._thread.start()
        assert self.reached.wait(60), "the thread never wrote the run's row"
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release.set()
        self._thread.join(60)
        if event.contains(self._store.engine, "before_cursor_execute", self._hook):
            event.remove(self._store.engine, "before_cursor_execute", self._hook)

    def join(self) -> Any:
        self.__exit__()
        if self.error:
            raise self.error[0]
        return self.result[0]


def _seen(store: RunStore) -> tuple:
    """The row as a resuming process reads it before its claim (without marking it: it is the reader's)."""
    from seal_platform.store import models as m

    with store.session() as s:
        row = s.get(m.Run, "r1")
        assert row is not None
        return (row.status, row.pid, row.host, row.heartbeat_at)


def test_a_reader_that_saw_the_dead_owner_does_not_mark_a_claimed_and_finished_run_crashed(dead_run):
    """A reader (`seal-platform runs`, another harness) reads the row `running` under the dead pid and decides
    it crashed; before its write lands, a resume claims the run and completes it. The mark must not land on
    the finished row."""
    _db, url, killed = dead_run
    store, resumer = RunStore(url), RunStore(url)
    with _PauseBeforeUpdate(store, store.get_run, "r1") as reader:  # parked between its read and its write
        seen = _seen(resumer)
        assert seen[:2] == ("running", killed)
        assert resumer.claim_run("r1", seen, [])
        assert resumer.finish_run("r1", "completed")
        returned = reader.join()
    assert (returned.status, returned.pid) == ("completed", os.getpid())
    row = store.get_run("r1")
    assert (row.status, row.pid) == ("completed", os.getpid())


def test_a_reader_does_not_mark_a_run_claimed_after_its_read_as_crashed(dead_run):
    """The same window while the resume still runs: the mark would make the live resumer's next heartbeat
    fail, and the resumer stop as if another process had taken its run over."""
    _db, url, killed = dead_run
    store, resumer = RunStore(url), RunStore(url)
    with _PauseBeforeUpdate(store, store.list_runs) as reader:
        seen = _seen(resumer)
        assert seen[:2] == ("running", killed)
        assert resumer.claim_run("r1", seen, [])
        [returned] = reader.join()
    assert (returned.status, returned.pid) == ("running", os.getpid())
    assert resumer.beat("r1")  # still the resumer's
    assert store.get_run("r1").status == "running"


def test_finish_leaves_the_row_of_a_process_that_took_the_run_over_after_the_read(tmp_path):
    """The owner's finish_run reads its row, then another host's process takes the run over (a --takeover
    resume) before the finish writes: the finish must not overwrite the new owner's row."""
    db = tmp_path / "store.sqlite"
    store = RunStore(f"sqlite:///{db}")
    store.create_run("r1", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    with _PauseBeforeUpdate(store, store.finish_run, "r1", "failed", "boom") as finish:
        with closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("UPDATE runs SET status = 'running', host = 'other-host', pid = 4242 WHERE id = 'r1'")
        assert finish.join() is False
    row = store.get_run("r1")
    assert (row.status, row.pid, row.host, row.error) == ("running", 4242, "other-host", None)
