"""Reading a store that cannot be written (a file or directory without write permission, an immutable file,
a copy on read-only media), and every store a read command (`runs`, `show`, `report`, `compare`) opens: read-only.

A read-only open never writes: no migration, no ``journal_mode`` switch, no crashed-run marks (a dead run
still *reads* as ``crashed``). SQLite opens the file with ``mode=ro``; where that fails because the WAL
index (``<store>-shm``) cannot be created next to the file, with ``immutable=1`` as long as no write-ahead log
holds data that would then be missed. A schema other than this version's head is one paragraph: newer
(upgrade seal-platform), older (it needs a migration, which writes), or none (not a seal-platform store).
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError, OperationalError

from ..errors import StoreError
from .safety import current_revision, describe, not_ours, schema_kind, sqlite_path


def not_writable(url: str) -> str | None:
    """Why an existing SQLite store cannot be written (None if it can, or for other databases)."""
    path = sqlite_path(url)
    if path is None or not path.is_file():
        return None
    if not os.access(path, os.W_OK):
        return "the file is not writable"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return "its directory is not writable (SQLite writes its journal there)"
    return None


def read_only_urls(url: str) -> list[str]:
    """The SQLAlchemy URLs to try, in order, for a read-only open of the SQLite store at ``url``."""
    path = sqlite_path(url)
    assert path is not None
    uri = f"sqlite:///file:{path.resolve()}?uri=true&mode=ro"
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return [uri]  # immutable=1 would ignore the log's committed rows
    return [uri, uri + "&immutable=1"]


def unreadable(url: str, reason: str, exc: BaseException) -> StoreError:
    path = sqlite_path(url) or url
    message = str(getattr(exc, "orig", None) or exc)
    return StoreError(
        f"run store {path} cannot be opened read-only ({reason}; SQLite: {message}): SQLite needs to create "
        f"{path}-shm next to a store whose write-ahead log {path}-wal holds data; make the directory writable, "
        f"or copy the store and its -wal file somewhere writable and pass --store."
    )


def check_schema(url: str, engine: Engine, head: str | None, reason: str) -> None:
    """Refuse, in one paragraph, a read-only store whose schema is not this version's head."""
    from .safety import revisions

    path = sqlite_path(url) or url
    try:
        kind, names = schema_kind(engine)
    except OperationalError:
        raise  # the caller may retry with immutable=1 (the WAL index could not be created)
    except DatabaseError as exc:  # not a database, or a damaged one ("database disk image is malformed")
        raise describe(url, exc, head) from None
    if kind == "empty" and not [n for n in names if n != "alembic_version"]:
        if reason == "opened read-only":
            raise StoreError(f"{path} is an empty file, not a seal-platform run store (a read command writes "
                             "nothing, so it does not set one up): give --store the store.sqlite of a runs directory.")
        raise StoreError(f"run store {path} is empty and cannot be written ({reason}), so it cannot be set up "
                         f"either: give --store the store.sqlite of a runs directory.")
    if kind != "own":
        raise not_ours(path, names, changed="nothing was read or changed")
    current = current_revision(engine)
    if current == head:
        return
    if current is None:
        raise StoreError(f"run store {path} has seal-platform's tables but no schema version (alembic_version): it "
                         "was not written by seal-platform, or was damaged; nothing was read or changed.")
    if current not in revisions():
        raise StoreError(
            f"run store {path} has schema revision {current}, newer than this seal-platform knows (its newest "
            f"is {head}): it was written by a newer version; upgrade seal-platform (pip install -U "
            f"seal-platform) to read it."
        )
    if reason == "opened read-only":
        raise StoreError(
            f"run store {path} has schema revision {current}, older than this seal-platform's {head}; read "
            f"commands do not change a store: upgrade it in place once with `seal-platform upgrade-store --store "
            f"sqlite:///{path}` (back it up first if another seal-platform version still uses it)."
        )
    raise StoreError(
        f"run store {path} has schema revision {current}, older than this seal-platform's {head}, and cannot "
        f"be written ({reason}), so it cannot be upgraded for reading: make it writable and run "
        f"`seal-platform upgrade-store --store sqlite:///{path}` once, or read it with the seal-platform version "
        f"that wrote it."
    )
