"""Errors a user can fix. The CLI prints their message as one paragraph, without a traceback."""

from __future__ import annotations

import errno
import math
import numbers
import os
from collections.abc import Iterable
from typing import Any


def as_sentence(text: str) -> str:
    """``text`` ending as a sentence does (a period added where it has no final punctuation), for an error
    message that another sentence follows."""
    text = text.rstrip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending ``...``), for messages about a value a plugin or a
    user gave; a ``repr`` that fails (a plugin's own object, as broken as the rest of it) is ``<Type object>``."""
    try:
        text = repr(value)
    except (Exception, SystemExit):
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listed(values: Iterable[Any], limit: int = 5, *, quote: bool = True) -> str:
    """A short list of ``values`` for messages, in brackets: the first ``limit`` of them, then ``...`` when there
    are more; each one :func:`short_repr`, or (``quote=False``: items a message has worded already) ``str``."""
    values = list(values)
    items = [short_repr(v) if quote else str(v) for v in values[:limit]]
    return "[" + ", ".join(items) + (", ..." if len(values) > limit else "") + "]"


def finite_reward(value: Any) -> bool:
    """Whether ``value`` is a reward the core can use and store: a real number, finite, not a bool. The one
    test of the stage checks (:func:`seal_platform.stages.check_trajectories`) and of the store's guard before
    a write (which writers that bypass the stages meet)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


# Below this many free bytes a failed write is taken for a full disk: a write that ran out of space took what
# there was (what is left to this user is f_bavail; a filesystem keeps some blocks for root).
DISK_FULL_BELOW = 4 * 2**20
_DISK_FULL_TEXT = ("no space left", "disk is full", "disk quota exceeded")


def disk_full(path: str | os.PathLike[str], exc: BaseException | None = None) -> str | None:
    """Why a write under ``path`` that raised ``exc`` failed for lack of space, or None: an ``OSError`` with
    ``ENOSPC`` / ``EDQUOT`` (or a message saying so: SQLite's "database or disk is full") anywhere in the
    exception chain, or less than :data:`DISK_FULL_BELOW` left to this user on the filesystem of ``path``
    (libraries that lose the errno: torch's ``save`` on a full disk says only "unexpected pos")."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "the disk is full" if exc.errno == errno.ENOSPC else "the disk quota is exceeded"
        if any(text in str(exc).lower() for text in _DISK_FULL_TEXT):
            return "the disk is full"
        exc = exc.__cause__ or exc.__context__
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    return f"the disk is full ({free / 2**20:.1f} MiB left)" if free < DISK_FULL_BELOW else None


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (what schedulers and ``kill`` send) or SIGHUP (its terminal or SSH session
    went away): the run stops as on Ctrl-C, marked ``interrupted`` and resumable, and the command exits with
    128 + the signal's number (143 for SIGTERM, 129 for SIGHUP) instead of 130."""

    def __init__(self, signame: str = "SIGTERM", signum: int = 15):
        super().__init__(signame)
        self.signame, self.signum = signame, signum

    @property
    def how(self) -> str:
        """What stopped the command, for its messages: ``stopped by SIGTERM``."""
        return f"stopped by {self.signame}"

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class SealError(Exception):
    """Base class: a problem the user can act on; ``str(exc)`` says what and how."""


class ConfigError(SealError):
    def __init__(self, message: str, issues: list[Any] | None = None):
        super().__init__(message)
        self.issues = issues or []


class PluginError(SealError):
    """A plugin the recipe depends on is missing, blocked or broken, or it broke a contract."""


class StoreError(SealError):
    """The run store cannot be opened or does not hold what was asked for."""
