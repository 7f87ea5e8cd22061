"""A store is untrusted input (issue 52): read commands write only where the user says, a damaged or hostile
value costs its row one warning line and never the command, another application's database is never changed,
and `runs` pages through a large store.

The fuzzer here damages one value of one row of a small store -- a malformed date, JSON that is not JSON, a
number stored as text, text stored as binary, a blob that is not zlib, truncated, a zlib bomb, or no trajectory --
and runs every read command on it: each ends with its usual exit status (0; 2 with one "Error:" paragraph where
the one thing it needs was left out), no traceback, every run still listed, and a warning line naming the run
and the row wherever the command read it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import zlib
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.capability import CapabilityState
from seal_platform.cli import cli
from seal_platform.store import RunStore, unpack_trajectory
from seal_platform.store.untrusted import MAX_TRAJECTORY_JSON, DamagedValue
from seal_platform.types import EvalResult, Interface, Message, ToolCall, Trajectory, TurnLabel, TurnVerdict

RUN, OTHER = "20261129-000000-aaaaaa", "20261129-000001-bbbbbb"


def _trajectory(run: str, group: str, sample: int) -> Trajectory:
    return Trajectory(
        id=f"{run}-{group}-{sample}", task_id=f"task-{group}", category="cat", group=group, sample=sample,
        reward=float(sample), messages=[Message(role="user", content="add 2 and 3"),
                                        Message(role="assistant", content="add(a=2, b=3)", trainable=True)],
        tool_calls=[ToolCall(turn=0, name="add", arguments={"a": 2, "b": 3}, result="5")],
        turn_verdicts=[TurnVerdict(turn=0, passed=bool(sample), reached=True)])


def _fill(store: RunStore, run: str, run_dir: Path) -> None:
    store.create_run(run, name=f"name-{run[-6:]}", recipe="toy.yaml", config={"environment": "toy"},
                     config_hash="hash", seed=7, run_dir=str(run_dir), plugins=[
                         {"name": "toy", "distribution": "seal-toy", "version": "0.1", "hooks": ["collect"]}])
    store.add_interface(run, Interface(), None)
    train = [_trajectory(run, "g0", 0), _trajectory(run, "g0", 1)]
    store.record_step(run, step=0, epoch=0, trajectories=train,
                      labels=[TurnLabel(trajectory_id=t.id, turn=0, label="wrong_sum", source="rules",
                                        confidence=0.5) for t in train],
                      label_weights={"wrong_sum": 1.5}, state=CapabilityState(), interface_revision=0,
                      metrics={"loss": 0.5}, timings={"collect": 1.0})
    store.add_evaluation(run, 1, EvalResult(split="eval", per_category={"cat": 50.0}, n_tasks=2,
                                            trajectories=[_trajectory(run, "e0", 0), _trajectory(run, "e0", 1)]))
    store.add_checkpoint(run, 0, str(run_dir / "checkpoints" / "step-000000"), {"files": 1})
    store.add_event(run, "crash", "boom", {"traceback": "the stored trace of a crash\n  boom\n"})
    store.finish_run(run, "failed", "boom")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A store with two runs, each with a step, an evaluation, labels, weights, an interface, a checkpoint and
    events; never changed (each test damages a copy)."""
    folder = tmp_path_factory.mktemp("pristine")
    store = RunStore(f"sqlite:///{folder / 'store.sqlite'}")
    for run in (RUN, OTHER):
        _fill(store, run, folder / run)
    store.close()
    return folder / "store.sqlite"


def _copy(pristine: Path, tmp_path: Path) -> Path:
    db = tmp_path / "store.sqlite"
    shutil.copy(pristine, db)
    return db


BOMB = zlib.compress(b" " * (MAX_TRAJECTORY_JSON + 2**20), 9)  # ~65 KiB that inflate past the bound
NOT_A_TRAJECTORY = zlib.compress(b'{"messages": "no"}')

# (table, column, value) written with sqlite3 into the first row of RUN in that table.
DAMAGES = [
    ("runs", "started_at", "not a date"),
    ("runs", "ended_at", "2026-13-45 99:99:99"),
    ("runs", "config", "{not json"),
    ("runs", "seed", "seven"),
    ("runs", "name", b"\x00\xff binary"),
    ("runs", "last_step", "three"),
    ("runs", "heartbeat_at", "soon"),
    ("run_plugins", "hooks", "[unclosed"),
    ("steps", "mean_reward", "high"),
    ("steps", "metrics", "[1, 2"),
    ("steps", "metrics", "[1, 2]"),  # JSON, but not an object
    ("steps", "created_at", "yesterday"),
    ("trajectories", "blob", b"not zlib at all"),
    ("trajectories", "blob", BOMB),
    ("trajectories", "blob", BOMB[: len(BOMB) // 2]),
    ("trajectories", "blob", NOT_A_TRAJECTORY),
    ("trajectories", "blob", "text, not a blob"),
    ("trajectories", "reward", "lots"),
    ("trajectories", "step", "first"),
    ("turn_labels", "confidence", "sure"),
    ("turn_labels", "turn", "second"),
    ("label_weights", "weight", "heavy"),
    ("evaluations", "pass_rate", "half"),
    ("evaluations", "created_at", "then"),
    ("interface_revisions", "content", "<xml/>"),
    ("checkpoints", "meta", "{"),
    ("events", "data", "{'python': 'repr'}"),
    ("events", "at", "at noon"),
]

READ_COMMANDS = [
    ["runs"], ["runs", "--json"], ["runs", "--limit", "1"],
    ["show", RUN], ["show", RUN, "--json"], ["show", RUN, "--traceback"], ["show", RUN, "--all-steps"],
    ["report", RUN, "--out", "OUT"],
    ["compare", RUN, OTHER], ["compare", RUN, OTHER, "--json"],
    ["transcripts", RUN], ["transcripts", RUN, "--json"], ["transcripts", RUN, "--eval"],
    ["transcripts", RUN, "--label", "nope"],
    ["transcripts", RUN, "--against", OTHER, "--plain"], ["transcripts", RUN, "--against", OTHER, "--eval", "--json"],
]


def _damage(db: Path, table: str, column: str, value: object) -> None:
    key = "id" if table == "runs" else "run_id"
    with closing(sqlite3.connect(db)) as conn, conn:
        rowid = conn.execute(f"SELECT rowid FROM {table} WHERE {key} = ? ORDER BY rowid LIMIT 1", (RUN,)).fetchone()[0]
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, rowid))
    with closing(sqlite3.connect(db)) as conn, conn:  # the damage is what a reader meets: the file itself is sound
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("table, column, value", DAMAGES,
                         ids=[f"{t}.{c}={str(v)[:12]!r}" for t, c, v in DAMAGES])
def test_a_damaged_value_costs_its_row_a_warning_line_never_the_command(pristine, tmp_path, table, column, value):
    db = _copy(pristine, tmp_path)
    _damage(db, table, column, value)
    before = db.read_bytes()
    store = ["--store", f"sqlite:///{db}"]
    runner = CliRunner()
    warned = []
    for command in READ_COMMANDS:
        command = [str(tmp_path / "page.html") if part == "OUT" else part for part in command]
        result = runner.invoke(cli, [*command, *store], terminal_width=200)
        shown = f"{command}: {result.output}"
        # 0, or -- where what the command needs is what was left out (the run's only evaluation, say) -- 2 with
        # its one-paragraph error.
        assert result.exit_code == 0 or (result.exit_code == 2 and "\nError: " in "\n" + result.output), shown
        assert result.exception is None or isinstance(result.exception, SystemExit), shown
        assert "Traceback (most recent call last)" not in result.output, shown
        if command[0] == "runs" and "--limit" not in command:
            assert RUN in result.output and OTHER in result.output, shown  # every run still listed
        warned += [line for line in result.output.splitlines() if line.startswith("warning: ") and RUN in line]
    assert warned, f"no command said that {table}.{column} of run {RUN} could not be read"
    assert all(OTHER not in line for line in warned)  # the other run is whole
    assert db.read_bytes() == before  # read commands changed nothing


def test_a_damaged_run_row_is_refused_by_resume_and_eval_with_one_paragraph(pristine, tmp_path):
    db = _copy(pristine, tmp_path)
    _damage(db, "runs", "config", "{not json")
    before = _dump(db)
    for command in (["run", "--resume", RUN, "--quiet"], ["eval", RUN, "--quiet"]):
        result = CliRunner().invoke(cli, [*command, "--store", f"sqlite:///{db}"])
        assert result.exit_code == 2, result.output
        assert f"run {RUN} cannot be used: its row in the store is damaged (config" in " ".join(result.output.split())
        assert "Traceback" not in result.output
    assert _dump(db) == before


def _dump(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as conn, conn:
        return list(conn.iterdump())


def test_blobs_inflate_under_the_platform_s_own_bound(tmp_path):
    good = _trajectory(RUN, "g", 0)
    from seal_platform.store import pack_trajectory

    assert unpack_trajectory(pack_trajectory(good)) == good
    for blob, said in ((BOMB, "inflates to more than"), (b"junk", "not zlib"), (BOMB[:100], "truncated"),
                       (NOT_A_TRAJECTORY, "not a trajectory"), ("text", "not binary")):
        with pytest.raises(DamagedValue, match=said):
            unpack_trajectory(blob)  # type: ignore[arg-type]
    # What the reader refuses, the writer does not write.
    huge = _trajectory(RUN, "g", 1)
    huge.messages.append(Message(role="tool", content="x" * MAX_TRAJECTORY_JSON))
    with pytest.raises(Exception, match="more than the"):
        pack_trajectory(huge)


# --- read commands write only where the user said ---------------------------------------------------------


def test_report_without_out_writes_in_the_current_directory_never_where_the_store_says(pristine, tmp_path,
                                                                                       monkeypatch):
    db = _copy(pristine, tmp_path)
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("keep me")
    missing = tmp_path / "no" / "such" / "folder"
    linked = tmp_path / "linked-run"
    linked.mkdir()
    (linked / "report.html").symlink_to(victim)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for run_dir in (missing, linked):
        with closing(sqlite3.connect(db)) as conn, conn:
            conn.execute("UPDATE runs SET run_dir = ? WHERE id = ?", (str(run_dir), RUN))
        result = CliRunner().invoke(cli, ["report", RUN, "--store", f"sqlite:///{db}"])
        assert result.exit_code == 0, result.output
        written = work / f"report-{RUN}.html"
        assert f"wrote {written}" in " ".join(result.output.split()) and written.read_text().startswith("<!DOCTYPE")
        written.unlink()
    assert not missing.exists() and not (tmp_path / "no").exists()  # no folder the store names was made
    assert victim.read_text() == "keep me" and (linked / "report.html").is_symlink()
    # An id from the store makes a file name only of safe characters.
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("UPDATE runs SET id = '../../x/y' WHERE id = ?", (OTHER,))
    result = CliRunner().invoke(cli, ["report", "../../x/y", "--store", f"sqlite:///{db}"])
    assert result.exit_code == 0 and (work / "report-_.._x_y.html").is_file(), result.output


def test_a_page_is_never_written_through_a_symbolic_link(pristine, tmp_path):
    from seal_platform.present.html_report import write_page

    db = _copy(pristine, tmp_path)
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    link = tmp_path / "page.html"
    link.symlink_to(victim)
    for command in (["report", RUN, "--out", str(link)], ["compare", RUN, OTHER, "--html", str(link)],
                    ["transcripts", RUN, "--against", OTHER, "--html", str(link), "--plain"]):
        result = CliRunner().invoke(cli, [*command, "--store", f"sqlite:///{db}"])
        assert result.exit_code == 2 and "is a symbolic link" in result.output, (command, result.output)
    assert victim.read_text() == "keep me"
    # A page replaces the file atomically (a new inode, nothing left behind); the run's own report (no folder
    # made for it) is refused where its folder is missing.
    target = tmp_path / "out.html"
    target.write_text("old")
    inode = target.stat().st_ino
    write_page(target, "<!DOCTYPE html>new")
    assert target.read_text() == "<!DOCTYPE html>new" and target.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    from seal_platform.errors import SealError

    with pytest.raises(SealError, match="there is no folder"):
        write_page(tmp_path / "gone" / "report.html", "x", make_folder=False)


# --- one "is this our store" check before anything is changed -------------------------------------------


def test_a_write_command_leaves_another_application_s_database_with_a_runs_table_untouched(tmp_path, toy_recipe,
                                                                                           toy_site):
    foreign = tmp_path / "tracker.sqlite"
    with closing(sqlite3.connect(foreign)) as conn, conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, distance REAL, started_at TEXT)")
        conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id INTEGER, count INTEGER)")
        conn.execute("INSERT INTO runs VALUES (1, 5.2, '2026-11-01')")
    before = foreign.read_bytes()
    url = f"sqlite:///{foreign}"
    for command in (["run", str(toy_recipe), "training.steps=1", "--store", url, "--quiet"],
                    ["run", "--resume", "1", "--store", url, "--quiet"], ["eval", "1", "--store", url],
                    ["upgrade-store", "--store", url], ["runs", "--store", url], ["show", "1", "--store", url]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2, (command, result.output)
        assert f"{foreign} is not a seal-platform run store (its tables: runs, steps)" in " ".join(
            result.output.split()), (command, result.output)
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tracker")) == ["tracker.sqlite"]
    with closing(sqlite3.connect(foreign)) as conn, conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


# --- runs --limit -----------------------------------------------------------------------------------------


def test_runs_lists_the_newest_n_and_says_how_many_there_are(pristine, tmp_path):
    db = _copy(pristine, tmp_path)
    store = ["--store", f"sqlite:///{db}"]
    one = CliRunner().invoke(cli, ["runs", "--limit", "1", *store], terminal_width=200)
    assert one.exit_code == 0 and OTHER in one.output and RUN not in one.output, one.output
    assert "the newest 1 of 2 runs; --limit N lists more (0: all)" in one.output
    everything = CliRunner().invoke(cli, ["runs", "--limit", "0", *store], terminal_width=200)
    assert RUN in everything.output and OTHER in everything.output and "--limit N" not in everything.output
    import json

    listed = json.loads(CliRunner().invoke(cli, ["runs", "--json", "--limit", "1", *store]).output)
    assert [r["id"] for r in listed] == [OTHER]


def test_the_newest_runs_are_read_through_the_started_at_index(pristine, tmp_path):
    db = _copy(pristine, tmp_path)
    from sqlalchemy import select
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from seal_platform.store import models as m

    query = select(m.Run).order_by(m.Run.started_at.desc()).limit(50)
    sql = str(query.compile(dialect=sqlite_dialect.dialect(), compile_kwargs={"literal_binds": True}))
    with closing(sqlite3.connect(db)) as conn, conn:
        plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    assert "ix_runs_started_at" in plan, plan
    assert os.path.exists(db)
