"""Tool execution outside the trainer process: a small pool of worker processes hosting episode sessions.

:class:`ToolExecutor` starts ``max_workers`` worker processes (lazily; forked from a fork server that has
the BFCL backends imported, so a restart costs milliseconds). Each :meth:`ToolExecutor.open_session` gives
an episode its own, freshly built backend instances inside one worker; sessions never share instances, and
long-context module objects the backends would share are copied per session. Requests travel as JSON over
a pipe (never pickle), and the worker only ever parses literals and dispatches by exact method name (see
``backend.py``; the worker's loop is ``_worker.py``), so model text is never evaluated.

Time limits: each call is bounded by ``call_timeout_s`` and a session's calls together by
``episode_timeout_s``. A call that overruns gets the worker process killed (nothing else can stop a
runaway C-level computation such as a huge ``power``); the call returns a tool error and the worker is
restarted on next use. Other sessions that lived in that worker are rebuilt transparently by replaying their
completed calls (the backends are deterministic), so a timeout costs them time, never state.

Sessions are thread-safe (one call at a time per session; calls of sessions in different workers run in
parallel) and the executor is shared by all episode threads.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from seal_platform.types import Task, TurnVerdict
from seal_platform_libs.toolenv.calls import ParsedCall

from .trace import CHECKER_ERROR, ERROR_PREFIX, TurnChecks, VerifyOutcome


@dataclass
class CallResult:
    """The outcome of one tool call.

    ``result`` is the tool's output stringified as BFCL's official inference does (clipped to the
    executor's ``max_result_chars``); on failure it is None and ``error`` holds the observation the model
    should see, ``"Error during execution: ..."`` -- a raised exception, a refused call (``rejected``: nothing
    ran: unknown or unavailable tool, undeclared argument name, non-JSON arguments) or a time limit.
    A backend's own ``{"error": ...}`` reply is a successful call whose ``result`` says so.
    """

    result: str | None
    error: str | None = None
    rejected: bool = False
    timed_out: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def observation(self) -> str:
        """What the model sees for this call."""
        return self.result if self.result is not None else (self.error or "")


class ExecutorError(RuntimeError):
    """The executor itself failed (a worker cannot start, the executor is closed)."""


# A call whose JSON form is longer than this is refused unsent (no BFCL tool needs more than a few KB).
MAX_REQUEST_CHARS = 200_000
# Time allowed for starting a worker and building a session's instances (or replaying its calls).
_SETUP_TIMEOUT_S = 60.0


class _WorkerTimeout(Exception):
    pass


class _WorkerDied(Exception):
    pass


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start worker processes without re-running the user's ``__main__``: spawn and forkserver children
    re-import the main script (by path, or by module name under ``python -m``) unless it is hidden, and a
    script that calls the platform at top level, without an ``if __name__ == "__main__"`` guard, would then
    start a run in every worker. The workers need nothing from it (their target is :func:`worker_main`)."""
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {}
    if main is not None:
        for name in ("__file__", "__spec__"):
            if getattr(main, name, None) is not None:
                saved[name] = getattr(main, name)
                setattr(main, name, None) if name == "__spec__" else delattr(main, name)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


_Context = multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext


def _context() -> _Context:
    if sys.platform.startswith("linux"):
        ctx = multiprocessing.get_context("forkserver")
        from .backend import BACKEND_MODULES

        # The fork server imports these once; every worker forked from it starts with them loaded.
        ctx.set_forkserver_preload([__name__.rsplit(".", 1)[0] + "._worker", *BACKEND_MODULES.values()])
        return ctx
    return multiprocessing.get_context("spawn")


class _Slot:
    """One worker process (restarted on demand) and the sessions living in it."""

    def __init__(self, index: int, ctx: _Context, memory_bytes: int | None):
        self.index = index
        self.ctx = ctx
        self.memory_bytes = memory_bytes
        self.lock = threading.Lock()
        self.process: Any = None
        self.conn: Any = None
        self.generation = 0
        self.sessions = 0
        # Task ids whose payload a worker generation already holds (verify_many sends each once).
        self.known_tasks: dict[int, set[str]] = {}

    def _ensure(self) -> None:
        if self.process is not None and self.process.is_alive():
            return
        self._discard()
        from ._worker import worker_main

        parent, child = self.ctx.Pipe(duplex=True)
        process = self.ctx.Process(
            target=worker_main, args=(child, self.memory_bytes), daemon=True, name=f"bfcl-tools-{self.index}"
        )
        with _main_module_hidden():
            process.start()
        child.close()
        self.process, self.conn = process, parent
        self.generation += 1

    def _discard(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait for its reply; the caller holds ``self.lock``."""
        self.send(message)
        return self.receive(timeout)

    def send(self, message: dict[str, Any]) -> None:
        """Send a request (the worker started if needed); the caller holds ``self.lock``."""
        self._ensure()
        try:
            self.conn.send_bytes(json.dumps(message).encode("utf-8"))
        except (OSError, ValueError) as exc:
            self._discard()
            raise _WorkerDied(str(exc)) from None

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next reply, waiting at most ``timeout`` seconds (then the worker is killed)."""
        try:
            ready = self.conn.poll(max(timeout, 0.001))
        except (OSError, ValueError) as exc:
            self._discard()
            raise _WorkerDied(str(exc)) from None
        if not ready:
            self._discard()
            raise _WorkerTimeout()
        try:
            return json.loads(self.conn.recv_bytes())
        except (EOFError, OSError, ValueError) as exc:
            self._discard()
            raise _WorkerDied(str(exc) or "the worker process exited") from None

    def stop(self) -> None:
        with self.lock:
            if self.process is not None and self.process.is_alive():
                try:
                    self.conn.send_bytes(b'{"op": "exit"}')
                    if self.conn.poll(2):
                        self.conn.recv_bytes()
                except (OSError, EOFError):
                    pass
                self.process.join(timeout=2)
            self._discard()


def _payload_for_worker(task: Task) -> dict[str, Any]:
    keys = ("id", "initial_config", "involved_classes", "ground_truth")
    return {key: task.payload[key] for key in keys if key in task.payload} | {"id": task.id}


class Session:
    """One episode's private backend state in a worker process. Use as a context manager or ``close()``."""

    def __init__(self, executor: ToolExecutor, task: Task, slot: _Slot, session_id: str):
        self.task = task
        self.session_id = session_id
        self._executor = executor
        self._slot = slot
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._generation = -1
        self._used_s = 0.0
        self._closed = False
        self.tools: list[str] = []
        with slot.lock:
            self._attach()

    def _attach(self) -> None:
        """(Re)create this session's instances in the slot's current worker, replaying completed calls."""
        slot, executor = self._slot, self._executor
        slot._ensure()
        # Starting a worker and building a long-context backend are not the model's doing: a generous limit.
        limit = max(executor.call_timeout_s, _SETUP_TIMEOUT_S)
        reply = slot.request(
            {"op": "open", "session": self.session_id, "payload": _payload_for_worker(self.task)}, limit
        )
        if not reply.get("ok"):
            raise ExecutorError(f"cannot build the backend of task {self.task.id}: {reply.get('error')}")
        self.tools = reply.get("tools", [])
        for message in self._log:
            reply = slot.request(message, limit)
            if not reply.get("ok"):
                raise ExecutorError(f"replaying session {self.session_id} failed: {reply.get('error')}")
        self._generation = slot.generation

    def call(self, name: str, arguments: dict[str, Any] | None, allowed_tools: Iterable[str] | None) -> CallResult:
        """Execute one tool call of this episode.

        ``allowed_tools`` is the episode's current tool list (None: every backend method); a name outside it
        is refused. Argument names must be the tool's declared parameters and values JSON values. Never
        raises for anything the model did; the failure is in ``CallResult.error``.
        """
        executor = self._executor
        allowed = None if allowed_tools is None else sorted(set(allowed_tools))
        message = {
            "op": "call",
            "session": self.session_id,
            "name": name,
            "arguments": arguments if arguments is not None else {},
            "allowed": allowed,
            "max_chars": executor.max_result_chars,
        }
        try:
            size = len(json.dumps(message))
        except (TypeError, ValueError, RecursionError) as exc:
            return CallResult(None, ERROR_PREFIX + f"arguments must be JSON values: {exc}", rejected=True)
        if size > MAX_REQUEST_CHARS:
            return CallResult(
                None,
                ERROR_PREFIX + f"the call's arguments are too large ({size} characters; at most {MAX_REQUEST_CHARS})",
                rejected=True,
            )
        with self._lock:
            if self._closed:
                return CallResult(None, ERROR_PREFIX + "the episode's tool session is closed", rejected=True)
            budget = executor.episode_timeout_s - self._used_s
            if budget <= 0:
                return CallResult(
                    None,
                    ERROR_PREFIX + f"the episode's tool time limit ({executor.episode_timeout_s:g} s) is used up",
                    rejected=True,
                    timed_out=True,
                )
            limit = min(executor.call_timeout_s, budget)
            slot = self._slot
            with slot.lock:
                try:
                    if self._generation != slot.generation or slot.process is None or not slot.process.is_alive():
                        self._attach()
                    started = time.perf_counter()
                    reply = slot.request(message, limit)
                    elapsed = time.perf_counter() - started
                except _WorkerTimeout:
                    self._used_s += limit
                    return CallResult(
                        None,
                        ERROR_PREFIX + f"the call took longer than {limit:g} s and was stopped",
                        timed_out=True,
                        elapsed_s=limit,
                    )
                except (_WorkerDied, ExecutorError) as exc:
                    return CallResult(None, ERROR_PREFIX + f"the tool process failed: {exc}")
            self._used_s += elapsed
            if not reply.get("ok"):
                return CallResult(None, ERROR_PREFIX + str(reply.get("error")), elapsed_s=elapsed)
            if not reply.get("rejected"):
                # Only calls that ran change state, so only they are replayed after a worker restart.
                self._log.append(message)
            return CallResult(
                reply.get("result"), reply.get("error"), rejected=bool(reply.get("rejected")), elapsed_s=elapsed
            )

    def close(self) -> None:
        """Drop this session's instances. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slot = self._slot
            with self._executor._lock:
                slot.sessions -= 1
            with slot.lock:
                if slot.process is not None and self._generation == slot.generation:
                    with contextlib.suppress(_WorkerTimeout, _WorkerDied):
                        slot.request({"op": "close", "session": self.session_id}, self._executor.call_timeout_s)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ToolExecutor:
    """Runs BFCL tool calls and verifications in worker processes.

    ``max_workers`` worker processes (2 suit a 2-core machine; calls take microseconds to milliseconds, so
    a few workers serve many concurrent episodes); ``call_timeout_s`` per call; ``episode_timeout_s`` for
    all calls of a session together (and for one verification); results longer than ``max_result_chars``
    are clipped; ``memory_limit_mb`` caps each worker's address space (None: no cap).
    """

    def __init__(
        self,
        max_workers: int = 2,
        call_timeout_s: float = 10.0,
        episode_timeout_s: float = 120.0,
        max_result_chars: int = 16_000,
        memory_limit_mb: int | None = 4096,
    ):
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        if call_timeout_s <= 0 or episode_timeout_s <= 0:
            raise ValueError("call_timeout_s and episode_timeout_s must be positive")
        self.max_workers = max_workers
        self.call_timeout_s = float(call_timeout_s)
        self.episode_timeout_s = float(episode_timeout_s)
        self.max_result_chars = int(max_result_chars)
        memory_bytes = memory_limit_mb * 1024 * 1024 if memory_limit_mb else None
        ctx = _context()
        self._slots = [_Slot(i, ctx, memory_bytes) for i in range(max_workers)]
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._round_robin = itertools.count()
        self._closed = False

    def _pick(self) -> _Slot:
        with self._lock:
            if self._closed:
                raise ExecutorError("the tool executor is closed")
            return min(self._slots, key=lambda slot: (slot.sessions, slot.index))

    def open_session(self, task: Task) -> Session:
        """Fresh backend instances for one episode of ``task`` (built from its ``initial_config``)."""
        slot = self._pick()
        with self._lock:
            slot.sessions += 1
            session_id = f"s{next(self._ids)}"
        try:
            return Session(self, task, slot, session_id)
        except (_WorkerTimeout, _WorkerDied) as exc:
            with self._lock:
                slot.sessions -= 1
            raise ExecutorError(f"cannot start the tool session of task {task.id}: {exc or 'timed out'}") from None
        except BaseException:
            with self._lock:
                slot.sessions -= 1
            raise

    def verify(self, task: Task, model_turns: list[list[ParsedCall]]) -> VerifyOutcome:
        """Verify a transcript in a worker (fresh instances, ``episode_timeout_s`` limit).

        A verification that overruns or crashes its worker counts as failed, with a checker error on every
        turn.
        """
        with self._lock:
            if self._closed:
                raise ExecutorError("the tool executor is closed")
            slot = self._slots[next(self._round_robin) % len(self._slots)]
        message = {
            "op": "verify",
            "payload": _payload_for_worker(task),
            "turns": [
                [call.render() if call.error is None else _unrunnable(call) for call in turn] for turn in model_turns
            ],
        }
        with slot.lock:
            try:
                reply = slot.request(message, self.episode_timeout_s)
            except _WorkerTimeout:
                return _failed_outcome(task, model_turns, f"verification took longer than {self.episode_timeout_s:g} s")
            except _WorkerDied as exc:
                return _failed_outcome(task, model_turns, f"verification worker died: {exc}")
        if not reply.get("ok"):
            return _failed_outcome(task, model_turns, str(reply.get("error")))
        return VerifyOutcome.from_json(reply["outcome"])

    def verify_many(self, items: list[tuple[Task, list[list[ParsedCall]]]], chunk: int = 256) -> list[VerifyOutcome]:
        """Verify many transcripts in one worker as a stream: each transcript still gets its own fresh
        instances and its own ``episode_timeout_s`` limit (the worker replies per transcript; one that
        overruns gets the worker killed, counts as failed, and the rest go on in a new worker), but without a
        round trip per transcript, and each task's payload is sent to a worker once."""
        with self._lock:
            if self._closed:
                raise ExecutorError("the tool executor is closed")
            slot = self._slots[next(self._round_robin) % len(self._slots)]
        results: list[VerifyOutcome] = []
        with slot.lock:
            while len(results) < len(items):
                start = len(results)
                batch = items[start : start + chunk]
                slot._ensure()
                known = slot.known_tasks.setdefault(slot.generation, set())
                message_items: list[dict[str, Any]] = []
                message = {"op": "verify_batch", "items": message_items}
                for task, turns in batch:
                    message_items.append({
                        "task": task.id,
                        "payload": None if task.id in known else _payload_for_worker(task),
                        "turns": [[c.render() if c.error is None else _unrunnable(c) for c in turn] for turn in turns],
                    })
                    known.add(task.id)
                try:
                    slot.send(message)
                except _WorkerDied as exc:
                    task, turns = batch[0]
                    results.append(_failed_outcome(task, turns, f"verification worker died: {exc}"))
                    continue
                for task, turns in batch:
                    try:
                        reply = slot.receive(self.episode_timeout_s)
                    except _WorkerTimeout:
                        results.append(
                            _failed_outcome(task, turns, f"verification took longer than {self.episode_timeout_s:g} s")
                        )
                        break
                    except _WorkerDied as exc:
                        results.append(_failed_outcome(task, turns, f"verification worker died: {exc}"))
                        break
                    if not reply.get("ok"):
                        results.append(_failed_outcome(task, turns, str(reply.get("error"))))
                    else:
                        results.append(VerifyOutcome.from_json(reply["outcome"]))
        return results

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [slot.process.pid for slot in self._slots if slot.process is not None and slot.process.is_alive()]

    def close(self) -> None:
        """Stop every worker. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for slot in self._slots:
            slot.stop()

    def __enter__(self) -> ToolExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the real way
        try:  # noqa: SIM105 at interpreter exit a module's globals (contextlib) may be gone already
            self.close()
        except Exception:
            pass


def _unrunnable(call: ParsedCall) -> str:
    # A call that failed to parse must fail again in the worker; its text (or a marker) does exactly that.
    return call.text if call.text else "<unparseable call>"


def _failed_outcome(task: Task, model_turns: list[list[ParsedCall]], reason: str) -> VerifyOutcome:
    gt_turns = task.payload.get("ground_truth", [])
    turns = []
    for index, gt_calls in enumerate(gt_turns):
        reached = index < len(model_turns)
        made = {"model_calls": [call.render() for call in model_turns[index]],
                "empty_model": not model_turns[index]} if reached else {}
        checks = TurnChecks.unreached(gt_calls, checker_error=reason, error_type=CHECKER_ERROR, instance_ok=False,
                                      **made)
        turns.append(TurnVerdict(turn=index, passed=False, reached=reached, checks=checks.model_dump()))
    return VerifyOutcome(
        success=False,
        turns=turns,
        error_type=CHECKER_ERROR,
        error_message=reason,
        n_gt_turns=len(gt_turns),
        n_model_turns=len(model_turns),
        unfinished=reason,
    )
