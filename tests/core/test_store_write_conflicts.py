"""Two processes writing one run (a takeover while the old owner still runs): a write the database refuses as
conflicting with what the other process wrote first is one paragraph (:class:`WriteConflict`, a StoreError)
saying so and naming the run's owner -- for every write of a run's rows (steps, evaluations, checkpoints,
interface revisions), not the database's constraint text with the SQL statement -- and nothing of it is kept.

The two processes are two RunStore objects on one SQLite file, as two processes would open it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from seal_platform.capability import CapabilityState
from seal_platform.errors import StoreError
from seal_platform.store import RunStore, WriteConflict
from seal_platform.types import EvalResult, Interface, Trajectory

RAW = ("IntegrityError", "UNIQUE", "FOREIGN KEY", "INSERT", "[SQL", "sqlite3", "constraint failed")


def _two_writers(tmp_path: Path) -> tuple[RunStore, RunStore]:
    """This process's store, which created run ``r`` (so owns it), and another process's on the same file."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    mine = RunStore(url)
    mine.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    return mine, RunStore(url)


def _clear(exc: BaseException) -> str:
    said = str(exc)
    assert isinstance(exc, StoreError) and isinstance(exc, WriteConflict), repr(exc)
    assert not [raw for raw in RAW if raw in said], said
    assert "\n" not in said, said  # one paragraph
    return said


def _owned_elsewhere(tmp_path: Path, status: str = "running") -> None:
    """The run's row as another process on another machine that took it over leaves it."""
    with sqlite3.connect(tmp_path / "store.sqlite") as conn:
        conn.execute("UPDATE runs SET status = ?, host = 'other-host', pid = 4242 WHERE id = 'r'", (status,))


def _evaluation(*trajectories: Trajectory) -> EvalResult:
    return EvalResult.from_trajectories("test", list(trajectories))


def test_an_evaluation_the_other_writer_recorded_first_is_one_paragraph(tmp_path):
    mine, other = _two_writers(tmp_path)
    result = _evaluation(Trajectory(task_id="t0", category="c", group="0:t0", reward=1.0),
                         Trajectory(task_id="t1", category="d", group="0:t1", reward=0.0))
    other.add_evaluation("r", 2, result)
    with pytest.raises(StoreError) as raised:  # its trajectories' keys are taken
        mine.add_evaluation("r", 2, result)
    said = _clear(raised.value)
    assert said.startswith("the evaluation at step 2 of run r was already recorded by another process"), said
    assert "this process owns the run and stops" in said, said
    # The other writer's rows as it wrote them; none of the refused write's.
    assert [(e.step, e.category) for e in mine.evaluations("r")] == [(2, "c"), (2, "d")]
    assert len(mine.trajectories("r", phase="eval")) == 2


def test_a_checkpoint_whose_run_another_process_removed_is_one_paragraph(tmp_path):
    # A checkpoint written again for a step replaces its row (test_store_keys): what another writer can make the
    # database refuse is its run.
    mine, other = _two_writers(tmp_path)
    mine.add_checkpoint("r", 1, str(tmp_path / "checkpoints" / "step-1"), {})
    with other.session() as s:  # the run's row gone under this writer (its checkpoint rows go with it)
        s.execute(text("DELETE FROM runs WHERE id = 'r'"))
    with pytest.raises(StoreError) as raised:
        mine.add_checkpoint("r", 3, str(tmp_path / "checkpoints" / "step-3"), {"plugins": []})
    said = _clear(raised.value)
    assert said.startswith("the checkpoint after step 3 of run r could not be recorded"), said
    assert "the run's row could not be read back" in said and "nothing of it was written" in said, said
    assert other.checkpoints("r") == []


def test_an_interface_revision_the_other_writer_recorded_first_names_the_run_s_new_owner(tmp_path):
    mine, other = _two_writers(tmp_path)
    base = Interface()
    mine.add_interface("r", base, None)
    _owned_elsewhere(tmp_path)  # taken over; the new owner evolved the interface first
    theirs = Interface(revision=1, parent=0, step=2, system_text="theirs", changes=["a"], driven_by=["x"])
    other.add_interface("r", theirs, base)
    with pytest.raises(StoreError) as raised:
        mine.add_interface("r", theirs.model_copy(update={"system_text": "mine"}), base)
    said = _clear(raised.value)
    assert said == ("run r was taken over by another process (pid 4242 on other-host, status running), which "
                    "recorded interface revision 1 before this one; this process stops without writing more.")
    assert [(r.revision, r.content["system_text"]) for r in mine.interfaces("r")] == [(0, base.system_text),
                                                                                      (1, "theirs")]


def test_a_step_the_other_writer_recorded_first_is_one_paragraph(tmp_path):
    mine, other = _two_writers(tmp_path)

    def record(store: RunStore, reward: float) -> None:
        store.record_step("r", step=0, epoch=0, trajectories=[Trajectory(task_id="t", category="c", group="0:t",
                                                                         reward=reward)],
                          labels=[], label_weights={"pass": reward}, state=CapabilityState(), interface_revision=0,
                          metrics={}, timings={})

    record(other, 1.0)
    with pytest.raises(StoreError) as raised:
        record(mine, 0.0)
    said = _clear(raised.value)
    assert said.startswith("step 0 of run r was already recorded by another process writing the same run"), said
    assert [(s.step, s.mean_reward) for s in mine.steps("r")] == [(0, 1.0)]
    assert [w.weight for w in mine.label_weights("r")] == [1.0]
    # A run that ended (its last owner elsewhere): who wrote it, without "taken over".
    _owned_elsewhere(tmp_path, "completed")
    with pytest.raises(StoreError) as raised:
        record(mine, 0.0)
    said = _clear(raised.value)
    assert said == ("step 0 of run r was already recorded by another process (the run's last owner: pid 4242 on "
                    "other-host, status completed); nothing of it was written again.")
