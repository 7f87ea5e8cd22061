"""Verify many transcripts in children forked from this (already warm) process: ``seal-platform verify``'s
fast path.

The worker pool (:mod:`.executor`) starts workers from a fork server, a fresh interpreter that imports the
BFCL backends, and sends each transcript and its task over a pipe: right for training, where the trainer
process has many threads and cannot fork safely, but at the scale of one command that is most of its time.
Here a child forked by :mod:`multiprocessing` (its ``fork`` start method) has the imports, the task data and the caches
(copy-on-write): the items are dealt out in small blocks to one lane per usable CPU (blocks rather than one
contiguous slice each, so that a file sorted by category -- long-context tasks cost twice the others -- still
splits evenly), and each lane's child scores its items one after another (fresh backend instances per
transcript), writing one output line per item. The parent holds each item to its own time limit: it waits
at most ``timeout_s`` for a lane's next line; a child that overruns (a huge ``power``, say) or dies is
killed, that item gets ``on_failure``, and a new child goes on from the lane's next item. Every child's
address space is capped like a worker's.

Only used where ``fork`` is available and this process runs a single thread (forking a threaded process can
deadlock the child); otherwise the caller uses the worker pool. Each child reports on a pipe of its own,
which the parent reads with ``select``; multiprocessing starts, kills and reaps it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

# Imported here, in the parent, not in each child: _worker brings the checker that every verification uses.
from . import backend as _backend
from ._worker import _limit_resources


class _Ticks:
    """When each lane's child last finished a tool call (``time.monotonic()``, one double per lane) in memory
    shared with the children: a child marks it after every call without a system call, and the parent reads
    it when a call window runs out. (CLOCK_MONOTONIC is one clock for every process of the machine.)"""

    def __init__(self, lanes: int):
        import mmap

        self.memory = mmap.mmap(-1, 8 * max(1, lanes))

    def marker(self, slot: int) -> Callable[[], None]:
        import struct

        memory, offset, now, pack = self.memory, 8 * slot, time.monotonic, struct.pack_into

        def mark() -> None:
            pack("d", memory, offset, now())

        return mark

    def last(self, slot: int) -> float:
        import struct

        return float(struct.unpack_from("d", self.memory, 8 * slot)[0])


def can_fork() -> bool:
    return hasattr(os, "fork") and threading.active_count() == 1


def _child_main(items: Sequence[Any], read_fd: int, write_fd: int, score: Callable[[Any], dict[str, Any]],
                memory_bytes: int | None, ticks: _Ticks | None, slot: int, parent: int) -> None:
    """A lane's child (a multiprocessing target): score ``items`` onto ``write_fd``. Anything that escapes
    the per-item handling ends the child with status 1 and no traceback: the parent sees its pipe close and
    gives the item ``on_failure``."""
    try:
        _die_with(parent)
        os.close(read_fd)
        _child(items, write_fd, score, memory_bytes, ticks, slot)
    except BaseException:
        raise SystemExit(1) from None


def _child(items: Sequence[Any], write_fd: int, score: Callable[[Any], dict[str, Any]],
           memory_bytes: int | None, ticks: _Ticks | None = None, slot: int = 0) -> None:
    _limit_resources(memory_bytes)
    if ticks is not None:  # each tool call marks the lane's progress, for the per-call time limit
        _backend.CALL_DONE = ticks.marker(slot)
    with os.fdopen(write_fd, "wb", buffering=1 << 16) as out:
        for item in items:
            try:
                line = json.dumps(score(item))
            except MemoryError:
                line = json.dumps({"__failed__": "the verification ran out of memory"})
            except Exception as exc:
                line = json.dumps({"__failed__": f"{type(exc).__name__}: {exc}"})
            out.write(line.encode("utf-8") + b"\n")
            out.flush()


def _die_with(parent: int) -> None:
    """In a child: be killed when ``parent`` dies (Linux ``PR_SET_PDEATHSIG``), since only the parent holds the
    child to its time limit; a parent killed outright (SIGKILL, the OOM killer) would otherwise leave it running,
    re-parented, for as long as its transcript takes. Elsewhere nothing changes."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own clean-up still stops its children
        return
    if os.getppid() != parent:  # the parent died before the call above
        raise SystemExit(1)


# With a per-call limit, the least time a lane's first call of an item gets (it includes building the task's
# instances, and a new child's start).
FIRST_CALL_S = 5.0

# How long the parent waits, once one lane has output, for the others' (a short pause, well within any item's
# time limit: it delays the last result by at most this).
GATHER_S = 0.002


def default_lanes() -> int:
    """How many children verify at once: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _Lane:
    """The items at ``indices`` (in that order), scored by one forked child at a time."""

    def __init__(self, indices: Sequence[int], slot: int = 0):
        self.indices = indices
        self.slot = slot  # this lane's place in the shared progress marks (_Ticks)
        self.next = 0  # position in ``indices`` of the next result expected
        self.process: Any = None  # the multiprocessing.Process of the lane's current child
        self.fd: int | None = None  # the read end of the child's output pipe
        self.buffer = bytearray()
        self.deadline = 0.0  # when the item (or, with a per-call limit, the call under way) has overrun
        self.item_end = 0.0  # when the item as a whole has overrun
        self.seen = 0.0  # the last progress mark taken into account

    def begin(self, limit: float, call_window: float | None) -> None:
        """The next item starts now: its whole ``limit``, and (``call_window``) a window for its first call."""
        now = time.monotonic()
        self.item_end, self.seen = now + limit, now
        self.deadline = self.item_end if call_window is None else min(self.item_end, now + call_window)

    def extend(self, ticks: _Ticks | None, call_limit: float | None, now: float) -> bool:
        """Past its deadline: whether the child finished a call since the last look, the next call then getting
        ``call_limit`` from that moment (within the item's own limit)."""
        if ticks is None or call_limit is None or self.deadline >= self.item_end:
            return False
        mark = ticks.last(self.slot)
        if mark <= self.seen:
            return False
        self.seen = mark
        self.deadline = min(self.item_end, mark + call_limit)
        return self.deadline > now

    @property
    def done(self) -> bool:
        return self.next >= len(self.indices)

    def start(self, items: Sequence[Any], score: Callable[[Any], dict[str, Any]],
              memory_bytes: int | None, timeout_s: Callable[[int], float], ticks: _Ticks | None = None,
              call_window: float | None = None) -> None:
        """Fork a child that verifies this lane's items from ``next`` on."""
        todo = [items[i] for i in self.indices[self.next:]]
        read_fd, write_fd = os.pipe()
        process = multiprocessing.get_context("fork").Process(
            target=_child_main, args=(todo, read_fd, write_fd, score, memory_bytes, ticks, self.slot, os.getpid()),
            daemon=True)
        try:
            process.start()
        finally:
            os.close(write_fd)
        self.process, self.fd, self.buffer = process, read_fd, bytearray()
        self.begin(timeout_s(self.indices[self.next]), call_window)

    def stop(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process.close()
            self.process = None


def deal(n: int, lanes: int, blocks_per_lane: int = 16) -> list[list[int]]:
    """Item indices ``0..n-1`` dealt to ``lanes`` lanes in consecutive blocks, round robin, about
    ``blocks_per_lane`` blocks each (each lane's indices ascending)."""
    block = max(1, -(-n // (lanes * blocks_per_lane)))
    out: list[list[int]] = [[] for _ in range(lanes)]
    for number, start in enumerate(range(0, n, block)):
        out[number % lanes].extend(range(start, min(n, start + block)))
    return [indices for indices in out if indices]


def verify_forked(
    items: Sequence[Any],
    score: Callable[[Any], dict[str, Any]],
    on_failure: Callable[[Any, str], dict[str, Any]],
    *,
    timeout_s: float | Callable[[Any], float],
    memory_bytes: int | None = None,
    lanes: int | None = None,
    min_per_lane: int = 64,
    call_timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """``score(item)`` for every item, computed in forked children, each item within ``timeout_s``; an item
    that overruns, crashes its child or raises gets ``on_failure(item, reason)``.

    The items are dealt to up to ``lanes`` lanes (default: one per usable CPU, at least ``min_per_lane``
    items each; see :func:`deal`) scored side by side, one child per lane; results come back in the items'
    order. A child that overruns or dies is killed and a new one goes on from the next item of its lane.
    ``timeout_s`` may be a function of the item (a limit per transcript, e.g. from its number of calls).

    ``call_timeout_s``: also each tool call the children make (:meth:`.backend.Backend.execute`) within this
    many seconds of the one before (the first within :data:`FIRST_CALL_S` at least, which includes building the
    task's instances), as training's worker pool holds every call: a runaway call costs its item this limit,
    not the item's whole ``timeout_s``."""
    n = len(items)

    def limit_of(index: int) -> float:
        return float(timeout_s(items[index])) if callable(timeout_s) else float(timeout_s)
    count = max(1, min(lanes or default_lanes(), n // max(1, min_per_lane)))
    all_lanes = [_Lane(indices, slot) for slot, indices in enumerate(deal(n, count))]
    results: list[dict[str, Any] | None] = [None] * n
    ticks = _Ticks(len(all_lanes)) if call_timeout_s is not None else None
    window = None if call_timeout_s is None else max(call_timeout_s, FIRST_CALL_S)

    def start(lane: _Lane) -> None:
        lane.start(items, score, memory_bytes, limit_of, ticks, window)

    def overrun(lane: _Lane) -> str:
        if call_timeout_s is not None and lane.deadline < lane.item_end:
            return f"a tool call took longer than {call_timeout_s:g} s (the per-call time limit, as in training)"
        return f"verification took longer than {limit_of(lane.indices[lane.next]):g} s"

    def fail(lane: _Lane, reason: str) -> None:
        index = lane.indices[lane.next]
        results[index] = on_failure(items[index], reason)
        lane.next += 1
        lane.stop()

    try:
        for lane in all_lanes:
            if not lane.done:
                start(lane)
        while True:
            active = [lane for lane in all_lanes if not lane.done]
            if not active:
                break
            for lane in active:  # a lane whose child was stopped goes on from its next item
                if lane.fd is None:
                    start(lane)
            now = time.monotonic()
            overdue = [lane for lane in active if lane.deadline <= now and not lane.extend(ticks, call_timeout_s, now)]
            for lane in overdue:
                fail(lane, overrun(lane))
            if overdue:
                continue
            wait = min(lane.deadline for lane in active) - now
            # Every active lane has a child (started above) and so a read end.
            fds = [lane.fd for lane in active if lane.fd is not None]
            ready, _, _ = select.select(fds, [], [], wait)
            if ready and len(ready) < len(active):
                # Let the other lanes' lines gather before reading: one wake-up per few lines of every lane,
                # not one per line (with a lane per CPU the wake-ups were most of this process's time).
                time.sleep(GATHER_S)
                ready, _, _ = select.select(fds, [], [], 0)
            for lane in active:
                if lane.fd is None or lane.fd not in ready:
                    continue
                chunk = os.read(lane.fd, 1 << 16)
                if not chunk:  # the child exited before answering for this item
                    fail(lane, "the verification process died")
                    continue
                lane.buffer.extend(chunk)
                while not lane.done:
                    cut = lane.buffer.find(b"\n")
                    if cut < 0:
                        break
                    line = bytes(lane.buffer[:cut])
                    del lane.buffer[: cut + 1]
                    index = lane.indices[lane.next]
                    value = json.loads(line)
                    failed = value.get("__failed__") if isinstance(value, dict) else None
                    results[index] = on_failure(items[index], failed) if failed else value
                    lane.next += 1
                    if not lane.done:
                        lane.begin(limit_of(lane.indices[lane.next]), window)
                if lane.done:
                    lane.stop()
    finally:
        for lane in all_lanes:
            lane.stop()
    return results  # type: ignore[return-value]
