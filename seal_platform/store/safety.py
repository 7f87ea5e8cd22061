"""Opening a run store safely: one migrator at a time, and errors a user can act on.

* Many processes may create, migrate or open the same store at once (eight runs started together on one
  SQLite file, or several hosts on one PostgreSQL database): the migration runs under an exclusive lock --
  an ``fcntl`` lock on ``<file>.lock`` next to a SQLite file, a PostgreSQL advisory lock otherwise -- so the
  second process finds the schema already at head instead of creating the same tables again.
* A file that is not a database, a schema newer than this version knows, a read-only file or directory:
  each becomes a :class:`StoreError` of one paragraph naming the store and the fix.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from ..errors import StoreError, disk_full

# Any constant works; it only has to be the same for every process migrating a seal-platform store.
_PG_LOCK_KEY = 0x5EA1_0001


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file:"):  # in memory, or an SQLite URI filename
        return None
    return Path(path)


@contextmanager
def migration_lock(url: str, engine: Engine) -> Iterator[None]:
    """Hold the store's migration lock (blocking) for the duration of the block."""
    path = sqlite_path(url)
    if path is not None:
        import fcntl

        lock_file = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            # A read-only directory: nobody can be creating this store here; opening it read-only is fine.
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _PG_LOCK_KEY})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _PG_LOCK_KEY})
                conn.commit()
        return
    yield


@contextmanager
def migration_engine(engine: Engine) -> Iterator[Engine]:
    """The engine to migrate with. On SQLite, one whose transactions really are transactions: Python's
    sqlite3 driver commits every CREATE TABLE on its own, so a kill in the middle of a migration left half
    a schema (tables, no alembic_version) that no later open could migrate. Here the driver's implicit
    transaction handling is off and the whole upgrade runs inside ``BEGIN IMMEDIATE`` .. ``COMMIT``."""
    if engine.dialect.name != "sqlite":
        yield engine
        return
    from sqlalchemy import create_engine, event

    migrator = create_engine(engine.url, poolclass=_single_use_pool())

    @event.listens_for(migrator, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN/COMMIT by the driver
        set_pragmas(dbapi_connection, "journal_mode=WAL")

    @event.listens_for(migrator, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        yield migrator
    finally:
        migrator.dispose()


def _single_use_pool() -> Any:
    from sqlalchemy.pool import NullPool

    return NullPool


# Held while this process reads a store file's header with a descriptor of its own (check_file) and while a
# store connection takes its first lock on the file (the connect listeners): see check_file.
FILE_LOCK = threading.Lock()


def set_pragmas(dbapi_connection: Any, *pragmas: str) -> None:
    """A new SQLite connection's set-up: ``PRAGMA busy_timeout=30000``, then each of ``pragmas``, under
    :data:`FILE_LOCK` (the connection's first lock on the file is not taken while :func:`check_file` holds a
    descriptor of it). The busy timeout comes first: switching to WAL itself waits on another process's lock."""
    with FILE_LOCK:
        cursor = dbapi_connection.cursor()
        try:
            for pragma in ("busy_timeout=30000", *pragmas):
                cursor.execute(f"PRAGMA {pragma}")
        finally:
            cursor.close()


def open_in_this_process(path: Path) -> bool:
    """Whether this process already has ``path`` open (an SQLite connection to it, most likely)."""
    try:
        st = path.stat()
        fds = os.listdir("/dev/fd")
    except OSError:  # no /dev/fd: assume not
        return False
    for fd in fds:
        try:
            other = os.fstat(int(fd))
        except (OSError, ValueError):
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def check_file(url: str) -> None:
    """Refuse, before SQLite touches it, a store path that is a directory or a file that is not SQLite.

    The header is read only when no descriptor of this process has the file open. Closing any descriptor of a
    file drops every POSIX lock the process holds on it -- the SQLite connections' locks included, while
    SQLite still believes it holds them. Another process closing its last connection then takes the file for
    unused, checkpoints and deletes the write-ahead log, and the connections here go on reading the deleted
    log: a run finished by that process still reads as it was (seen in CI: a resumed run read ``crashed``).
    A file SQLite has open was a database when it was opened; SQLite itself reports one that is not."""
    path = sqlite_path(url)
    if path is None or not path.exists():
        return
    if path.is_dir():
        raise StoreError(f"run store {path} is a directory, not a database file: give --store a file path "
                         f"such as sqlite:///{path / 'store.sqlite'}.")
    with FILE_LOCK:
        if open_in_this_process(path):
            return
        try:
            with open(path, "rb") as fh:
                header = fh.read(16)
        except PermissionError:
            raise StoreError(f"run store {path} cannot be read (permission denied): make it readable "
                             f"(chmod u+r {path}) or give another --store.") from None
    if header and header != b"SQLite format 3\x00":
        raise StoreError(f"run store {path} is not a seal-platform database (not an SQLite file): give --store "
                         f"the store.sqlite file of a runs directory, or a new path to start a new store.")


def describe(url: str, exc: BaseException, head: str | None, current: str | None = None,
             opening: bool = True) -> StoreError:
    """One paragraph for a failure to open or migrate the store (``opening``), or to write to it."""
    where = sqlite_path(url) or url
    message = str(getattr(exc, "orig", None) or exc)
    lowered = message.lower()
    full = disk_full(where.parent, exc) if isinstance(where, Path) else None
    # What SQLite says on a full disk: "database or disk is full", or, when it cannot create its journal or
    # write-ahead log, "disk I/O error" / "unable to open database file".
    if full is not None and any(text in lowered for text in ("full", "space", "quota", "i/o", "unable to open")):
        return StoreError(
            f"run store {where} cannot be written: {full} ({message}); what was being written is not in the "
            f"store, and what was there before is intact. Free space on that disk (or move the store and pass "
            f"--store)."
        )
    if (
        "readonly" in lowered
        or "read-only" in lowered
        or "unable to open" in lowered
        or isinstance(exc, PermissionError)
    ):
        return StoreError(
            f"run store {where} cannot be written ({message}): `seal-platform run` and `eval` write to the store "
            f"(runs, steps, schema upgrades) and SQLite needs its directory writable for the journal; make the "
            f"file and its directory writable, or copy the store somewhere writable and pass --store (`runs`, "
            f"`show`, `report` and `compare` can read a read-only store as it is)."
        )
    if "not a database" in lowered or "malformed" in lowered or "file is encrypted" in lowered:
        return StoreError(f"run store {where} is not a usable SQLite database ({message}): give --store the "
                          f"store.sqlite of a runs directory, or a new path to start a new store.")
    if "can't locate revision" in lowered or "no such revision" in lowered:
        return StoreError(
            f"run store {where} has schema revision {current or '?'}, newer than this seal-platform knows "
            f"(its newest is {head}): it was written by a newer version; upgrade seal-platform "
            f"(pip install -U seal-platform) or use another --store."
        )
    if not opening:
        return StoreError(f"run store {where}: a write failed ({message}).")
    return StoreError(f"cannot open run store {where}: {message}")


def current_revision(engine: Engine) -> str | None:
    """The store's Alembic revision, read directly (works even when this version does not know it)."""
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:
        return None


def translate(url: str, engine: Engine, head: str | None, exc: BaseException) -> Any:
    return describe(url, exc, head, current_revision(engine))


# What makes a database a seal-platform store, whatever its revision (each has had these since revision 0001):
# its tables, and its runs table's columns. A database of another application that happens to have a table
# named ``runs`` (or ``steps``) is not one.
OWN_TABLES = frozenset({"runs", "run_plugins", "steps", "trajectories", "turn_labels", "interface_revisions",
                        "label_weights", "evaluations", "checkpoints", "events"})
OWN_RUN_COLUMNS = frozenset({"id", "name", "recipe", "config", "config_hash", "seed", "status", "started_at",
                             "ended_at", "host", "pid", "run_dir", "last_step", "error"})


def schema_kind(engine: Engine) -> tuple[str, list[str]]:
    """Whether the database behind ``engine`` is a seal-platform store: ``("own", tables)``, ``("empty",
    tables)`` (no tables, or only an ``alembic_version``: a new store may be made there) or ``("foreign",
    tables)``. It only reads (SQLite's schema table); every path that opens a store, reading or writing, asks
    this before anything is changed. A database error (not a database, a damaged one) is the caller's."""
    from sqlalchemy import inspect

    inspector = inspect(engine)
    tables = sorted(inspector.get_table_names())
    if not set(tables) - {"alembic_version"}:
        return "empty", tables
    if set(tables) >= OWN_TABLES and {c["name"] for c in inspector.get_columns("runs")} >= OWN_RUN_COLUMNS:
        return "own", tables
    return "foreign", tables


def not_ours(where: Any, tables: list[str], *, changed: str = "nothing was changed") -> StoreError:
    """The one paragraph for a database that is not a seal-platform store (``tables``: what it holds)."""
    listed = ", ".join(tables[:8]) + (", ..." if len(tables) > 8 else "")
    return StoreError(f"{where} is not a seal-platform run store (its tables: {listed}); {changed}: give --store "
                      "the store.sqlite of a runs directory, or a new path to start a new store.")


MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def revisions() -> dict[str, str | None]:
    """The migrations' revisions (revision -> the one it revises), read from ``migrations/versions`` without
    importing Alembic (a read command does not need it: it costs a third of a second to import)."""
    import re

    found: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS / "versions").glob("[0-9]*.py")):
        text = script.read_text(encoding="utf-8")
        revision = re.search(r"^revision\s*=\s*[\"']([^\"']+)[\"']", text, re.M)
        down = re.search(r"^down_revision\s*=\s*(?:[\"']([^\"']+)[\"']|None)", text, re.M)
        if revision:
            found[revision.group(1)] = down.group(1) if down else None
    return found


def head_revision() -> str | None:
    """The newest revision: the one no other revises (what Alembic's ``get_current_head`` gives)."""
    known = revisions()
    heads = set(known) - {down for down in known.values() if down}
    return heads.pop() if len(heads) == 1 else None


def alembic_config(connection: Any = None, url: str | None = None) -> Any:
    """Alembic's configuration for the store's migrations (on ``connection``, or ``url``)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg
