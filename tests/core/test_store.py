"""The run store: migrations, WAL, one transaction per step, crashed runs."""

from __future__ import annotations

import sqlite3

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from seal_platform.capability import CapabilityState
from seal_platform.errors import StoreError
from seal_platform.store import RunStore, alembic_config
from seal_platform.store.models import Base
from seal_platform.types import Interface, Message, Trajectory, TurnLabel


def _url(tmp_path, name="s.sqlite"):
    return f"sqlite:///{tmp_path / name}"


def test_fresh_store_is_at_head_in_wal_mode_and_matches_the_models(tmp_path):
    store = RunStore(_url(tmp_path))
    assert store.schema_revision() == store.head_revision() == "0008"
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_old_schema_with_data_is_upgraded_in_place(tmp_path):
    store = RunStore(_url(tmp_path), migrate=False)
    store.migrate("0001")
    assert store.schema_revision() == "0001"
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (id, name, recipe, config, config_hash, seed, status, started_at, host, run_dir) "
            "VALUES ('r1', 'old', '', '{}', 'h', 1, 'completed', '2026-01-01 00:00:00', 'h', '')")
        conn.exec_driver_sql(
            "INSERT INTO trajectories (id, run_id, step, phase, task_id, category, \"group\", sample, reward, "
            "interface_revision, finish, blob) "
            "VALUES ('t1', 'r1', 0, 'train', 'x', 'c', 'g', 0, 1.0, 0, 'completed', x'00')"
        )
        columns = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(trajectories)")]
    assert "generated_tokens" not in columns
    reopened = RunStore(_url(tmp_path))  # opening migrates to head
    assert reopened.schema_revision() == RunStore.head_revision() == "0008"
    assert reopened.get_run("r1").name == "old"
    with reopened.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT generated_tokens FROM trajectories WHERE id='t1'").scalar() == 0
    with reopened.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0001")
    assert RunStore(_url(tmp_path), migrate=False).schema_revision() == "0001"


def _traj(i, reward):
    return Trajectory(task_id=f"t{i}", category="c", group=f"0:t{i}", reward=reward)


def test_step_is_one_transaction(tmp_path):
    store = RunStore(_url(tmp_path))
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    good = [_traj(0, 1.0), _traj(1, 0.0)]
    store.record_step("r", step=0, epoch=0, trajectories=good, labels=[], label_weights={"pass": 1.0},
                      state=CapabilityState(), interface_revision=0, metrics={"loss": 0.5}, timings={})
    dup = [_traj(2, 1.0), good[0]]  # reusing a trajectory id violates the primary key half-way through
    with pytest.raises(StoreError):
        store.record_step("r", step=1, epoch=0, trajectories=dup, labels=[], label_weights={"pass": 1.2},
                          state=CapabilityState(), interface_revision=0, metrics={}, timings={})
    assert [s.step for s in store.steps("r")] == [0]
    assert len(store.trajectories("r")) == 2
    assert [(w.step, w.weight) for w in store.label_weights("r")] == [(0, 1.0)]
    assert store.get_run("r").last_step == 0


def test_trajectories_round_trip_compressed(tmp_path):
    store = RunStore(_url(tmp_path))
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    t = _traj(0, 1.0)
    t.messages.append(Message(role="assistant", content="x" * 5000, token_ids=list(range(100)), trainable=True))
    label = TurnLabel(trajectory_id=t.id, turn=0, label="pass", source="s")
    store.record_step("r", step=0, epoch=0, trajectories=[t], labels=[label], label_weights={},
                      state=CapabilityState(), interface_revision=0, metrics={}, timings={})
    (back,) = store.trajectories("r")
    assert back == t
    with sqlite3.connect(tmp_path / "s.sqlite") as conn:
        (size,) = conn.execute("SELECT length(blob) FROM trajectories").fetchone()
        (tokens,) = conn.execute("SELECT generated_tokens FROM trajectories").fetchone()
    assert size < 1000 and tokens == 100


def test_interfaces_store_their_diff(tmp_path):
    store = RunStore(_url(tmp_path))
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    base = Interface()
    new = Interface(
        revision=1,
        parent=0,
        step=3,
        system_text="Do not invent tools.",
        changes=["note"],
        driven_by=["invalid_tool_call"],
    )
    store.add_interface("r", base, None)
    store.add_interface("r", new, base)
    rows = store.interfaces("r")
    assert [r.revision for r in rows] == [0, 1]
    assert "+  Do not invent tools." in rows[1].diff.splitlines()
    # A guideline added to a multi-line system text is one added line, not the whole text again.
    longer = new.model_copy(update={"revision": 2, "parent": 1, "system_text": "Do not invent tools.\nRead errors."})
    changed = [line for line in longer.diff(new).splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["+  Read errors."]
    assert store.interface("r", 1) == new


def test_dead_running_run_reads_as_crashed_and_unknown_ids_are_clear(tmp_path):
    store = RunStore(_url(tmp_path))
    store.create_run("20260101-abc", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    with store.session() as s:
        from seal_platform.store.models import Run
        s.get(Run, "20260101-abc").pid = 2**22 + 12345  # no such process
    assert store.get_run("20260101").status == "crashed"  # unique prefix works
    with pytest.raises(StoreError, match="no run 'zzz'"):
        store.get_run("zzz")


def test_run_id_prefix_and_suffix_take_like_wildcards_literally(tmp_path):
    store = RunStore(_url(tmp_path))
    for run_id in ("20260101-000000-1b7cab", "20260102-000000-2c8dbc", "20260103-000000-3d9ecd"):
        store.create_run(run_id, name="n", recipe="", config={}, config_hash="h", seed=0, run_dir="", plugins=[])
    assert store.get_run("1b7cab").id == "20260101-000000-1b7cab"  # a suffix
    assert store.get_run("20260102").id == "20260102-000000-2c8dbc"  # a prefix
    # "%" and "_" are characters of the id typed, not SQL LIKE wildcards matching any id.
    for typed in ("%1b7cab", "%", "_", "2026010_", "20260101-000000-1b7ca_"):
        with pytest.raises(StoreError, match=f"no run '{typed}'"):
            store.get_run(typed)


def test_lone_surrogates_from_model_output_are_replaced_counted_and_stored(tmp_path):
    """json.loads turns the escape "\\ud800" in a model's tool-call arguments into a lone surrogate, which
    has no UTF-8 encoding: the store write (and every later read or print) must not fail on it."""
    import json as _json

    from seal_platform.types import Message, ToolCall, Trajectory

    args = _json.loads('{"path": "a\\ud800b", "\\udfff": ["\\ud83d\\ude00 ok"]}')  # one valid pair stays
    traj = Trajectory(task_id="t", category="c", group="g")
    traj.messages.append(Message(role="assistant", content="x\ud800"))  # valid from construction on
    traj.tool_calls.append(ToolCall(turn=0, name="ls", arguments=args))
    store = RunStore(f"sqlite:///{tmp_path / 's.sqlite'}")
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    from seal_platform.capability import CapabilityState

    store.record_step("r", step=0, epoch=0, trajectories=[traj], labels=[], label_weights={}, state=CapabilityState(),
                      interface_revision=0, metrics={}, timings={})
    (back,) = store.trajectories("r")
    assert back.messages[0].content == "x\ufffd"
    assert back.tool_calls[0].arguments == {"path": "a\ufffdb", "\ufffd": ["\U0001F600 ok"]}
    assert back.metadata["replaced_surrogates"] == 2  # those of the tool call (a message's are made valid earlier)
    back.model_dump_json().encode("utf-8")


def test_free_text_of_the_core_types_is_valid_from_construction(tmp_path):
    """A tool's error quoting a model-chosen argument name ("got an unexpected keyword argument '\ud800'") or a
    judge's rationale can hold a lone surrogate: the message (which a tokenizer reads before any trajectory
    exists) and the label hold valid text, and the step with both is stored."""
    from seal_platform.capability import CapabilityState
    from seal_platform.types import Interface, Message, Trajectory, TurnLabel

    message = Message(role="tool", content="got an unexpected keyword argument '\ud800'")
    assert message.content == "got an unexpected keyword argument '\ufffd'"
    message.content.encode("utf-8")
    assert Message(role="user", content="\U0001F600 ok").content == "\U0001F600 ok"  # valid text stays
    label = TurnLabel(trajectory_id="t", turn=0, label="x\udfff", source="s", rationale="because \ud800")
    assert (label.label, label.rationale) == ("x\ufffd", "because \ufffd")
    assert Interface(system_text="\ud800").system_text == "\ufffd"
    traj = Trajectory(task_id="t", category="c", group="g", messages=[message])
    store = RunStore(f"sqlite:///{tmp_path / 's.sqlite'}")
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    store.record_step(
        "r",
        step=0,
        epoch=0,
        trajectories=[traj],
        labels=[label.model_copy(update={"trajectory_id": traj.id})],
        label_weights={},
        state=CapabilityState(),
        interface_revision=0,
        metrics={},
        timings={},
    )
    assert store.labels("r")[0].rationale == "because \ufffd"
