"""The run store's tables (SQLAlchemy 2 declarative). Change them only together with a new migration in
``migrations/versions``; a test checks the two agree. JSON and date columns read through the tolerant types of
:mod:`.untrusted` (the same column types in the database)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .untrusted import TolerantDateTime, TolerantJSON


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    recipe: Mapped[str] = mapped_column(Text, default="")
    config: Mapped[dict] = mapped_column(TolerantJSON)
    config_hash: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="running")
    # Indexed (revision 0008): `runs` lists the newest first, a page at a time.
    started_at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow, index=True)
    ended_at: Mapped[datetime | None] = mapped_column(TolerantDateTime(timezone=True), nullable=True)
    host: Mapped[str] = mapped_column(String(200), default="")
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Set when the run is created or taken over and refreshed by its owner every HEARTBEAT_S seconds while it
    # runs; a ``running`` row whose heartbeat is older than STALE_AFTER_S belongs to a process that is gone.
    heartbeat_at: Mapped[datetime | None] = mapped_column(TolerantDateTime(timezone=True), nullable=True)
    run_dir: Mapped[str] = mapped_column(Text, default="")
    last_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class RunPlugin(Base):
    __tablename__ = "run_plugins"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    distribution: Mapped[str | None] = mapped_column(String(200), nullable=True)
    version: Mapped[str | None] = mapped_column(String(100), nullable=True)
    status: Mapped[str] = mapped_column(String(20))
    hooks: Mapped[list] = mapped_column(TolerantJSON, default=list)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class Step(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_steps_run_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer)
    mean_reward: Mapped[float] = mapped_column(Float)
    n_trajectories: Mapped[int] = mapped_column(Integer)
    interface_revision: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict] = mapped_column(TolerantJSON, default=dict)
    timings: Mapped[dict] = mapped_column(TolerantJSON, default=dict)
    capability_state: Mapped[dict] = mapped_column(TolerantJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow)


class TrajectoryRow(Base):
    __tablename__ = "trajectories"
    __table_args__ = (Index("ix_trajectories_run_step", "run_id", "step"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(10))  # train | eval
    task_id: Mapped[str] = mapped_column(String(200))
    category: Mapped[str] = mapped_column(String(100))
    group: Mapped[str] = mapped_column(String(300))
    sample: Mapped[int] = mapped_column(Integer)
    reward: Mapped[float] = mapped_column(Float)
    interface_revision: Mapped[int] = mapped_column(Integer)
    finish: Mapped[str] = mapped_column(String(50))
    generated_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The full trajectory (messages, token ids, calls, verdicts) as zlib-compressed JSON.
    blob: Mapped[bytes] = mapped_column(LargeBinary)


class TurnLabelRow(Base):
    __tablename__ = "turn_labels"
    __table_args__ = (Index("ix_turn_labels_run_step", "run_id", "step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    trajectory_id: Mapped[str] = mapped_column(String(64), index=True)
    turn: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(100))
    reference_label: Mapped[str | None] = mapped_column(String(100), nullable=True)
    source: Mapped[str] = mapped_column(String(100))
    rationale: Mapped[str] = mapped_column(Text, default="")
    confidence: Mapped[float | None] = mapped_column(Float, nullable=True)


class InterfaceRevision(Base):
    __tablename__ = "interface_revisions"
    __table_args__ = (UniqueConstraint("run_id", "revision", name="uq_interface_run_revision"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    revision: Mapped[int] = mapped_column(Integer)
    parent: Mapped[int | None] = mapped_column(Integer, nullable=True)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    content: Mapped[dict] = mapped_column(TolerantJSON)
    changes: Mapped[list] = mapped_column(TolerantJSON, default=list)
    driven_by: Mapped[list] = mapped_column(TolerantJSON, default=list)
    diff: Mapped[str] = mapped_column(Text, default="")


class LabelWeight(Base):
    __tablename__ = "label_weights"
    __table_args__ = (UniqueConstraint("run_id", "step", "label", name="uq_label_weights"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(100))
    weight: Mapped[float] = mapped_column(Float)


EVAL_BY_RUN = "run"  # evaluations.origin: the run's own schedule (its extra benchmarks included)
EVAL_BY_COMMAND = "eval"  # evaluations.origin: `seal-platform eval`, a checkpoint evaluated afterwards
EVAL_ORIGINS = (EVAL_BY_RUN, EVAL_BY_COMMAND)


class Evaluation(Base):
    """One category's pass rate of an evaluation. An evaluation (the rows of one write) is identified by its
    run, step, origin, benchmark and split: one row per category of it (revision 0007)."""

    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("run_id", "step", "origin", "benchmark", "split", "category",
                                       name="uq_evaluations_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    split: Mapped[str] = mapped_column(String(50))
    # The environment evaluated: the run's own or one of evaluation.benchmarks ("" in rows older than 0004).
    benchmark: Mapped[str] = mapped_column(String(100), default="", server_default="")
    # Who wrote the row: "run" (the run's schedule) or "eval" (`seal-platform eval`, at the step after the
    # checkpoint it evaluated; see RunStore.add_evaluation). Revision 0006.
    origin: Mapped[str] = mapped_column(String(20), default=EVAL_BY_RUN, server_default=EVAL_BY_RUN)
    category: Mapped[str] = mapped_column(String(100))
    pass_rate: Mapped[float] = mapped_column(Float)
    n_tasks: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow)


class Checkpoint(Base):
    """The checkpoint after ``step``: one per run and step (revision 0007)."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict] = mapped_column(TolerantJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow)


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow)
    kind: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict] = mapped_column(TolerantJSON, default=dict)


class CacheEntry(Base):
    """A small content-keyed cache for plugins (e.g. an LLM judge's answers), kept across runs and resumes.

    ``namespace`` separates users (a plugin's name, say); ``key`` is usually a digest of the content the
    value was computed from. ``run_id`` only says which run wrote the entry."""

    __tablename__ = "cache_entries"

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[Any] = mapped_column(TolerantJSON)  # any JSON value
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(TolerantDateTime(timezone=True), default=utcnow)
