"""evaluations.origin: who wrote an evaluation row: "run" (the run's own schedule, its benchmarks included) or
"eval" (the `seal-platform eval` command, evaluating a checkpoint afterwards)

Before this revision both kinds shared the table with nothing to tell them apart. The command's rows are found
again from the event it wrote with them (kind "evaluation": "checkpoint after step S evaluated on SPLIT: ..."):
rows with no benchmark, at step S + 1, on SPLIT, written at most a minute before that event.

Revision ID: 0006
Revises: 0005
"""
import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COMMAND_EVENT = re.compile(r"checkpoint after step (\d+) evaluated on (\S+): ")


def _aware(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def upgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=20), nullable=False, server_default="run"))
    conn = op.get_bind()
    events = conn.execute(sa.text("SELECT run_id, at, message FROM events WHERE kind = 'evaluation'")).fetchall()
    for run_id, at, message in events:
        match = _COMMAND_EVENT.match(message or "")
        written = _aware(at)
        if not match or written is None:
            continue
        step, split = int(match.group(1)) + 1, match.group(2)
        rows = conn.execute(sa.text(
            "SELECT id, created_at FROM evaluations WHERE run_id = :run AND step = :step AND split = :split "
            "AND benchmark = ''"), {"run": run_id, "step": step, "split": split}).fetchall()
        ids = [row_id for row_id, created in rows
               if (c := _aware(created)) is not None and written - timedelta(minutes=1) <= c <= written]
        for row_id in ids:
            conn.execute(sa.text("UPDATE evaluations SET origin = 'eval' WHERE id = :id"), {"id": row_id})


def downgrade() -> None:
    with op.batch_alter_table("evaluations", schema=None) as batch_op:
        batch_op.drop_column("origin")
