"""Library output goes to ``<run dir>/run.log``, not the terminal.

vLLM, transformers, torch and the C++ libraries under them write to the process's stdout and stderr in
several ways: Python ``logging`` handlers of their own, ``warnings``, tqdm bars, and ``printf`` from native
code. The only place that catches all of them is the file descriptors, so while a run is in progress
:func:`quiet_terminal` points descriptors 1 and 2 at the run's log file and hands the caller a stream on the
real terminal for its own display. ``verbose`` leaves the descriptors alone (library logs on the terminal, as
before) and still copies Python logging into the log file.

A command that fails there (a run's stage that raised, a checkpoint that would not load) leaves its traceback at
the end of the log, written before the log is closed: the terminal shows one paragraph, the log the frames
(the run's ``crash`` event holds them too: ``seal-platform show RUN --traceback``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Scrubbed(logging.Formatter):
    """Log lines with the secrets met so far hidden (:func:`~seal_platform.recipe_secrets.scrub`): a failure's
    message and traceback may hold a URL's password or a token a plugin put in its error."""

    def format(self, record: logging.LogRecord) -> str:
        from .recipe_secrets import scrub

        return scrub(super().format(record))


def _log_handler(stream: IO[str]) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Scrubbed(_FORMAT))
    handler.setLevel(logging.INFO)
    return handler


def _log_failure(handler: logging.Handler, exc: Exception) -> None:
    """``exc`` with its traceback (and the errors it was raised from) into the log, through the log's own
    handler only: with ``verbose``, Python logging's other handlers (the terminal) get the one paragraph the
    CLI prints, not a traceback."""
    record = logging.LogRecord("seal_platform", logging.ERROR, __file__, 0, "failed: %s: %s",
                               (type(exc).__name__, exc), (type(exc), exc, exc.__traceback__))
    try:
        handler.handle(record)
        handler.flush()
    except Exception:  # a full disk, a closed stream: the failure itself still propagates
        pass


@contextmanager
def quiet_terminal(log_path: Path, verbose: bool = False) -> Iterator[IO[str]]:
    """Send library output to ``log_path`` for the duration; yields the stream to draw the display on.

    Without real file descriptors (output captured in-process, as by click's test runner) only Python
    logging is redirected.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 closed in the finally below
    root = logging.getLogger()
    old_level = root.level
    handler = _log_handler(log_file)
    root.addHandler(handler)
    root.setLevel(min(old_level or logging.WARNING, logging.INFO))
    if not verbose:
        # vLLM attaches its own stdout handler unless told not to; its records then reach the root handler.
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    saved: list[int] = []
    terminal: IO[str] = sys.stdout
    try:
        if not verbose:
            fds: tuple[int, ...]
            try:
                fds = (sys.stdout.fileno(), sys.stderr.fileno())
            except (AttributeError, OSError, ValueError):
                fds = ()
            if fds == (1, 2):
                sys.stdout.flush()
                sys.stderr.flush()
                saved = [os.dup(1), os.dup(2)]
                terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1, encoding=sys.stdout.encoding or "utf-8")
                os.dup2(log_file.fileno(), 1)
                os.dup2(log_file.fileno(), 2)
        yield terminal
    except Exception as exc:  # not a Ctrl-C or SIGTERM: an interruption is no failure to debug
        _log_failure(handler, exc)
        raise
    finally:
        if saved:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            terminal.close()
        root.removeHandler(handler)
        root.setLevel(old_level)
        # a full disk: what the log could not take is lost, the command's own outcome is not
        with contextlib.suppress(OSError):
            log_file.close()
