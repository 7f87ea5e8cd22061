"""Verify many transcripts in a child forked from this (already warm) process: ``seal-platform verify``'s
fast path.

The worker pool (:mod:`.executor`) starts workers from a fork server, a fresh interpreter that imports the
BFCL backends, and sends each transcript and its task over a pipe: right for training, where the trainer
process has many threads and cannot fork safely, but at the scale of one command that is most of its time.
Here the parent has already parsed every record and loaded every task, so a plain ``fork()`` gives a child
that has it all (copy-on-write): the child verifies the records one after another, exactly as in-process
verification does (fresh backend instances per transcript), and writes one output line per record. The
parent still holds each record to its own time limit: it waits at most ``timeout_s`` for each next line;
a child that overruns (a huge ``power``, say) or dies is killed, that record fails with a checker error, and
a new child goes on from the next record. The child's address space is capped like a worker's.

Only used where ``fork`` is available and this process runs a single thread (forking a threaded process can
deadlock the child); otherwise the caller uses the worker pool.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
from typing import Any, Callable, Sequence

Item = tuple[Any, Any]  # (task, parsed model turns)


def can_fork() -> bool:
    return hasattr(os, "fork") and threading.active_count() == 1


class _LineReader:
    """Lines from a pipe's raw descriptor, each waited for at most a given time."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = bytearray()

    def next_line(self, timeout_s: float) -> bytes | None:
        """The next line, or None if the writer closed the pipe; TimeoutError if none came in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            cut = self.buffer.find(b"\n")
            if cut >= 0:
                line = bytes(self.buffer[:cut])
                del self.buffer[: cut + 1]
                return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer.extend(chunk)


def _child(items: Sequence[Item], write_fd: int, score: Callable[[Any, Any], dict[str, Any]],
           memory_bytes: int | None) -> None:
    from ._worker import _limit_resources

    _limit_resources(memory_bytes)
    with os.fdopen(write_fd, "wb", buffering=1 << 16) as out:
        for task, turns in items:
            try:
                line = json.dumps(score(task, turns))
            except MemoryError:
                line = json.dumps({"__failed__": "the verification ran out of memory"})
            except Exception as exc:
                line = json.dumps({"__failed__": f"{type(exc).__name__}: {exc}"})
            out.write(line.encode("utf-8") + b"\n")
            out.flush()


def verify_forked(
    items: Sequence[Item],
    score: Callable[[Any, Any], dict[str, Any]],
    on_failure: Callable[[Any, Any, str], dict[str, Any]],
    *,
    timeout_s: float,
    memory_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """``score(task, turns)`` for every item, computed in forked children, each item within ``timeout_s``;
    an item that overruns, crashes its child or raises gets ``on_failure(task, turns, reason)``."""
    results: list[dict[str, Any]] = []
    while len(results) < len(items):
        start = len(results)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            status = 0
            try:
                os.close(read_fd)
                _child(items[start:], write_fd, score, memory_bytes)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(write_fd)
        reader = _LineReader(read_fd)
        try:
            for task, turns in items[start:]:
                try:
                    line = reader.next_line(timeout_s)
                except TimeoutError:
                    results.append(on_failure(task, turns, f"verification took longer than {timeout_s:g} s"))
                    break
                if line is None:
                    results.append(on_failure(task, turns, "the verification process died"))
                    break
                value = json.loads(line)
                failed = value.get("__failed__") if isinstance(value, dict) else None
                results.append(on_failure(task, turns, failed) if failed else value)
        finally:
            os.close(read_fd)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    return results
