"""A synchronous handle on one MCP server session (stdio: a process started from the recipe, never from model
output; streamable HTTP: a new MCP session with a running server's endpoint, named in the recipe). The SDK is
asynchronous; all sessions of the process share one background event loop, and each
session lives in its own task (the SDK's context managers must be entered and left in the same task).

Anything that goes wrong with the server itself -- it does not start, does not answer in time, exits, or sends
what the SDK cannot read -- raises :class:`seal_platform.infra.InfraError`: the episode is lost to the
infrastructure (masked), the run goes on. A tool that reports an error (``isError``) is a normal result.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Self

from seal_platform.executables import launch_spec
from seal_platform.infra import InfraError

from .settings import MCPServerSettings

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP.is_closed():
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="mcp-client-loop", daemon=True).start()
        return _LOOP


_DEVNULL: Any = None


def _devnull() -> Any:
    """Where the servers' stderr goes (a server's log says nothing to the agent; the episode's fate is recorded)."""
    global _DEVNULL
    with _LOCK:
        if _DEVNULL is None:
            _DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - one for the process
        return _DEVNULL


class ToolResult:
    """A tool's answer: its text content (joined) and whether the tool flagged it as an error."""

    def __init__(self, text: str, is_error: bool):
        self.text = text
        self.is_error = is_error


class MCPConnection:
    """One live session with one server. ``open`` starts it; every call is bounded by the server's timeout."""

    def __init__(self, server: MCPServerSettings):
        self.server = server
        self.folder: str | None = None  # this start's own folder ({episode_dir}), removed by close
        self._launch = server  # the server as started: {episode_dir} replaced
        self._requests: asyncio.Queue | None = None
        self._ready: Future = Future()
        self._task: Future | None = None
        self.closed = False

    # --- the session task (runs on the shared loop) --------------------------------------------------------

    async def _run(self) -> None:
        s = self.server
        self._requests = asyncio.Queue()
        try:
            import anyio
            from mcp.client.session import ClientSession

            async with self._transport() as (read_stream, write_stream):
                # The session's default read timeout bounds `initialize` (a server's start: startup_timeout_s);
                # tool calls pass timeout_s themselves and a listing is bounded by the caller (_request).
                session_cm = ClientSession(read_stream, write_stream,
                                           read_timeout_seconds=max(s.timeout_s, s.startup_timeout_s))
                async with session_cm as session:
                    with anyio.fail_after(s.startup_timeout_s):
                        await session.initialize()
                    self._ready.set_result(True)
                    while True:
                        op, args, fut = await self._requests.get()
                        if op == "close":
                            fut.set_result(None)
                            return
                        try:
                            fut.set_result(await self._do(session, op, args))
                        except BaseException as exc:  # handed to the caller's thread
                            fut.set_exception(exc)
                            if not isinstance(exc, Exception):
                                raise
        except BaseException as exc:  # noqa: BLE001
            if not self._ready.done():
                self._ready.set_exception(exc)
            while self._requests is not None and not self._requests.empty():
                _, _, fut = self._requests.get_nowait()
                if not fut.done():
                    fut.set_exception(RuntimeError(f"the session ended: {exc!r}"))

    def _transport(self) -> Any:
        """The SDK's transport context manager: a stdio process, or a streamable-HTTP session."""
        s = self.server
        if s.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=dict(s.headers) or None)
            return streamable_http_client(s.url, http_client=client, terminate_on_close=True)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        s = self._launch
        command, cwd = launch_spec(str(s.command), s.cwd)  # as check_machine looked for them
        params = StdioServerParameters(command=command, args=list(s.args), env=dict(s.env) or None, cwd=cwd)
        return stdio_client(params, errlog=_devnull())

    def _where(self) -> str:
        """The server as errors name it (with its URL for a streamable-HTTP server)."""
        return f"{self.server.name!r} at {self.server.url}" if self.server.url else repr(self.server.name)

    async def _do(self, session: Any, op: str, args: Any) -> Any:
        if op == "list_tools":
            result = await session.list_tools()
            return [{"name": t.name, "description": t.description or "",
                     "input_schema": dict(getattr(t, "input_schema", None) or getattr(t, "inputSchema", None) or {})}
                    for t in result.tools]
        name, arguments = args
        result = await session.call_tool(name, arguments, read_timeout_seconds=self.server.timeout_s)
        parts = []
        for block in result.content or []:
            text = getattr(block, "text", None)
            parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')} omitted]")
        return ToolResult("\n".join(parts), bool(getattr(result, "is_error", False)))

    # --- the synchronous side ---------------------------------------------------------------------------------

    def start(self) -> MCPConnection:
        """Start the process and the session without waiting (``wait_ready`` waits): many servers start at once.
        A server whose recipe names ``{episode_dir}`` gets a fresh folder first, with its ``seed_files`` copied in
        (a copy that fails shows as the start's failure in ``wait_ready``)."""
        if self.server.uses_episode_dir():
            try:
                self._make_folder()
            except OSError as exc:
                self._ready.set_exception(exc)
                return self
        self._task = asyncio.run_coroutine_threadsafe(self._run(), _loop())
        return self

    def _make_folder(self) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"seal-mcp-{self.server.name[:20]}-".replace("/", "_"))
        for seed in self.server.seed_files:
            source = Path(seed).expanduser()
            target = Path(self.folder) / source.name
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        self._launch = self.server.in_folder(self.folder)

    def open(self) -> Self:
        self.start().wait_ready()
        return self

    def wait_ready(self) -> MCPConnection:
        try:
            self._ready.result(timeout=self.server.startup_timeout_s + 5)
        except FutureTimeout as exc:
            self.close()
            raise InfraError(
                f"MCP server {self._where()} did not start within {self.server.startup_timeout_s:g} s"
            ) from exc
        except (Exception, asyncio.CancelledError) as exc:
            self.close()
            raise InfraError(f"MCP server {self._where()} failed to start: {_why(exc)}") from exc
        return self

    def _request(self, op: str, args: Any, timeout: float) -> Any:
        if self.closed or self._task is None or self._task.done():
            raise InfraError(f"MCP server {self._where()} is gone")
        fut: Future = Future()
        loop = _loop()
        loop.call_soon_threadsafe(self._requests.put_nowait, (op, args, fut))  # type: ignore[union-attr]
        try:
            return fut.result(timeout=timeout)
        except FutureTimeout:
            self.close()
            raise InfraError(f"MCP server {self._where()} did not answer {op} within {timeout:g} s") from None
        except (Exception, asyncio.CancelledError) as exc:  # the SDK cancelled the request (not KeyboardInterrupt)
            self.close()
            raise InfraError(f"MCP server {self._where()} failed during {op}: {_why(exc)}") from exc

    def list_tools(self) -> list[dict[str, Any]]:
        return self._request("list_tools", None, self.server.timeout_s + 2)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return self._request("call", (name, arguments), self.server.timeout_s + 2)

    def close(self) -> None:
        """Stop the session and the process (the SDK closes stdin, then terminates the process tree; over
        streamable HTTP it ends the session with a DELETE)."""
        if self.closed:
            return
        self.closed = True
        task = self._task
        try:
            if task is None or task.done():
                return
            fut: Future = Future()
            _loop().call_soon_threadsafe(self._requests.put_nowait, ("close", None, fut))  # type: ignore[union-attr]
            try:
                task.result(timeout=8)
            except Exception:  # noqa: BLE001 - a session that will not close is cancelled
                task.cancel()
        finally:
            if self.folder is not None:  # the process tree is gone (or was never started)
                shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _why(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_why(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"[:300]
