"""The run store on PostgreSQL (any SQLAlchemy URL works, not only SQLite). Runs when
``SEAL_TEST_POSTGRES_URL`` names a server database the tests may create databases next to, e.g.
``postgresql+psycopg://postgres@/postgres?host=/tmp/pg&port=55432``; skipped otherwise."""

from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import pytest

URL = os.environ.get("SEAL_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(not URL, reason="SEAL_TEST_POSTGRES_URL not set (no PostgreSQL server)")


@pytest.fixture
def pg_url():
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"seal_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def test_a_run_round_trips_through_postgres(pg_url):
    from seal_platform.capability import CapabilityState
    from seal_platform.store import RunStore
    from seal_platform.types import EvalResult, Interface, Trajectory, TurnLabel

    store = RunStore(pg_url)
    assert store.schema_revision() == RunStore.head_revision()
    store.create_run("r1", name="pg", recipe="", config={"a": 1}, config_hash="h", seed=3, run_dir="/tmp", plugins=[])
    store.add_interface("r1", Interface(revision=0, system_text="hi"), None)
    for step in range(3):
        trajs = [Trajectory(task_id="t", category="c", group=f"{step}", reward=1.0)]
        store.record_step("r1", step=step, epoch=0, trajectories=trajs,
                          labels=[TurnLabel(trajectory_id=trajs[0].id, turn=0, label="pass", source="x")],
                          label_weights={"pass": 1.0}, state=CapabilityState(), interface_revision=0,
                          metrics={"loss": 0.5}, timings={})
    store.add_evaluation("r1", 3, EvalResult(split="eval", per_category={"c": 50.0}, n_tasks=2))
    assert store.discard_after("r1", 1) == 1
    store.finish_run("r1", "completed")
    again = RunStore(pg_url)
    assert [s.step for s in again.steps("r1")] == [0, 1] and again.get_run("r1").status == "completed"
    assert again.evaluations("r1") == [] and len(again.trajectories("r1")) == 2


def _open(url, barrier, errors):
    try:
        from seal_platform.store import RunStore

        barrier.wait(timeout=60)
        RunStore(url).add_event(None, "hello", "x")
    except BaseException as exc:
        errors.put(f"{type(exc).__name__}: {exc}")


def test_many_processes_create_the_same_postgres_store(pg_url):
    from seal_platform.store import RunStore

    ctx = mp.get_context("spawn")
    barrier, errors = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(pg_url, barrier, errors)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert errors.empty(), errors.get()
    assert all(p.exitcode == 0 for p in procs)
    assert RunStore(pg_url).schema_revision() == RunStore.head_revision()
