"""Every value read from a store is untrusted: a store may come from elsewhere (a colleague's copy, another
machine's, a file another tool wrote into), and one damaged value must cost the reader that row, not the command.

* JSON and date columns decode through :class:`TolerantJSON` and :class:`TolerantDateTime`: a value that does not
  decode becomes an :class:`Undecodable` instead of an exception in the middle of a query's rows.
* Every row the ORM loads is checked against its column types (:func:`problems`): an undecodable value, a
  number stored as text, text where a number belongs, an empty required value. A ``runs`` row with a problem is
  kept, the value replaced by a stand-in (:func:`stand_in`: ``{}``, no date, 0), so that ``runs`` lists every run
  and ``show`` shows what else the run has; any other row is left out (:func:`left_out`). Either way the
  store notes one line naming the run and the row (:meth:`RunStore.note_damage`), which the read commands
  print to standard error while their output goes on.
* A trajectory blob inflates under :data:`MAX_TRAJECTORY_JSON` (:func:`inflate`), the most the platform writes
  (:func:`seal_platform.store.pack_trajectory` refuses more), so a small blob cannot make a reader allocate
  gigabytes; more, or a blob that is not zlib or not a trajectory, is a :class:`DamagedValue`.
"""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, LargeBinary, String
from sqlalchemy.types import TypeDecorator

from ..errors import StoreError

# The largest trajectory (its JSON, uncompressed) the store writes and reads: 64 MiB, some 30 times a long
# multi-turn episode with every token id and log-prob of 16k generated tokens per turn over 32 turns.
MAX_TRAJECTORY_JSON = 64 * 2**20


class DamagedValue(StoreError):
    """A value in the store that cannot be read (a damaged or oversized blob, a malformed date or JSON text)."""


class Undecodable:
    """What a column read when its stored value did not decode (``raw``: the value as stored)."""

    __slots__ = ("raw", "why")

    def __init__(self, raw: Any, why: str):
        self.raw, self.why = raw, why

    def __repr__(self) -> str:
        return f"Undecodable({self.why})"


def _tolerant(processor: Any, why: str) -> Any:
    def process(value: Any) -> Any:
        if value is None or processor is None:
            return value
        try:
            return processor(value)
        except Exception:  # noqa: BLE001 - whatever the driver or the decoder raises on a damaged value
            return Undecodable(value, why)

    return process


class TolerantJSON(TypeDecorator):
    """JSON whose stored text may not be JSON: that value reads as :class:`Undecodable`."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _tolerant(super().result_processor(dialect, coltype), "is not JSON")


class TolerantDateTime(TypeDecorator):
    """A date and time whose stored text may not be one: that value reads as :class:`Undecodable`. (Any form
    SQLAlchemy parses is read: ``2026-11-29 03:00:00`` without microseconds, with a ``T``, with an offset.)"""

    impl = DateTime
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _tolerant(super().result_processor(dialect, coltype), "is not a date and time")


def _shown(value: Any) -> str:
    text = repr(value.raw if isinstance(value, Undecodable) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected(row: Any, key: str, column_type: Any) -> tuple[type | tuple[type, ...], str] | None:
    """The Python type(s) a column's values must have, and their name in a message (None: not checked)."""
    if isinstance(column_type, TolerantJSON):
        annotation = str(type(row).__annotations__.get(key, ""))
        if "list" in annotation:
            return list, "a JSON list"
        if "dict" in annotation:
            return dict, "a JSON object"
        return None
    if isinstance(column_type, TolerantDateTime):
        return datetime, "a date and time"
    if isinstance(column_type, Integer):
        return int, "a whole number"
    if isinstance(column_type, Float):
        return (int, float), "a number"
    if isinstance(column_type, LargeBinary):
        return bytes, "binary data"
    if isinstance(column_type, String):
        return str, "text"
    return None


def problems(row: Any) -> dict[str, str]:
    """The loaded columns of an ORM ``row`` whose values are not what the schema says: column -> what is wrong."""
    from sqlalchemy import inspect

    found: dict[str, str] = {}
    loaded = row.__dict__
    for column in inspect(type(row)).columns:
        key = column.key
        if key not in loaded:  # not loaded (deferred): not read, not checked
            continue
        value = loaded[key]
        if isinstance(value, Undecodable):
            found[key] = f"{_shown(value)} {value.why}"
            continue
        if value is None:
            if not column.nullable:
                found[key] = "is empty"
            continue
        expected = _expected(row, key, column.type)
        if expected is not None and (not isinstance(value, expected[0]) or isinstance(value, bool)):
            found[key] = f"{_shown(value)} is not {expected[1]}"
    return found


def stand_in(row: Any, key: str) -> Any:
    """What a ``runs`` row shows for a value it cannot read: nothing (None) where the column may be empty, else
    ``{}``/``[]``, 0 or the text as far as it is text."""
    from sqlalchemy import inspect

    column = inspect(type(row)).columns[key]
    value = row.__dict__.get(key)
    expected = _expected(row, key, column.type)
    if expected is not None and expected[0] is list:
        return []
    if expected is not None and expected[0] is dict:
        return {}
    if column.nullable or isinstance(column.type, TolerantDateTime):
        return None
    if isinstance(column.type, (Integer, Float)):
        return 0
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    raw = value.raw if isinstance(value, Undecodable) else value
    return "" if raw is None else str(raw)


def row_name(row: Any) -> str:
    """``run R: <table> row <id>`` (the run and the row's key as stored), for a line about a damaged row."""
    table = type(row).__tablename__
    key = row.__dict__.get("id")
    if table == "runs":
        return f"run {_text(key)}"
    run = row.__dict__.get("run_id")
    where = f"{table} row {_text(key)}" if key is not None else f"{table} row"
    step = row.__dict__.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        where += f" (step {step})"
    return f"run {_text(run)}: {where}" if run is not None else where


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return _shown(value)


def describe(found: dict[str, str]) -> str:
    return "; ".join(f"{key} {why}" for key, why in found.items())


def inflate(blob: Any, limit: int = MAX_TRAJECTORY_JSON) -> bytes:
    """A trajectory blob's JSON, inflated to at most ``limit`` bytes: a :class:`DamagedValue` when it is not
    binary data, not zlib data, truncated, or inflates to more (a small blob can inflate a thousandfold)."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise DamagedValue(f"the trajectory blob is {type(blob).__name__}, not binary data")
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(bytes(blob), limit)
        if inflater.unconsumed_tail:
            raise DamagedValue(f"the trajectory blob inflates to more than {limit:,} bytes, the most a stored "
                               "trajectory has; it was not read")
        data += inflater.flush(limit + 1 - len(data))  # what zlib still holds, bounded too
    except zlib.error as exc:
        raise DamagedValue(f"the trajectory blob is not zlib data ({exc})") from None
    if not inflater.eof:
        raise DamagedValue("the trajectory blob is truncated (its zlib stream does not end)")
    if len(data) > limit:
        raise DamagedValue(f"the trajectory blob inflates to more than {limit:,} bytes, the most a stored "
                           "trajectory has; it was not read")
    return data
