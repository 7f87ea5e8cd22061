"""Errors a user can fix. The CLI prints their message as one paragraph, without a traceback."""

from __future__ import annotations

from typing import Any


def as_sentence(text: str) -> str:
    """``text`` ending as a sentence does (a period added where it has no final punctuation), for an error
    message that another sentence follows."""
    text = text.rstrip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (what schedulers and ``kill`` send): the run stops as on Ctrl-C, marked
    ``interrupted`` and resumable, and the command exits with 143 (128 + 15) instead of 130."""


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
