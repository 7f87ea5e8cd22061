"""The run store: one database (SQLite by default, any SQLAlchemy URL) for runs and everything they produce.

The schema is owned by the Alembic migrations in ``migrations/versions``; opening a store brings it to the
newest revision. Each training step is written in one transaction, so a killed process leaves either the
whole step or none of it.
"""

from __future__ import annotations

import json
import os
import socket
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import String, create_engine, delete, event, func, select, type_coerce, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, object_session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value

from ..capability import CapabilityState
from ..errors import StoreError, finite_reward, listed
from ..infra import mean_reward as policy_mean_reward
from ..types import EvalResult, Interface, Trajectory, TurnLabel, make_text_valid
from . import models as m
from . import readonly, safety, untrusted
from .models import EVAL_BY_COMMAND, EVAL_BY_RUN, EVAL_ORIGINS, utcnow
from .safety import alembic_config

# A running run's owner refreshes ``runs.heartbeat_at`` this often (seconds) ...
HEARTBEAT_S = 30.0
# ... and a ``running`` row whose heartbeat is older than this (its host died, its process was killed on
# another machine) may be resumed from anywhere without --takeover.
STALE_AFTER_S = 600.0


def heartbeat_age(run: m.Run, now: datetime | None = None) -> float | None:
    """Seconds since the run's owner last beat (None for rows that never did: stores older than 0005)."""
    if run.heartbeat_at is None:
        return None
    beat = run.heartbeat_at if run.heartbeat_at.tzinfo else run.heartbeat_at.replace(tzinfo=UTC)
    return ((now or utcnow()) - beat).total_seconds()


def is_stale(run: m.Run) -> bool:
    """A ``running`` row whose owner has not beaten for STALE_AFTER_S: that process is gone."""
    age = heartbeat_age(run)
    return run.status == "running" and age is not None and age > STALE_AFTER_S


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL: readers (`seal-platform runs` during a run) never block the writer, and a crash mid-write
    # leaves the last committed step intact.
    safety.set_pragmas(dbapi_connection, "journal_mode=WAL", "foreign_keys=ON")


def _sqlite_read_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # The journal mode is the file's: setting it would write.
    safety.set_pragmas(dbapi_connection, "query_only=ON")


def pack_trajectory(traj: Trajectory) -> bytes:
    # Environments fill a trajectory after building it: its text is made valid (lone surrogates replaced,
    # counted in its metadata) again here, so the store never fails on what a model wrote.
    make_text_valid(traj)
    data = traj.model_dump_json().encode()
    if len(data) > untrusted.MAX_TRAJECTORY_JSON:  # readers inflate no more than this (untrusted.inflate)
        raise StoreError(f"trajectory {traj.id!r} (task {traj.task_id!r}) is {len(data):,} bytes of JSON, more than "
                         f"the {untrusted.MAX_TRAJECTORY_JSON:,} a stored trajectory may have; nothing of it was "
                         "written.")
    return zlib.compress(data, level=6)


def unpack_trajectory(blob: bytes) -> Trajectory:
    """A stored trajectory: its blob inflated under :data:`untrusted.MAX_TRAJECTORY_JSON` and validated; a
    :class:`untrusted.DamagedValue` saying why when it cannot be read."""
    from pydantic import ValidationError

    data = untrusted.inflate(blob)
    try:
        return Trajectory.model_validate_json(data)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
        said = errors[0]["msg"] if errors else str(exc)
        raise untrusted.DamagedValue(f"the trajectory blob is not a trajectory ({where or 'the JSON'}: "
                                     f"{said[:120]})") from None


def _refuse_damaged(run: m.Run, what: str) -> None:
    damage = getattr(run, "_seal_damage", None)
    if damage:
        raise StoreError(f"run {run.id} cannot be {what}: its row in the store is damaged "
                         f"({untrusted.describe(damage)}); nothing was changed. `seal-platform show` shows what "
                         "else the store holds about it.")


def readable_rows(rows: Any) -> list[Any]:
    """The rows of a query that could be read: those :func:`_screen` left out are not (a line says so)."""
    return [row for row in rows if not getattr(row, "_seal_left_out", False)]


def _screen(row: Any, context: Any, *_attrs: Any) -> None:
    """Every row the ORM loads (or refreshes): a value that is not what its column says (see :mod:`.untrusted`)
    is noted on the store as one line; a ``runs`` row then shows a stand-in for it, any other row is left out
    of what the store's readers return."""
    found = untrusted.problems(row)
    if not found:
        return
    name = untrusted.row_name(row)
    if isinstance(row, m.Run):
        for key in found:
            set_committed_value(row, key, untrusted.stand_in(row, key))
        row._seal_damage = found  # type: ignore[attr-defined]  # read by _refuse_damaged
        line = f"{name}: its row cannot be read whole ({untrusted.describe(found)}); shown without those values"
    else:
        row._seal_left_out = True
        line = f"{name} left out: {untrusted.describe(found)}"
    session = getattr(context, "session", None) or object_session(row)
    store = session.info.get("store") if session is not None else None
    if store is not None:
        store.note_damage(line)


event.listen(m.Base, "load", _screen, propagate=True)
event.listen(m.Base, "refresh", _screen, propagate=True)


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owned_by_this_process(run: m.Run) -> bool:
    """Whether the run's row names this process (pid and host) as its owner."""
    return (run.pid, run.host) == (os.getpid(), socket.gethostname())


def owner_alive_here(run: m.Run) -> bool:
    """Whether the process the run's row names as its owner runs on this host and is alive (a pid can be
    checked only here; a row owned on another host says nothing)."""
    return run.host == socket.gethostname() and _pid_alive(run.pid)


class WriteConflict(StoreError):
    """A write of a run that the database refused as conflicting with what another process wrote (two processes
    writing one run: a key such as a step's or an interface revision's taken first, the run's row gone). Its
    message says so in one paragraph, naming the run's owner, instead of the database's constraint text and
    SQL statement; nothing of the refused write was kept.

    A refusal that is not another writer's doing (the run's row is this process's and the write's own key is
    free: trajectory ids another step or run holds, a value the database cannot store) is a plain
    :class:`StoreError` saying what in the data was refused."""


_UNIQUE_IDS = "a trajectory's id must be unique across the store (Trajectory.id's default, a fresh uuid4, is)"


class RunStore:
    """Read and write runs. Safe to share between threads; each call opens its own session."""

    def __init__(self, url: str, *, migrate: bool = True, read_only: bool = False, create: bool = True):
        """``read_only``: open an existing SQLite store without writing anything (no migration; a schema
        other than this version's is a :class:`StoreError`); any write then fails with one. The read
        commands pass it when the file cannot be written (:func:`readonly.not_writable`).

        ``create=False``: the store must exist already (``run --resume``, ``eval``): a missing SQLite file or
        a database without seal-platform's tables is a :class:`StoreError`, and nothing is created. Either
        way a database holding other tables and no seal-platform schema is refused, untouched."""
        self.url = url
        self.read_only = read_only
        self.create = create
        # What could not be read (one line per damaged row, :mod:`.untrusted`), in order; ``on_damage`` (the
        # read commands: a line on standard error) is called with each new one.
        self.damage: list[str] = []
        self.on_damage: Callable[[str], None] | None = None
        safety.check_file(url)
        if read_only:
            self._open_read_only(url)
            return
        path = safety.sqlite_path(url)
        if path is not None and not create and not path.exists():
            raise StoreError(f"no run store at {path}: nothing was created there; give --store the store.sqlite "
                             f"of a runs directory (check the path for a typo).")
        if path is not None:
            reason = readonly.not_writable(url)
            if reason:
                raise safety.describe(url, PermissionError(reason), None)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise safety.describe(url, exc, None) from None
        try:
            self.engine: Engine = create_engine(url)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open run store {url!r}: {exc}") from None
        except ImportError as exc:  # the URL's database driver (psycopg, ...) is not installed
            raise missing_driver(url, exc) from None
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False, info={"store": self})
        if migrate:
            self.migrate()

    def _open_read_only(self, url: str) -> None:
        if safety.sqlite_path(url) is None:
            raise StoreError(f"run store {url}: not an SQLite file (an in-memory database holds no runs); give "
                             "--store the store.sqlite of a runs directory.")
        reason = readonly.not_writable(url) or "opened read-only"
        error: BaseException | None = None
        for ro_url in readonly.read_only_urls(url):
            self.engine = create_engine(ro_url)
            event.listen(self.engine, "connect", _sqlite_read_pragmas)
            try:
                readonly.check_schema(url, self.engine, self.head_revision(), reason)
                break
            except OperationalError as exc:  # mode=ro cannot create the WAL index: try immutable=1
                self.engine.dispose()
                error = exc
            except DatabaseError as exc:  # not a database, or a damaged one: no other URL reads it better
                self.engine.dispose()
                raise safety.describe(url, exc, None) from None
        else:
            raise readonly.unreadable(url, reason, error) from None  # type: ignore[arg-type]
        # No autoflush, no commit: nothing is written unless a caller adds rows, which fails at the flush.
        self._sessions = sessionmaker(self.engine, expire_on_commit=False, autoflush=False, info={"store": self})

    # --- schema ----------------------------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        from alembic import command  # not imported by the read commands, which never migrate
        from alembic.util import CommandError

        self.refuse_foreign()
        try:
            # One migrator at a time: processes creating the same new store must not both create tables.
            with (
                safety.migration_lock(self.url, self.engine),
                safety.migration_engine(self.engine) as engine,
                engine.begin() as conn,
            ):
                command.upgrade(alembic_config(conn), revision)
        except StoreError:
            raise
        except (SQLAlchemyError, CommandError, OSError) as exc:
            raise safety.translate(self.url, self.engine, self.head_revision(), exc) from None

    def refuse_foreign(self) -> None:
        """Before anything writes (the WAL switch, the migration lock's file, the tables; ``migrate`` calls it
        first, ``upgrade-store`` before it reads the schema revision): refuse a database
        that holds other tables and no seal-platform schema -- someone else's data, given as --store by
        mistake -- and, when the store must exist (``create=False``), one without seal-platform's tables."""
        where = safety.sqlite_path(self.url) or self.url
        # On SQLite a probe of its own: the store's engine switches the file to WAL on connect.
        # (Its busy timeout: another process may be creating the same new store right now.)
        sqlite = self.engine.dialect.name == "sqlite"
        probe = create_engine(self.engine.url, connect_args={"timeout": 30}) if sqlite else self.engine
        try:
            kind, tables = safety.schema_kind(probe)
        except DatabaseError as exc:
            raise safety.describe(self.url, exc, None) from None
        finally:
            if probe is not self.engine:
                probe.dispose()
        if kind == "foreign":
            raise safety.not_ours(where, tables)
        if kind == "empty" and not self.create:
            raise StoreError(f"{where} is an empty database, not a seal-platform run store; nothing was changed: "
                             "give --store the store.sqlite of a runs directory.")

    def schema_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    @staticmethod
    def head_revision() -> str | None:
        return safety.head_revision()

    @contextmanager
    def session(self) -> Iterator[Session]:
        try:
            if self.read_only:
                with self._sessions() as session:
                    yield session
                    session.flush()  # a write on a read-only store fails here ("cannot be written")
                return
            with self._sessions.begin() as session:
                yield session
        except OperationalError as exc:
            # A store that became read-only, a full disk, a lock held past the busy timeout: one paragraph.
            raise safety.describe(self.url, exc, None, opening=False) from exc
        except DatabaseError as exc:
            if type(exc) is not DatabaseError:  # IntegrityError and the like: the caller's (cache_put's) to handle
                raise
            # A page found damaged only now ("database disk image is malformed"): one paragraph too.
            raise safety.describe(self.url, exc, None, opening=False) from exc

    @contextmanager
    def _run_write(self, run_id: str, what: str, *, taken: Callable[[Session], bool] | None = None,
                   trajectories: Sequence[Trajectory] = ()) -> Iterator[Session]:
        """A session (one transaction) for writing ``what`` (``step 3``, ...) of run ``run_id``: the writes that
        add a run's rows (its steps, evaluations, checkpoints, interface revisions) go through it. The database's
        refusal of the write (an IntegrityError) rolls the transaction back and is

        * a :class:`WriteConflict` when it is another writer's doing: the run's row is gone or no longer this
          process's, or the write's own key is taken already (``taken(session)``: the step's row, the
          evaluation's rows, the interface revision's);
        * otherwise a :class:`StoreError` saying what in the data was refused (``trajectories``: those the write
          adds, whose ids the store may hold already), never the database's SQL text.

        (The run's row itself is changed by compare-and-set updates instead: :meth:`claim_run`,
        :meth:`finish_run`; events have no key to take.)"""
        try:
            with self.session() as s:
                yield s
        except IntegrityError as exc:
            raise self._refused(run_id, what, exc, taken, trajectories) from exc

    def _refused(self, run_id: str, what: str, exc: IntegrityError, taken: Callable[[Session], bool] | None,
                 trajectories: Sequence[Trajectory]) -> StoreError:
        """The error for ``what`` of run ``run_id`` that the database refused (see :meth:`_run_write`)."""
        try:
            row: m.Run | None = self.get_run(run_id)
        except Exception:  # the row is gone, or the store cannot say: the error still names what happened
            row = None
        if row is None or not owned_by_this_process(row) or self._key_taken(taken):
            return self._write_conflict(run_id, what, row)
        return StoreError(f"{what} of run {run_id} could not be recorded: {self._data_fault(exc, trajectories)}; "
                          "nothing of it was written.")

    def _key_taken(self, taken: Callable[[Session], bool] | None) -> bool:
        if taken is None:
            return False
        try:
            with self.session() as s:
                return taken(s)
        except Exception:  # the store cannot say: taken, as every refusal was before this check
            return True

    def _data_fault(self, exc: IntegrityError, trajectories: Sequence[Trajectory]) -> str:
        """What in a write's data the database refused, in words (its trajectories' ids first)."""
        ids = [t.id for t in trajectories]
        duplicates = sorted(tid for tid, n in Counter(ids).items() if n > 1)
        if duplicates:
            return f"trajectory ids {listed(duplicates)} appear more than once in it; {_UNIQUE_IDS}"
        try:
            used = self.trajectory_ids_in_use(ids)
        except Exception:  # the store cannot say: the database's own reason below
            used = {}
        if used:
            where = [f"{tid!r} (run {run}, step {step}, {phase})" for tid, (run, step, phase) in used.items()]
            return f"the store holds trajectory ids {listed(where, quote=False)} already; {_UNIQUE_IDS}"
        reason = str(getattr(exc, "orig", "") or "").strip().splitlines()
        return f"the database refused its data ({reason[0][:200]})" if reason else "the database refused its data"

    def _write_conflict(self, run_id: str, what: str, row: m.Run | None) -> WriteConflict:
        """The error for ``what`` of run ``run_id`` refused because another process wrote first: which process
        owns the run now (``row``: the run's row read back, None when it is gone)."""
        if row is None:
            return WriteConflict(f"{what} of run {run_id} could not be recorded: the store refused it as conflicting "
                                 "with what another process wrote, and the run's row could not be read back (was "
                                 "the run removed?); nothing of it was written.")
        if owned_by_this_process(row):
            return WriteConflict(f"{what} of run {run_id} was already recorded by another process writing the same "
                                 "run (its previous owner still running after a --takeover?); this process owns the "
                                 "run and stops. Stop the other process, then resume the run.")
        if row.status == "running":
            return WriteConflict(f"run {run_id} was taken over by another process (pid {row.pid} on {row.host}, "
                                 f"status {row.status}), which recorded {what} before this one; this process "
                                 "stops without writing more.")
        return WriteConflict(f"{what} of run {run_id} was already recorded by another process (the run's last owner: "
                             f"pid {row.pid} on {row.host}, status {row.status}); nothing of it was written again.")

    def close(self) -> None:
        self.engine.dispose()

    def note_damage(self, line: str) -> None:
        """Record one line about a value of the store that could not be read (each line once)."""
        if line in self.damage:
            return
        self.damage.append(line)
        if self.on_damage is not None:
            self.on_damage(line)

    def read_trajectory(self, row: m.TrajectoryRow) -> Trajectory | None:
        """The trajectory a row holds, or None (and a line noted) when its blob cannot be read."""
        try:
            return unpack_trajectory(row.blob)
        except untrusted.DamagedValue as exc:
            self.note_damage(f"run {row.run_id}: trajectories row {row.id} (step {row.step}) left out: {exc}")
            return None

    def read_blob(self, run_id: str, trajectory_id: str, step: Any, blob: Any) -> Trajectory | None:
        """As :meth:`read_trajectory`, for a blob selected as a column."""
        try:
            return unpack_trajectory(blob)
        except untrusted.DamagedValue as exc:
            self.note_damage(f"run {run_id}: trajectories row {trajectory_id} (step {step}) left out: {exc}")
            return None

    # --- runs ------------------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        recipe: str,
        config: dict[str, Any],
        config_hash: str,
        seed: int,
        run_dir: str,
        plugins: list[dict[str, Any]],
    ) -> None:
        with self.session() as s:
            s.add(
                m.Run(
                    id=run_id, name=name, recipe=recipe, config=config, config_hash=config_hash, seed=seed,
                    status="running", host=socket.gethostname(), pid=os.getpid(), run_dir=run_dir,
                    heartbeat_at=utcnow(),
                )
            )
            s.flush()
            self._add_plugins(s, run_id, plugins)

    def _add_plugins(self, s: Session, run_id: str, plugins: list[dict[str, Any]]) -> None:
        s.execute(delete(m.RunPlugin).where(m.RunPlugin.run_id == run_id))
        for p in plugins:
            s.add(
                m.RunPlugin(
                    run_id=run_id, name=p["name"], distribution=p.get("distribution"), version=p.get("version"),
                    status=p.get("status", "loaded"), hooks=p.get("hooks", []), error=p.get("error"),
                )
            )

    def claim_run(self, run_id: str, seen: tuple[str, int | None, str, datetime | None],
                  plugins: list[dict[str, Any]]) -> bool:
        """Take a run over for a resume, atomically: one compare-and-set on the run's row, which must still be
        as this process saw it (``seen``: status, pid, host, heartbeat). Of two processes resuming one run at
        once, exactly one wins; the other gets False and must write nothing. An owner that beat after ``seen``
        was read is alive, and the claim fails too."""
        status, pid, host, beat = seen
        with self.session() as s:
            run = self._get_run(s, run_id)
            _refuse_damaged(run, "resumed")
            same_beat = self._same_beat(s, run.id, beat)
            if same_beat is None:  # the owner beat after ``seen`` was read
                return False
            match = [m.Run.id == run.id, m.Run.status == status, m.Run.host == host,
                     m.Run.pid.is_(None) if pid is None else m.Run.pid == pid, same_beat]
            result = s.execute(update(m.Run).where(*match).values(
                status="running", pid=os.getpid(), host=socket.gethostname(), ended_at=None, error=None,
                heartbeat_at=utcnow()))
            if result.rowcount != 1:  # type: ignore[attr-defined]
                s.rollback()
                return False
            self._add_plugins(s, run.id, plugins)
            return True

    @staticmethod
    def _same_beat(s: Session, run_id: str, beat: datetime | None) -> Any:
        """The condition "the run's heartbeat is still ``beat``" for a compare-and-set UPDATE, or None when it
        is not (any more). It compares the value as stored: a heartbeat written by another tool (``sqlite3``'s
        ``datetime('now')``, no microseconds; a ``T`` or an offset) reads as the same time as this version's
        format, but a comparison with ``beat`` re-formatted would never match it."""
        if beat is None:
            return m.Run.heartbeat_at.is_(None)
        stored = type_coerce(m.Run.heartbeat_at, String)
        row = s.execute(select(m.Run.heartbeat_at.label("beat"), stored.label("raw")).where(m.Run.id == run_id)).first()
        if row is None or row[0] != beat:
            return None
        return stored == row[1]

    def beat(self, run_id: str) -> bool:
        """Refresh the heartbeat of a run this process owns. False when the row is no longer this process's
        (another process took the run over): the caller must stop writing."""
        with self.session() as s:
            result = s.execute(update(m.Run).where(
                m.Run.id == run_id, m.Run.status == "running", m.Run.pid == os.getpid(),
                m.Run.host == socket.gethostname()).values(heartbeat_at=utcnow()))
            return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> bool:
        """Record how the run ended -- only while this process still owns it: a process whose run was taken
        over by another must not overwrite the new owner's row (False then). One compare-and-set on the row's
        owner, so a takeover landing between a read and the write cannot be overwritten either."""
        with self.session() as s:
            run = self._get_run(s, run_id)
            result = s.execute(
                update(m.Run)
                .where(m.Run.id == run.id, m.Run.pid == os.getpid(), m.Run.host == socket.gethostname())
                .values(status=status, ended_at=utcnow(), error=error)
                .execution_options(synchronize_session=False)
            )
            return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def _get_run(self, s: Session, run_id: str) -> m.Run:
        if not run_id.strip():  # a prefix of every id: never "the only run"
            runs = s.scalars(select(m.Run).order_by(m.Run.started_at.desc())).all()
            listed = ", ".join(f"{r.id} ({r.status})" for r in runs[:20]) or "none"
            raise StoreError(f"an empty run id names no run; runs in {self.url}: {listed}.")
        run = s.get(m.Run, run_id)
        if run is None:
            # A unique prefix (20261125-0301), suffix (the 6 characters the summary ends ids with) or name.
            # autoescape: ``%`` and ``_`` in what was typed are characters, not LIKE wildcards.
            for how, where in (("prefix", m.Run.id.startswith(run_id, autoescape=True)),
                               ("suffix", m.Run.id.endswith(run_id, autoescape=True)),
                               ("name", m.Run.name == run_id)):
                matches = s.scalars(select(m.Run).where(where).order_by(m.Run.started_at)).all()
                if len(matches) == 1:
                    return matches[0]
                if matches:
                    listed = ", ".join(f"{r.id} ({r.name}, {r.status})" for r in matches[:20])
                    raise StoreError(f"run {run_id!r} is ambiguous: {len(matches)} runs match by {how}: {listed}.")
            raise StoreError(f"no run {run_id!r} in {self.url} (see `seal-platform runs`).")
        return run

    def get_run(self, run_id: str, *, whole: bool = False) -> m.Run:
        """A run by id or unique id prefix. Runs left ``running`` by a dead process on this host read as
        ``crashed`` (and are marked so). A row with values that cannot be read shows stand-ins for them (a line
        noted, :mod:`.untrusted`); with ``whole`` (a command that acts on the run: a resume, ``eval``) it is a
        :class:`StoreError` instead."""
        with self.session() as s:
            run = self._get_run(s, run_id)
            if whole:
                _refuse_damaged(run, "used")
            self._mark_if_crashed(run)
            return run

    def _mark_if_crashed(self, run: m.Run) -> None:
        """A ``running`` row whose owner on this host is gone reads ``crashed`` and is marked so -- with one
        compare-and-set on the row as read (status, owner, heartbeat): a resume may claim the run, and even
        finish it, between this read and the write, and its row must not be marked."""
        if not (run.status == "running" and run.host == socket.gethostname() and not owner_alive_here(run)):
            return
        s = object_session(run)
        assert s is not None
        if self.read_only:  # shown as crashed, not written
            s.expunge(run)
            run.status = "crashed"
            return
        same_beat = self._same_beat(s, run.id, run.heartbeat_at)
        if same_beat is None:  # it beat since it was read: as it is now
            s.refresh(run)
            return
        result = s.execute(
            update(m.Run)
            .where(m.Run.id == run.id, m.Run.status == "running", m.Run.host == run.host,
                   m.Run.pid.is_not_distinct_from(run.pid), same_beat)
            .values(status="crashed")
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            set_committed_value(run, "status", "crashed")
        else:  # changed since it was read: as it is now
            s.refresh(run)

    def list_runs(self, limit: int | None = None) -> list[m.Run]:
        """The runs, newest first (``limit``: the newest that many; the index on ``started_at`` makes that
        quick on a store of any size). A row with values that cannot be read is listed with stand-ins for them
        (a line noted)."""
        with self.session() as s:
            query = select(m.Run).order_by(m.Run.started_at.desc())
            runs = readable_rows(s.scalars(query.limit(limit) if limit else query))
            for run in runs:
                self._mark_if_crashed(run)
            return runs

    def count_runs(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count()).select_from(m.Run)) or 0)

    def run_plugins(self, run_id: str) -> list[m.RunPlugin]:
        with self.session() as s:
            return readable_rows(
                s.scalars(select(m.RunPlugin).where(m.RunPlugin.run_id == run_id).order_by(m.RunPlugin.id))
            )

    # --- per step --------------------------------------------------------------------------------------

    def record_step(
        self,
        run_id: str,
        *,
        step: int,
        epoch: int,
        trajectories: list[Trajectory],
        labels: list[TurnLabel],
        label_weights: dict[str, float],
        state: CapabilityState,
        interface_revision: int,
        metrics: dict[str, float],
        timings: dict[str, float],
    ) -> None:
        """Everything a training step produced, in one transaction (a step another process recorded first: a
        :class:`WriteConflict`, as for every write of a run's rows)."""
        what = f"step {step}"
        _check_rewards(run_id, what, trajectories)
        mean_reward = policy_mean_reward(trajectories)

        def taken(s: Session) -> bool:
            return s.scalar(select(m.Step.id).where(m.Step.run_id == run_id, m.Step.step == step)) is not None

        with self._run_write(run_id, what, taken=taken, trajectories=trajectories) as s:
            s.add(
                m.Step(
                    run_id=run_id, step=step, epoch=epoch, mean_reward=mean_reward,
                    n_trajectories=len(trajectories), interface_revision=interface_revision,
                    metrics=_jsonable(metrics), timings=_jsonable(timings),
                    capability_state=state.model_dump(mode="json"),
                )
            )
            self._add_trajectories(s, run_id, step, "train", trajectories)
            s.add_all(
                m.TurnLabelRow(
                    run_id=run_id, step=step, trajectory_id=lab.trajectory_id, turn=lab.turn, label=lab.label,
                    reference_label=lab.reference_label, source=lab.source, rationale=lab.rationale,
                    confidence=lab.confidence,
                )
                for lab in labels
            )
            s.add_all(
                m.LabelWeight(run_id=run_id, step=step, label=label, weight=float(w))
                for label, w in sorted(label_weights.items())
            )
            run = self._get_run(s, run_id)
            run.last_step = step

    def _add_trajectories(self, s: Session, run_id: str, step: int, phase: str, trajectories: list[Trajectory]) -> None:
        s.add_all(
            m.TrajectoryRow(
                id=t.id, run_id=run_id, step=step, phase=phase, task_id=t.task_id, category=t.category,
                group=t.group, sample=t.sample, reward=t.reward, interface_revision=t.interface_revision,
                finish=t.finish, generated_tokens=t.generated_tokens, blob=pack_trajectory(t),
            )
            for t in trajectories
        )

    def trajectory_ids_in_use(self, ids: Sequence[str]) -> dict[str, tuple[str, int, str]]:
        """Of ``ids``, those the store holds already, in any run: id -> (run id, step, phase)."""
        found: dict[str, tuple[str, int, str]] = {}
        unique = list(dict.fromkeys(ids))
        with self.session() as s:
            for start in range(0, len(unique), 500):  # keep the IN list within SQLite's variable limit
                q = select(m.TrajectoryRow.id, m.TrajectoryRow.run_id, m.TrajectoryRow.step, m.TrajectoryRow.phase)
                for tid, run, step, phase in s.execute(q.where(m.TrajectoryRow.id.in_(unique[start: start + 500]))):
                    found[tid] = (run, step, phase)
        return found

    def steps(self, run_id: str) -> list[m.Step]:
        with self.session() as s:
            return readable_rows(s.scalars(select(m.Step).where(m.Step.run_id == run_id).order_by(m.Step.step)))

    def trajectories(self, run_id: str, step: int | None = None, phase: str | None = None) -> list[Trajectory]:
        with self.session() as s:
            q = select(m.TrajectoryRow).where(m.TrajectoryRow.run_id == run_id)
            if step is not None:
                q = q.where(m.TrajectoryRow.step == step)
            if phase is not None:
                q = q.where(m.TrajectoryRow.phase == phase)
            rows = readable_rows(s.scalars(q.order_by(m.TrajectoryRow.step)))
        return [t for t in (self.read_trajectory(r) for r in rows) if t is not None]

    def labels(self, run_id: str, step: int | None = None) -> list[m.TurnLabelRow]:
        with self.session() as s:
            q = select(m.TurnLabelRow).where(m.TurnLabelRow.run_id == run_id)
            if step is not None:
                q = q.where(m.TurnLabelRow.step == step)
            return readable_rows(s.scalars(q.order_by(m.TurnLabelRow.id)))

    def label_weights(self, run_id: str) -> list[m.LabelWeight]:
        with self.session() as s:
            return readable_rows(
                s.scalars(
                    select(m.LabelWeight)
                    .where(m.LabelWeight.run_id == run_id)
                    .order_by(m.LabelWeight.step, m.LabelWeight.label)
                )
            )

    def discard_after(self, run_id: str, step: int) -> int:
        """Delete what steps after ``step`` wrote (a resume re-does them); returns how many steps went."""
        with self.session() as s:
            n = len(s.scalars(select(m.Step.id).where(m.Step.run_id == run_id, m.Step.step > step)).all())
            for model in (m.Step, m.TrajectoryRow, m.TurnLabelRow, m.LabelWeight, m.Checkpoint):
                s.execute(delete(model).where(model.run_id == run_id, model.step > step))
            # The eval command's rows at step + 1 measured the checkpoint after ``step``, which stays.
            s.execute(delete(m.Evaluation).where(
                m.Evaluation.run_id == run_id, m.Evaluation.step > step,
                (m.Evaluation.origin != EVAL_BY_COMMAND) | (m.Evaluation.step > step + 1)))
            s.execute(
                delete(m.InterfaceRevision).where(m.InterfaceRevision.run_id == run_id, m.InterfaceRevision.step > step)
            )
            run = self._get_run(s, run_id)
            run.last_step = step if step >= 0 else None
            return n

    # --- interfaces, evaluations, checkpoints, events --------------------------------------------------

    def add_interface(self, run_id: str, interface: Interface, parent: Interface | None) -> None:
        def taken(s: Session) -> bool:
            return s.scalar(select(m.InterfaceRevision.id).where(
                m.InterfaceRevision.run_id == run_id, m.InterfaceRevision.revision == interface.revision)) is not None

        with self._run_write(run_id, f"interface revision {interface.revision}", taken=taken) as s:
            s.add(
                m.InterfaceRevision(
                    run_id=run_id, revision=interface.revision, parent=interface.parent, step=interface.step,
                    content=interface.model_dump(mode="json"), changes=list(interface.changes),
                    driven_by=list(interface.driven_by), diff=interface.diff(parent),
                )
            )

    def interfaces(self, run_id: str) -> list[m.InterfaceRevision]:
        with self.session() as s:
            return readable_rows(
                s.scalars(
                    select(m.InterfaceRevision)
                    .where(m.InterfaceRevision.run_id == run_id)
                    .order_by(m.InterfaceRevision.revision)
                )
            )

    def interface(self, run_id: str, revision: int) -> Interface:
        for row in self.interfaces(run_id):
            if row.revision == revision:
                return Interface.model_validate(row.content)
        raise StoreError(f"run {run_id} has no interface revision {revision}.")

    def add_evaluation(self, run_id: str, step: int, result: EvalResult, benchmark: str = "",
                       origin: str = EVAL_BY_RUN) -> None:
        """Record an evaluation; ``benchmark`` names the environment evaluated ("": the run's own).

        ``origin`` says who evaluated: :data:`EVAL_BY_RUN` (the run's schedule) or :data:`EVAL_BY_COMMAND`
        (``seal-platform eval``, stored at ``step`` = the evaluated checkpoint's step + 1, as the run's own
        evaluation of that checkpoint is). Readers keep the two apart (:meth:`evaluations`).

        An evaluation is one per run, step, origin, benchmark and split (a unique key, revision 0007). The
        command's replaces the one it made of that checkpoint on that split before (evaluating a checkpoint
        again measures it anew); the run's own is written once (a resume drops what it re-does first,
        :meth:`discard_after`), so a second one is another process's write: a :class:`WriteConflict`, nothing
        of it written."""
        if origin not in EVAL_ORIGINS:
            raise StoreError(f"evaluation origin {origin!r} is not one of {', '.join(EVAL_ORIGINS)}.")
        what = f"the evaluation at step {step}"
        _check_rewards(run_id, what, result.trajectories)
        key = (m.Evaluation.run_id == run_id, m.Evaluation.step == step, m.Evaluation.origin == origin,
               m.Evaluation.benchmark == benchmark, m.Evaluation.split == result.split)

        def taken(s: Session) -> bool:
            return s.scalar(select(m.Evaluation.id).where(*key).limit(1)) is not None

        with self._run_write(run_id, what, taken=taken, trajectories=result.trajectories) as s:
            if origin == EVAL_BY_COMMAND:
                replaced = list(s.scalars(select(m.Evaluation).where(*key).order_by(m.Evaluation.id)))
                if replaced:  # kept in an event: the earlier measurement is replaced, not lost
                    s.add(m.Event(run_id=run_id, kind="evaluation_replaced", message=(
                        f"seal-platform eval measured the checkpoint of step {step} on split {result.split!r} "
                        f"again; its earlier result ({replaced[0].n_tasks} task(s)) is in this event's data"),
                        data={"step": step, "split": result.split, "benchmark": benchmark, "rows": [
                            {"category": r.category, "pass_rate": r.pass_rate, "n_tasks": r.n_tasks,
                             "created_at": r.created_at.isoformat() if r.created_at else None}
                            for r in replaced]}))
                    s.execute(delete(m.Evaluation).where(*key))
            s.add_all(
                m.Evaluation(run_id=run_id, step=step, split=result.split, benchmark=benchmark, origin=origin,
                             category=cat, pass_rate=rate, n_tasks=result.n_tasks)
                for cat, rate in sorted(result.per_category.items())
            )
            self._add_trajectories(s, run_id, step, "eval", result.trajectories)

    def evaluations(self, run_id: str, origin: str | None = EVAL_BY_RUN) -> list[m.Evaluation]:
        """The run's evaluation rows by step and category: those its own schedule wrote by default,
        ``origin=EVAL_BY_COMMAND`` for the ``seal-platform eval`` command's, ``None`` for both."""
        with self.session() as s:
            q = select(m.Evaluation).where(m.Evaluation.run_id == run_id)
            if origin is not None:
                q = q.where(m.Evaluation.origin == origin)
            return readable_rows(s.scalars(q.order_by(m.Evaluation.step, m.Evaluation.category, m.Evaluation.id)))

    def add_checkpoint(self, run_id: str, step: int, path: str, meta: dict[str, Any]) -> None:
        """Record the checkpoint after ``step`` (one per run and step, revision 0007). A checkpoint of a step the
        store holds one of already replaces that row: its folder was written anew (and replaced the old one)
        before it is recorded."""
        key = (m.Checkpoint.run_id == run_id, m.Checkpoint.step == step)

        def taken(s: Session) -> bool:
            return s.scalar(select(m.Checkpoint.id).where(*key)) is not None

        with self._run_write(run_id, f"the checkpoint after step {step}", taken=taken) as s:
            row = s.scalar(select(m.Checkpoint).where(*key))
            if row is None:
                s.add(m.Checkpoint(run_id=run_id, step=step, path=path, meta=_jsonable(meta)))
            else:
                row.path, row.meta, row.created_at = path, _jsonable(meta), utcnow()

    def relocate_run(self, run_id: str, run_dir: str) -> int:
        """The run's folder was moved to ``run_dir``: point the run and its checkpoints there. Returns the
        number of checkpoint paths rewritten."""
        with self.session() as s:
            run = self._get_run(s, run_id)
            old = run.run_dir.rstrip("/")
            run.run_dir = run_dir
            rows = list(s.scalars(select(m.Checkpoint).where(m.Checkpoint.run_id == run.id)))
            for row in rows:
                if row.path == old or row.path.startswith(old + "/"):
                    row.path = run_dir + row.path[len(old):]
            return len(rows)

    def remove_checkpoint(self, run_id: str, step: int) -> None:
        """Forget the checkpoint of ``step`` (checkpoint rotation deletes its folder next)."""
        with self.session() as s:
            s.execute(delete(m.Checkpoint).where(m.Checkpoint.run_id == run_id, m.Checkpoint.step == step))

    def checkpoints(self, run_id: str) -> list[m.Checkpoint]:
        with self.session() as s:
            return readable_rows(
                s.scalars(select(m.Checkpoint).where(m.Checkpoint.run_id == run_id).order_by(m.Checkpoint.step))
            )

    def add_event(self, run_id: str | None, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            s.add(m.Event(run_id=run_id, kind=kind, message=message, data=_jsonable(data or {})))

    def events(self, run_id: str) -> list[m.Event]:
        with self.session() as s:
            return readable_rows(s.scalars(select(m.Event).where(m.Event.run_id == run_id).order_by(m.Event.id)))

    # --- a generic content-keyed cache for plugins -----------------------------------------------------

    def cache_get(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        """The cached values of those ``keys`` in ``namespace`` that are present (key -> value)."""
        found: dict[str, Any] = {}
        with self.session() as s:
            for start in range(0, len(keys), 500):  # keep the IN list within SQLite's variable limit
                chunk = keys[start : start + 500]
                q = select(m.CacheEntry).where(m.CacheEntry.namespace == namespace, m.CacheEntry.key.in_(chunk))
                found.update((row.key, row.value) for row in readable_rows(s.scalars(q)))
        return found

    def cache_put(self, namespace: str, key: str, value: Any, run_id: str | None = None) -> None:
        """Store (or replace) one JSON-serialisable value under ``namespace``/``key``."""
        row = dict(namespace=namespace, key=key, value=_jsonable(value), run_id=run_id)
        try:
            with self.session() as s:
                s.merge(m.CacheEntry(**row, created_at=utcnow()))
        except IntegrityError:  # another writer inserted the key between our select and insert: update it
            with self.session() as s:
                s.merge(m.CacheEntry(**row, created_at=utcnow()))


def missing_driver(url: str, exc: ImportError) -> StoreError:
    """The database driver a store URL needs is not installed: which one, and how to get it."""
    scheme = url.split("://", 1)[0]
    module = getattr(exc, "name", None) or str(exc)
    hint = {"psycopg": "pip install 'psycopg[binary]'", "psycopg2": "pip install psycopg2-binary",
            "pymysql": "pip install pymysql", "MySQLdb": "pip install mysqlclient"}.get(module.split(".")[0],
                                                                                    f"pip install {module}")
    return StoreError(f"cannot open run store {url}: its database driver for {scheme!r} ({module}) is not "
                      f"installed: install it ({hint}) or give --store an SQLite file path.")


def _check_rewards(run_id: str, what: str, trajectories: Sequence[Trajectory]) -> None:
    """Before ``what`` is written: every trajectory's reward is a finite number (SQLite would store NaN as
    NULL and refuse it, PostgreSQL would keep it and every mean over it), else a :class:`StoreError`. The
    stages check the same (:func:`~seal_platform.errors.finite_reward`); this guards writers that bypass them."""
    for t in trajectories:
        if not finite_reward(t.reward):
            raise StoreError(f"{what} of run {run_id} could not be recorded: the reward of trajectory {t.id!r} is "
                             f"{t.reward!r}, not a finite number; nothing of it was written.")


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON so that numpy/torch scalars and paths become plain values."""
    return json.loads(json.dumps(value, default=_default))


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (Path, datetime)):
        return str(obj)
    return repr(obj)


class Heartbeat:
    """While a run trains, refresh its ``heartbeat_at`` every HEARTBEAT_S seconds from a daemon thread, so
    that another host can tell a live owner from a dead one (:func:`is_stale`). When a beat finds the row
    no longer this process's -- another process took the run over -- :meth:`check` raises at the runner's
    next safe point, and this process stops writing."""

    def __init__(self, store: RunStore, run_id: str, every: float = HEARTBEAT_S):
        import threading

        self.store, self.run_id, self.every = store, run_id, every
        self.lost_to: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if self.store.beat(self.run_id):
                    continue
                row = self.store.get_run(self.run_id)
                self.lost_to = f"pid {row.pid} on {row.host}, status {row.status}"
                return
            except Exception:  # a busy or full store: the next beat tries again; the run itself reports it
                continue

    def check(self) -> None:
        """Raise (StoreError) when another process has taken the run over."""
        if self.lost_to is not None:
            raise StoreError(f"run {self.run_id} was taken over by another process ({self.lost_to}); this "
                             "process stops without writing more.")
