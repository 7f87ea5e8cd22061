"""One checkpoint per (run, step), one evaluation per (run, step, origin, benchmark, split): unique keys

A checkpoint row is the checkpoint after its step (the folder ``checkpoints/step-NNNNNN``, which a write for
that step replaces); an evaluation is the rows of one write, one per category, identified by its run, step,
origin (the run's schedule or the ``seal-platform eval`` command), benchmark and split. Before this revision
nothing kept a second row for the same key out (the ``eval`` command run twice on one checkpoint added a
second set of rows).

A store holding such duplicates keeps the newest and drops the rest here: of a checkpoint, the row written
last; of an evaluation, the rows of its last write (rows in the order they were written, a new write starting
where a category repeats, as ``seal-platform show`` has always read the command's rows). The trajectories of
a dropped evaluation stay (a trajectory row does not say which benchmark it was evaluated on). Each run that
lost rows gets one ``store_upgrade`` event saying how many, with the removed rows in its data (nothing
of the store is lost).

Revision ID: 0007
Revises: 0006
"""
from collections import defaultdict
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CHECKPOINT_KEY = ["run_id", "step"]
EVALUATION_KEY = ["run_id", "step", "origin", "benchmark", "split", "category"]


def _stale_checkpoints(conn) -> list[tuple[int, str]]:
    """(id, run) of every checkpoint row a later row of the same run and step replaces."""
    newest: dict[tuple[str, int], int] = {}
    stale = []
    for row_id, run_id, step in conn.execute(sa.text("SELECT id, run_id, step FROM checkpoints ORDER BY id")):
        if (run_id, step) in newest:
            stale.append((newest[(run_id, step)], run_id))
        newest[(run_id, step)] = row_id
    return stale


def _stale_evaluations(conn) -> list[tuple[int, str]]:
    """(id, run) of every evaluation row of a write that a later write of the same evaluation replaces."""
    writes: dict[tuple, list[list[tuple[int, str]]]] = defaultdict(list)  # key -> writes -> (id, category)
    rows = conn.execute(sa.text("SELECT id, run_id, step, origin, benchmark, split, category FROM evaluations "
                                "ORDER BY id"))
    for row_id, run_id, step, origin, benchmark, split, category in rows:
        key = (run_id, step, origin, benchmark, split)
        if not writes[key] or category in {cat for _, cat in writes[key][-1]}:
            writes[key].append([])
        writes[key][-1].append((row_id, category))
    return [(row_id, key[0]) for key, done in writes.items() for write in done[:-1] for row_id, _ in write]


def _plain(value):
    """A column value as JSON can hold it (times as ISO text)."""
    return value.isoformat() if isinstance(value, datetime) else value


def _rows(conn, table: str, columns: str, stale: list[tuple[int, str]]) -> dict[str, list[dict]]:
    """run -> the ``columns`` of its stale rows of ``table``, as plain values: what the event keeps of them."""
    ids = [row_id for row_id, _ in stale]
    out: dict[str, list[dict]] = defaultdict(list)
    for start in range(0, len(ids), 500):
        query = sa.text(f"SELECT run_id, {columns} FROM {table} WHERE id IN :ids ORDER BY id").bindparams(
            sa.bindparam("ids", expanding=True))
        for row in conn.execute(query, {"ids": ids[start: start + 500]}).mappings():
            out[row["run_id"]].append({k: _plain(v) for k, v in row.items() if k != "run_id"})
    return out


def _drop(conn, table: str, stale: list[tuple[int, str]]) -> dict[str, int]:
    ids = [row_id for row_id, _ in stale]
    for start in range(0, len(ids), 500):
        conn.execute(sa.text(f"DELETE FROM {table} WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True)),
                     {"ids": ids[start: start + 500]})
    per_run: dict[str, int] = defaultdict(int)
    for _, run_id in stale:
        per_run[run_id] += 1
    return per_run


def upgrade() -> None:
    conn = op.get_bind()
    stale_checkpoints, stale_evaluations = _stale_checkpoints(conn), _stale_evaluations(conn)
    # What is dropped is kept in the run's event: nothing of a store is lost by an upgrade.
    kept_checkpoints = _rows(conn, "checkpoints", "step, path, meta, created_at", stale_checkpoints)
    kept_evaluations = _rows(conn, "evaluations", "step, origin, benchmark, split, category, pass_rate, n_tasks, "
                             "created_at", stale_evaluations)
    checkpoints = _drop(conn, "checkpoints", stale_checkpoints)
    evaluations = _drop(conn, "evaluations", stale_evaluations)
    events = sa.table("events", sa.column("run_id", sa.String), sa.column("at", sa.DateTime(timezone=True)),
                      sa.column("kind", sa.String), sa.column("message", sa.Text), sa.column("data", sa.JSON))
    now = datetime.now(UTC)
    notes = []
    for run_id in sorted(set(checkpoints) | set(evaluations)):
        said = [f"{n} duplicate {what} row(s)" for what, n in (("checkpoint", checkpoints.get(run_id, 0)),
                                                                ("evaluation", evaluations.get(run_id, 0))) if n]
        notes.append({"run_id": run_id, "at": now, "kind": "store_upgrade",
                      "message": f"store upgrade 0007 (one checkpoint per step, one evaluation per step, origin, "
                                 f"benchmark and split) removed {' and '.join(said)}; the newest of each was kept, "
                                 f"the removed rows are in this event's data",
                      "data": {"revision": "0007", "checkpoint_rows": checkpoints.get(run_id, 0),
                               "evaluation_rows": evaluations.get(run_id, 0),
                               "removed_checkpoints": kept_checkpoints.get(run_id, []),
                               "removed_evaluations": kept_evaluations.get(run_id, [])}})
    if notes:
        op.bulk_insert(events, notes)
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.create_unique_constraint("uq_checkpoints_run_step", CHECKPOINT_KEY)
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.create_unique_constraint("uq_evaluations_key", EVALUATION_KEY)


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_constraint("uq_evaluations_key", type_="unique")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_constraint("uq_checkpoints_run_step", type_="unique")
