"""The tool-worker server: the loop a BFCL worker process runs, its IPC protocol and its limits.

:class:`~.executor.ToolExecutor` starts worker processes that run :func:`worker_main`: it serves JSON
requests on a pipe (episode sessions whose tool calls run on :class:`~.backend.Backend` instances, and
verifications by :func:`~.checker.verify_texts`) under an address-space cap, while the parent times every
request and kills a worker that overruns. What is executed and how it is checked live in :mod:`.backend`
and :mod:`.checker`; this module has only the process side.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from seal_platform_libs.toolenv.calls import from_arguments

from .backend import Backend
from .checker import verify_texts
from .trace import ERROR_PREFIX


def _limit_resources(memory_bytes: int | None) -> None:
    if not memory_bytes:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform / not permitted: the timeout still holds
        pass


def _clip_result(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"... [output clipped: {len(text) - limit} more characters]"
    return text


def _verify_batch(conn: Any, request: dict[str, Any], payloads: dict[str, dict[str, Any]]) -> bool:
    """``{"op": "verify_batch", "items": [{"task": id, "payload": {...} | null, "turns": [...]}, ...]}``:
    one reply per item, in order, each sent as soon as it is done (the parent times each one). A payload is
    sent once per task and kept. Returns False when the parent has gone away."""
    for item in request.get("items") or []:
        started = time.perf_counter()
        try:
            task = str(item["task"])
            if item.get("payload") is not None:
                payloads[task] = item["payload"]
            reply: dict[str, Any] = {"ok": True, "outcome": verify_texts(payloads[task], item["turns"])}
        except MemoryError:
            reply = {"ok": False, "error": "the verification ran out of memory"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not _send_reply(conn, reply, started):
            return False
    return True


def _send_reply(conn: Any, reply: dict[str, Any], started: float) -> bool:
    """Stamp the reply's elapsed time and send it as JSON; False when the parent has gone."""
    reply["elapsed_s"] = time.perf_counter() - started
    try:
        conn.send_bytes(json.dumps(reply, default=str).encode("utf-8"))
    except (OSError, ValueError):
        return False
    return True


def worker_main(conn: Any, memory_bytes: int | None = None) -> None:
    """Serve requests on ``conn`` until told to exit or the parent goes away.

    Messages are JSON (never pickle): ``{"op": "open", "session": id, "payload": {...}}``, ``{"op": "call",
    "session": id, "name": ..., "arguments": {...}, "allowed": [...] | null, "max_chars": N}``,
    ``{"op": "close", "session": id}``, ``{"op": "verify", "payload": {...},
    "turns": [[call text, ...], ...]}``, ``{"op": "verify_batch", ...}`` (see :func:`_verify_batch`; one
    reply per item), ``{"op": "ping"}``, ``{"op": "exit"}``. Every reply is
    ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.
    """
    _limit_resources(memory_bytes)
    sessions: dict[str, Backend] = {}
    payloads: dict[str, dict[str, Any]] = {}
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        started = time.perf_counter()
        try:
            request = json.loads(raw)
            op = request.get("op")
            if op == "verify_batch":
                if not _verify_batch(conn, request, payloads):
                    return
                continue
            if op == "exit":
                conn.send_bytes(b'{"ok": true}')
                return
            if op == "ping":
                reply: dict[str, Any] = {"ok": True, "pid": os.getpid(), "sessions": len(sessions)}
            elif op == "open":
                # Each session gets its own instances and its own copies of shared long-context objects.
                opened = Backend.for_payload(request["payload"], shared={})
                sessions[str(request["session"])] = opened
                reply = {"ok": True, "tools": sorted(opened.method_names)}
            elif op == "close":
                sessions.pop(str(request.get("session")), None)
                reply = {"ok": True}
            elif op == "call":
                backend = sessions.get(str(request.get("session")))
                if backend is None:
                    reply = {"ok": False, "error": "no such session in this worker"}
                else:
                    call = from_arguments(request.get("name"), request.get("arguments"))
                    allowed = request.get("allowed")
                    text, rejected = backend.execute(call, None if allowed is None else set(allowed))
                    failed = text.startswith(ERROR_PREFIX)
                    text = _clip_result(text, int(request.get("max_chars") or 0))
                    reply = {
                        "ok": True,
                        "result": None if failed else text,
                        "error": text if failed else None,
                        "rejected": rejected,
                    }
            elif op == "verify":
                reply = {"ok": True, "outcome": verify_texts(request["payload"], request["turns"])}
            else:
                reply = {"ok": False, "error": f"unknown request {op!r}"}
        except MemoryError:
            reply = {"ok": False, "error": "the tool ran out of memory"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not _send_reply(conn, reply, started):
            return
