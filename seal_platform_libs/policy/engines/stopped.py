"""Local replica processes stopped during a weight push (SIGSTOP, SIGTSTP to the replica alone): found from
their process state and killed, so that the push goes on without them.

A stopped replica neither dies nor answers: its sync-group sockets and its pipe stay open, so nothing ends the
push's wait for it but the group's timeout (``REPLICA_GROUP_TIMEOUT_S``, 120 s), after which the fallback's
probe counts it as busy and the host path waits for it without bound. Its process state is exact, though: the
kernel reports a process stopped by a signal as ``T`` in ``/proc/<pid>/stat``. While a push runs,
:class:`StoppedWatch` looks at the live replicas' states every 0.2 s; one seen stopped for :data:`STOPPED_S`
on end is killed, and from there on it is a replica killed in the push: its pipe closes, the push is given up
at once (``ReplicaPusher``) and goes through the host path to the others, and the client marks it dead. A
debugger's tracing stop (``t``) does not count, nor a stop the driver shares (Ctrl-Z stops the whole process
group, the driver too, and the resume continues them together). Linux only (elsewhere nothing is found);
a replica that hangs alive without being stopped (a deadlock) still holds the push for the group's timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

STOPPED_S = 2.0  # seen stopped this long during a push: killed
_POLL_S = 0.2


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state ``T``); False where ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:  # gone, or no /proc
        return False
    return stat[stat.rfind(b")") + 2:][:1] == b"T"  # "pid (name) state ...": the name may hold ") "


class StoppedWatch:
    """A context manager around a weight push to local replicas (``replicas``: objects with ``alive`` and a
    ``process``): kills a live replica whose process stays stopped for ``stopped_s``; ``killed``: their
    indices."""

    def __init__(self, replicas: list[Any], stopped_s: float = STOPPED_S):
        self.replicas = replicas
        self.stopped_s = stopped_s
        self.killed: list[int] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="seal-replica-stop-watch", daemon=True)

    def __enter__(self) -> StoppedWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        since: dict[int, float] = {}  # replica index -> when it was first seen stopped
        while not self._done.wait(_POLL_S):
            now = time.monotonic()
            for index, replica in enumerate(self.replicas):
                if not replica.alive or not stopped(int(replica.process.pid)):
                    since.pop(index, None)
                    continue
                if now - since.setdefault(index, now) < self.stopped_s:
                    continue
                log.warning("engine replica %d (pid %d) has been stopped for %.1f s during a weight push: killed, "
                            "the push goes on without it", index, replica.process.pid, now - since[index])
                replica.process.kill()
                since.pop(index)
                self.killed.append(index)
