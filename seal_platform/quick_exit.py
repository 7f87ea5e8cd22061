"""Ending the process without the interpreter's teardown, once a command is done (``seal-platform verify``).

When a Python process exits, the interpreter first frees every object it still holds, one by one, as it tears
its modules down. For ``verify`` of the 3,200 BFCL agreement cases that is the task data, the parsed records,
the plugins' caches: some 10-25 ms of a 0.6 s command on two cores, spent on memory that the operating system
takes back at once anyway. A command that has finished its work, and closed what it opened, may ask for a
quick exit (:func:`request`). Then, when the command line returns, the console entry point
(:func:`seal_platform.__main__.main`) calls :func:`exit_if_requested`, which:

1. flushes standard output and standard error;
2. runs the exit handlers (:mod:`atexit`: logging's shutdown, the finalizers of temporary files and folders,
   a coverage tool's), and flushes the two streams again (for what the handlers wrote);
3. ends the process with the command's status (``os._exit``).

Only the freeing of memory is skipped. The quick exit is refused, and the interpreter exits as usual, when a
thread other than the main one is still running (the interpreter would wait for it), or when flushing the
streams fails (a reader that went away: the usual exit reports it). Only the console entry point acts on a
request. A command run inside a longer-lived process (a test's ``CliRunner``, a library caller of
:func:`seal_platform.cli.main`) only sets the flag, and that process goes on.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

_requested = False


def request() -> None:
    """Ask for a quick exit when the command line returns (see the module doc). Call it only once the
    command's work is done and written, and what it opened is closed."""
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def exit_if_requested(status: object) -> None:
    """End the process now with ``status`` (a ``SystemExit`` code: None or an int) if a command requested a
    quick exit and it is safe; otherwise return, and the caller exits as usual (a message as the status, too:
    the usual exit prints it)."""
    if not _requested or threading.active_count() != 1 or not isinstance(status, (int, type(None))):
        return
    code = status or 0
    if not _flushed():  # a closed pipe or stream: the usual exit says so, as it always has
        return
    atexit._run_exitfuncs()  # they run once: the usual exit, if it follows, finds none left
    if _flushed():  # what the exit handlers wrote too
        os._exit(code)


def _flushed() -> bool:
    """Flush standard output and standard error; False if that failed."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True
