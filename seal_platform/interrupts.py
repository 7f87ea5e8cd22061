"""Ctrl-C that libraries swallow or re-wrap: noticed anyway.

Transformers' lazy imports turn a KeyboardInterrupt into a ``ModuleNotFoundError``; a ``__del__`` or a
callback that catches everything prints ``Exception ignored in ...`` and goes on. Every command runs inside
:func:`interrupts_noted` (SIGINT is also noted in a flag); :func:`raise_if_interrupted` raises at the points
where going on would be wrong (the lifecycle's start, after the environment and the engine are built, after
each stage call), and :func:`as_interruption` recognises an error that is how an interruption surfaced.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import Terminated

_sigint_noted = False  # a SIGINT came while interrupts_noted() was on (reset when it is turned on and off)


@contextmanager
def interrupts_noted() -> Iterator[None]:
    """While the body runs, SIGINT raises KeyboardInterrupt as Python's own handler does and is also noted,
    for :func:`as_interruption` and :func:`raise_if_interrupted`. Only in the main thread and where SIGINT has
    Python's own handler (not where it is ignored, as in a background job, or handled by someone else)."""
    global _sigint_noted
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def note(signum: int, frame: Any) -> None:
        global _sigint_noted
        _sigint_noted = True
        signal.default_int_handler(signum, frame)

    _sigint_noted = False
    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _sigint_noted = False


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a SIGINT was noted (see :func:`interrupts_noted`): one that reached here without
    an exception carrying it was swallowed by a library, and the run must not go on as if it had not come."""
    if _sigint_noted:
        raise KeyboardInterrupt("Ctrl-C (SIGINT) came earlier, and a library swallowed its KeyboardInterrupt")


def as_interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt to raise for ``exc`` (a :class:`Terminated` for SIGTERM) when ``exc`` is the way an
    interruption surfaced: a KeyboardInterrupt in its ``__cause__`` / ``__context__`` chain (or inside an
    exception group), or an error (an ``Exception``) after a noted SIGINT; else None."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return Terminated(current.signame, current.signum) if isinstance(current, Terminated) \
                else KeyboardInterrupt(str(current))
        pending += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions
    if _sigint_noted and isinstance(exc, Exception):
        return KeyboardInterrupt(f"Ctrl-C (SIGINT) came before this error: {type(exc).__name__}")
    return None
