"""runs.started_at indexed: `seal-platform runs` lists the newest runs first, a page at a time (--limit), in
milliseconds on a store of tens of thousands of runs instead of sorting them all

Revision ID: 0008
Revises: 0007
"""
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_started_at"), ["started_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_started_at"))
