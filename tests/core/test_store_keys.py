"""One checkpoint per (run, step) and one evaluation per (run, step, origin, benchmark, split) (revision 0007):
a checkpoint written again replaces its row, the ``eval`` command's evaluation of a checkpoint replaces the one
it made before, a second own evaluation of a step is another writer's (a WriteConflict, nothing written), and
upgrading a store that holds duplicates keeps the newest of each and says so."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy.exc import IntegrityError

from seal_platform.store import EVAL_BY_COMMAND, EVAL_BY_RUN, RunStore, WriteConflict, alembic_config
from seal_platform.types import EvalResult, Trajectory


def _store(tmp_path) -> RunStore:
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="r", recipe="", config={"environment": "env"}, config_hash="h", seed=0,
                     run_dir=str(tmp_path), plugins=[])
    return store


def _evaluations(store, origin=EVAL_BY_RUN):
    return sorted((e.step, e.origin, e.benchmark, e.split, e.category, e.pass_rate, e.n_tasks)
                  for e in store.evaluations("r", origin=origin))


def test_a_checkpoint_written_again_for_a_step_replaces_its_row(tmp_path):
    store = _store(tmp_path)
    store.add_checkpoint("r", 1, "/old/step-000001", {"plugins": ["old"]})
    store.add_checkpoint("r", 2, "/old/step-000002", {})
    store.add_checkpoint("r", 1, "/new/step-000001", {"plugins": ["new"]})
    assert [(c.step, c.path, c.meta) for c in store.checkpoints("r")] == [
        (1, "/new/step-000001", {"plugins": ["new"]}), (2, "/old/step-000002", {})]


def test_the_eval_command_evaluating_a_checkpoint_again_replaces_its_evaluation(tmp_path):
    store = _store(tmp_path)
    store.add_evaluation("r", 2, EvalResult(split="eval", per_category={"a": 50.0}, n_tasks=4), benchmark="env")
    store.add_evaluation("r", 2, EvalResult(split="test", per_category={"a": 0.0, "b": 10.0}, n_tasks=2),
                         benchmark="env", origin=EVAL_BY_COMMAND)
    store.add_evaluation("r", 2, EvalResult(split="eval", per_category={"a": 75.0}, n_tasks=4),
                         benchmark="env", origin=EVAL_BY_COMMAND)
    # Measured again on "test", with another category set: the newest measurement, whole.
    store.add_evaluation("r", 2, EvalResult(split="test", per_category={"a": 20.0, "c": 30.0}, n_tasks=3),
                         benchmark="env", origin=EVAL_BY_COMMAND)
    assert _evaluations(store, EVAL_BY_COMMAND) == [
        (2, "eval", "env", "eval", "a", 75.0, 4),
        (2, "eval", "env", "test", "a", 20.0, 3), (2, "eval", "env", "test", "c", 30.0, 3)]
    assert _evaluations(store) == [(2, "run", "env", "eval", "a", 50.0, 4)]  # the run's own, untouched
    # What was replaced is kept in events, the earlier measurement whole.
    kept = [e.data for e in store.events("r") if e.kind == "evaluation_replaced"]
    assert [(d["split"], [(r["category"], r["pass_rate"], r["n_tasks"]) for r in d["rows"]]) for d in kept] == [
        ("test", [("a", 0.0, 2), ("b", 10.0, 2)])]


def test_a_second_own_evaluation_of_a_step_is_refused_and_writes_nothing(tmp_path):
    store = _store(tmp_path)
    first = EvalResult.from_trajectories("eval", [Trajectory(task_id="t0", category="a", group="e", reward=1.0)])
    store.add_evaluation("r", 2, first, benchmark="env")
    again = EvalResult.from_trajectories("eval", [Trajectory(task_id="t0", category="a", group="e", reward=0.0)])
    with pytest.raises(WriteConflict) as raised:
        store.add_evaluation("r", 2, again, benchmark="env")
    said = str(raised.value)
    assert said.startswith("the evaluation at step 2 of run r was already recorded by another process writing the "
                           "same run"), said
    assert _evaluations(store) == [(2, "run", "env", "eval", "a", 100.0, 1)]
    assert [t.id for t in store.trajectories("r", phase="eval")] == [first.trajectories[0].id]
    # Another benchmark, split or step is another evaluation.
    store.add_evaluation("r", 2, EvalResult(split="ood", per_category={"a": 1.0}, n_tasks=1), benchmark="env-ood")
    store.add_evaluation("r", 3, EvalResult(split="eval", per_category={"a": 2.0}, n_tasks=1), benchmark="env")
    assert len(_evaluations(store)) == 3


def _insert(conn, table: str, **row) -> None:
    columns = ", ".join(f'"{c}"' for c in row)
    conn.exec_driver_sql(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' for _ in row)})",
                         tuple(row.values()))


def test_upgrading_a_0006_store_with_duplicates_keeps_the_newest_and_says_so(tmp_path):
    store = _store(tmp_path)
    store.create_run("q", name="q", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    at = "2026-11-01 00:00:00"
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0006")
        # Checkpoints: step 1 written twice, step 2 once.
        for step, path in ((1, "/old-1"), (2, "/only-2"), (1, "/new-1")):
            _insert(conn, "checkpoints", run_id="r", step=step, path=path, meta="{}", created_at=at)

        def evaluation(run, step, origin, split, rates):
            for category, rate in rates.items():
                _insert(conn, "evaluations", run_id=run, step=step, split=split, benchmark="env", origin=origin,
                        category=category, pass_rate=rate, n_tasks=4, created_at=at)

        # The eval command run three times on the checkpoint after step 1 (on "test"), once on "eval".
        evaluation("r", 2, "eval", "test", {"a": 0.0, "b": 10.0})
        evaluation("r", 2, "eval", "eval", {"a": 60.0})
        evaluation("r", 2, "eval", "test", {"a": 5.0, "b": 15.0})
        evaluation("r", 2, "eval", "test", {"b": 40.0, "c": 30.0})
        # The run's own evaluation at step 0 of run q written twice; run r's once.
        evaluation("q", 0, "run", "eval", {"a": 1.0, "b": 2.0})
        evaluation("q", 0, "run", "eval", {"a": 3.0, "b": 4.0})
        evaluation("r", 0, "run", "eval", {"a": 9.0})
    upgraded = RunStore(store.url)
    assert upgraded.schema_revision() == "0008" == RunStore.head_revision()
    assert [(c.step, c.path) for c in upgraded.checkpoints("r")] == [(1, "/new-1"), (2, "/only-2")]
    assert sorted((e.split, e.category, e.pass_rate) for e in upgraded.evaluations("r", origin=EVAL_BY_COMMAND)) == [
        ("eval", "a", 60.0), ("test", "b", 40.0), ("test", "c", 30.0)]
    assert [(e.category, e.pass_rate) for e in upgraded.evaluations("r", origin=EVAL_BY_RUN)] == [("a", 9.0)]
    assert [(e.category, e.pass_rate) for e in upgraded.evaluations("q")] == [("a", 3.0), ("b", 4.0)]
    said = {run: [(e.message, e.data) for e in upgraded.events(run) if e.kind == "store_upgrade"] for run in "rq"}
    t = at  # as the database gives it back (SQLite: the text written)
    assert said["r"] == [("store upgrade 0007 (one checkpoint per step, one evaluation per step, origin, benchmark "
                          "and split) removed 1 duplicate checkpoint row(s) and 4 duplicate evaluation row(s); the "
                          "newest of each was kept, the removed rows are in this event's data",
                          {"revision": "0007", "checkpoint_rows": 1, "evaluation_rows": 4,
                           "removed_checkpoints": [{"step": 1, "path": "/old-1", "meta": "{}", "created_at": t}],
                           "removed_evaluations": [
                               {"step": 2, "origin": "eval", "benchmark": "env", "split": "test", "category": c,
                                "pass_rate": rate, "n_tasks": 4, "created_at": t}
                               for c, rate in (("a", 0.0), ("b", 10.0), ("a", 5.0), ("b", 15.0))]})]
    assert said["q"] == [("store upgrade 0007 (one checkpoint per step, one evaluation per step, origin, benchmark "
                          "and split) removed 2 duplicate evaluation row(s); the newest of each was kept, the "
                          "removed rows are in this event's data",
                          {"revision": "0007", "checkpoint_rows": 0, "evaluation_rows": 2, "removed_checkpoints": [],
                           "removed_evaluations": [
                               {"step": 0, "origin": "run", "benchmark": "env", "split": "eval", "category": c,
                                "pass_rate": rate, "n_tasks": 4, "created_at": t}
                               for c, rate in (("a", 1.0), ("b", 2.0))]})]
    # The keys hold from now on, for every writer.
    with upgraded.engine.begin() as conn, pytest.raises(IntegrityError):
        _insert(conn, "checkpoints", run_id="r", step=2, path="/again", meta="{}", created_at=at)
    with upgraded.engine.begin() as conn, pytest.raises(IntegrityError):
        _insert(conn, "evaluations", run_id="q", step=0, split="eval", benchmark="env", origin="run", category="a",
                pass_rate=0.0, n_tasks=1, created_at=at)
    # And back: the downgrade drops the keys, nothing else.
    with upgraded.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0006")
        _insert(conn, "checkpoints", run_id="r", step=2, path="/again", meta="{}", created_at=at)
    assert RunStore(store.url, migrate=False).schema_revision() == "0006"
