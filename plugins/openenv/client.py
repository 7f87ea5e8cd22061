"""Talking to an OpenEnv server, without ``openenv-core`` (only ``httpx`` and ``websockets``).

The wire format (openenv-core's ``HTTPEnvServer``):

* ``GET /health`` -> ``{"status": "healthy"}``; ``GET /schema`` -> ``{"action": <JSON schema>, "observation": ...,
  "state": ...}``.
* Every reset or step answers ``{"observation": {...}, "reward": number | null, "done": bool}`` (plus an
  optional ``metadata``).
* ``ws`` transport: a WebSocket at ``/ws`` is one session with its own environment instance. Messages are
  ``{"type": "reset", "data": {seed, episode_id, ...}}``, ``{"type": "step", "data": <action>}``,
  ``{"type": "state"}`` and ``{"type": "close"}``; answers are ``{"type": "observation", "data": <result>}``,
  ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message", "code"}}``.
* ``http`` transport: ``POST /reset`` (body: the reset arguments), ``POST /step`` (body ``{"action": ...}``),
  ``GET /state``. Current openenv-core servers make a fresh environment for every such request (stateless:
  a multi-step episode needs ``ws``); servers that keep one environment (older openenv-core, or written so)
  play one episode at a time over it.

A refused action (``422``/``400``, or a ``VALIDATION_ERROR``/``EXECUTION_ERROR`` answer on ``/ws``) is the
agent's mistake: :class:`ActionRefused`, shown to the agent. Anything else that goes wrong -- the server does
not answer in time, the connection fails, an answer is not what the protocol says, a 5xx -- raises
:class:`seal_platform.infra.InfraError` naming the URL: the episode is lost to the infrastructure (masked).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from seal_platform.errors import SealError
from seal_platform.executables import launch_spec
from seal_platform.infra import InfraError

from .settings import OpenEnvServerSettings

MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # one answer; a larger one is a server fault
REFUSED_WS_CODES = ("VALIDATION_ERROR", "EXECUTION_ERROR")
SHAPE = 'expected {"observation": {...}, "reward": a number or null, "done": true or false}'


class OpenEnvUnavailable(SealError):
    """The OpenEnv server named in the recipe cannot be reached or used (raised while the run starts)."""


class NoAnswer(InfraError):
    """The server did not answer a request in time (it may be reachable, only slow)."""


class ErrorAnswer(InfraError):
    """The server answered a message of a session with an error (other than a refused action or session)."""


class SessionRefused(InfraError):
    """The server refused a session: it serves as many as it allows (openenv-core's ``CAPACITY_REACHED``)."""

    def __init__(self, message: str, max_sessions: int | None):
        super().__init__(message)
        self.max_sessions = max_sessions


class ActionRefused(Exception):
    """The server refused the agent's action (its message is shown to the agent)."""


@dataclass
class StepResult:
    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] | None = None


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_result(data: Any, url: str, op: str) -> StepResult:
    """A reset/step answer checked against the protocol; anything else raises :class:`InfraError`."""
    def bad(why: str) -> InfraError:
        return InfraError(f"the OpenEnv server at {url} sent a malformed {op} answer ({why}; {SHAPE})")

    if not isinstance(data, dict):
        return _raise(bad(f"a {type(data).__name__}, not an object"))
    if not isinstance(data.get("observation"), dict):
        return _raise(bad("no observation object"))
    reward = data.get("reward")
    if isinstance(reward, bool):
        reward = float(reward)
    if reward is not None and (not isinstance(reward, (int, float)) or not _finite(reward)):
        return _raise(bad(f"reward {_short(reward, 40)}"))
    done = data.get("done", False)
    if not isinstance(done, bool):
        return _raise(bad(f"done {_short(done, 40)}"))
    metadata = data.get("metadata")
    return StepResult(data["observation"], None if reward is None else float(reward), done,
                      metadata if isinstance(metadata, dict) else None)


def _finite(number: float) -> bool:
    """Whether ``number`` is a finite float (an integer too large for a float is not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _raise(exc: Exception) -> Any:
    raise exc


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(raw: bytes | str, url: str, op: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InfraError(f"the OpenEnv server at {url} answered {op} with something that is not JSON "
                         f"({type(exc).__name__}: {_short(str(exc), 120)})") from None


class HTTPClient:
    """Plain HTTP requests to one server (``/health``, ``/schema`` and the ``http`` transport)."""

    def __init__(self, url: str, timeout: float):
        import httpx

        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(timeout=timeout, trust_env=not is_loopback(url), follow_redirects=False)

    def request(self, method: str, path: str, op: str, body: Any = None) -> tuple[int, Any]:
        """``(status, parsed JSON)``; transport failures and oversized or non-JSON answers raise InfraError.
        The whole answer must come within ``timeout`` of wall-clock time (httpx's own timeouts bound each read:
        a server that trickles its answer would pass them one byte at a time)."""
        import httpx

        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream(method, self.url + path, json=body) as response:
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise InfraError(f"the OpenEnv server at {self.url} answered {op} with more than "
                                         f"{MAX_RESPONSE_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise NoAnswer(f"the OpenEnv server at {self.url} did not finish its answer to {op} "
                                       f"within {self.timeout:g} s")
                    chunks.append(chunk)
                status = response.status_code
        except httpx.TimeoutException:
            raise NoAnswer(f"the OpenEnv server at {self.url} did not answer {op} within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise InfraError(f"the OpenEnv server at {self.url} could not be reached for {op} "
                             f"({type(exc).__name__}: {_short(str(exc), 160)})") from None
        raw = b"".join(chunks)
        if status >= 500 or status in (404, 405):
            raise InfraError(f"the OpenEnv server at {self.url} answered {op} with HTTP {status}: "
                             f"{_short(raw.decode('utf-8', 'replace'))}")
        return status, _json(raw, self.url, op)

    def close(self) -> None:
        self._http.close()


class HTTPSession:
    """The ``http`` transport: the server's one environment (one episode at a time per server)."""

    def __init__(self, url: str, timeout: float):
        self.url = url.rstrip("/")
        self._client = HTTPClient(url, timeout)

    def reset(self, arguments: dict[str, Any]) -> StepResult:
        status, data = self._client.request("POST", "/reset", "reset", arguments)
        if status >= 400:
            raise InfraError(f"the OpenEnv server at {self.url} refused reset {_short(arguments, 80)} with HTTP "
                             f"{status}: {_short(data)}")
        return parse_result(data, self.url, "reset")

    def step(self, action: dict[str, Any]) -> StepResult:
        status, data = self._client.request("POST", "/step", "step", {"action": action})
        if status in (400, 422):
            detail = data.get("detail", data) if isinstance(data, dict) else data
            raise ActionRefused(_short(detail, 600))
        if status >= 400:
            raise InfraError(f"the OpenEnv server at {self.url} answered step with HTTP {status}: {_short(data)}")
        return parse_result(data, self.url, "step")

    def state(self) -> dict[str, Any]:
        status, data = self._client.request("GET", "/state", "state")
        if status >= 400 or not isinstance(data, dict):
            raise InfraError(f"the OpenEnv server at {self.url} sent a malformed state answer: {_short(data)}")
        return data

    def close(self) -> None:
        self._client.close()


def ws_url(url: str) -> str:
    parts = urlsplit(url.rstrip("/"))
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}{parts.path}/ws"


class WSSession:
    """The ``ws`` transport: one WebSocket session (the server's own environment instance for it)."""

    def __init__(self, url: str, timeout: float):
        from websockets.sync.client import connect

        self.url = url.rstrip("/")
        self.timeout = timeout
        self._ws: Any = None
        try:
            self._ws = connect(ws_url(url), open_timeout=timeout, close_timeout=2, max_size=MAX_RESPONSE_BYTES,
                               proxy=None if is_loopback(url) else True)
        except Exception as exc:  # noqa: BLE001 - refused, DNS, handshake, timeout: all infrastructure
            raise InfraError(f"the OpenEnv server at {self.url} could not open a session on {ws_url(url)} "
                             f"({type(exc).__name__}: {_short(str(exc), 160)})") from None

    def _ask(self, message: dict[str, Any], op: str, expect: str) -> Any:
        from websockets.exceptions import ConnectionClosed

        try:
            # what the server said before it closed (a refused session's error) is still read below
            with contextlib.suppress(ConnectionClosed):
                self._ws.send(json.dumps(message))
            raw = self._ws.recv(timeout=self.timeout)
        except TimeoutError:
            raise InfraError(
                f"the OpenEnv server at {self.url} did not answer {op} within {self.timeout:g} s"
            ) from None
        except ConnectionClosed as exc:
            raise InfraError(f"the OpenEnv server at {self.url} closed the session during {op} ({exc})") from None
        except Exception as exc:  # noqa: BLE001
            raise InfraError(
                f"the session with the OpenEnv server at {self.url} failed during {op} "
                f"({type(exc).__name__}: {_short(str(exc), 160)})"
            ) from None
        answer = _json(raw, self.url, op)
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), dict):
            raise InfraError(f"the OpenEnv server at {self.url} sent a malformed {op} answer: {_short(answer)} "
                             '(expected {"type": ..., "data": {...}})')
        if answer.get("type") == "error":
            data = answer["data"]
            if data.get("code") == "CAPACITY_REACHED":
                limit = data.get("max_sessions")
                limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
                raise SessionRefused(f"the OpenEnv server at {self.url} refused a session: it serves "
                                     f"{limit if limit else 'a limited number of'} session(s) at once and all were "
                                     f"taken ({_short(data.get('message', ''), 160)})", limit)
            if op == "step" and data.get("code") in REFUSED_WS_CODES:
                detail = data.get("errors") or data.get("message") or "the action was refused"
                raise ActionRefused(_short(detail, 600))
            raise ErrorAnswer(f"the OpenEnv server at {self.url} answered {op} with an error: "
                             f"{_short(data.get('message', data))} (code {_short(data.get('code'), 40)})")
        if answer.get("type") != expect:
            raise InfraError(f"the OpenEnv server at {self.url} answered {op} with a {_short(answer.get('type'), 40)} "
                             f"message (expected {expect})")
        return answer["data"]

    def reset(self, arguments: dict[str, Any]) -> StepResult:
        return parse_result(self._ask({"type": "reset", "data": arguments}, "reset", "observation"), self.url, "reset")

    def step(self, action: dict[str, Any]) -> StepResult:
        return parse_result(self._ask({"type": "step", "data": action}, "step", "observation"), self.url, "step")

    def state(self) -> dict[str, Any]:
        return self._ask({"type": "state"}, "state", "state")

    def close(self) -> None:
        if self._ws is None:
            return
        ws, self._ws = self._ws, None
        with contextlib.suppress(Exception):  # best effort
            ws.send(json.dumps({"type": "close"}))
        with contextlib.suppress(Exception):
            ws.close()


def probe(url: str, timeout: float) -> dict[str, Any] | None:
    """Check the server answers ``/health``; return its ``/schema`` (None when it has none). Raises
    :class:`OpenEnvUnavailable` with a paragraph naming the URL."""
    client = HTTPClient(url, timeout)
    try:
        try:
            status, _ = client.request("GET", "/health", "health")
        except InfraError as exc:
            raise OpenEnvUnavailable(
                f"The OpenEnv server at {url} is not usable: {exc}. Start it (or let the plugin start a local "
                "one: settings.openenv.server) and check settings.openenv.url; see docs/openenv.md.") from None
        if status != 200:
            raise OpenEnvUnavailable(f"The OpenEnv server at {url} answered GET /health with HTTP {status}; it is "
                                     "not ready. See docs/openenv.md.")
        try:
            status, schema = client.request("GET", "/schema", "schema")
        except InfraError:
            return None
        return schema if status == 200 and isinstance(schema, dict) else None
    finally:
        client.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalServer:
    """A local OpenEnv server process started from the recipe; ``url`` once :meth:`start` returned."""

    def __init__(self, settings: OpenEnvServerSettings):
        self.settings = settings
        self.url = ""
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    def start(self) -> str:
        s = self.settings
        port = free_port()
        command, cwd = launch_spec(s.command, s.cwd)  # as check_machine looked for them
        args = [a.replace("{port}", str(port)) for a in s.args]
        self.url = f"http://127.0.0.1:{port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 the server's output while it runs; closed by stop()
        try:
            self.process = subprocess.Popen([command, *args], cwd=cwd, env={**os.environ, **s.env},
                                            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        except OSError as exc:
            raise OpenEnvUnavailable(f"The local OpenEnv server ({command} {' '.join(args)}) could not be started: "
                                     f"{exc}. Check settings.openenv.server.") from None
        deadline = time.monotonic() + s.startup_timeout_s
        client = HTTPClient(self.url, 2.0)
        try:
            while True:
                if self.process.poll() is not None:
                    raise self._failed(f"exited with status {self.process.returncode} before answering GET /health")
                try:
                    status, _ = client.request("GET", "/health", "health")
                    if status == 200:
                        return self.url
                except InfraError:
                    pass
                if time.monotonic() > deadline:
                    raise self._failed(f"did not answer GET /health at {self.url} within {s.startup_timeout_s:g} s")
                time.sleep(0.1)
        finally:
            client.close()

    def _failed(self, why: str) -> OpenEnvUnavailable:
        self._log.seek(0)
        tail = self._log.read()[-600:].decode("utf-8", "replace").strip().replace("\n", " | ")
        self.stop()
        return OpenEnvUnavailable(f"The local OpenEnv server ({self.settings.command} {' '.join(self.settings.args)}) "
                                  f"{why}. Its last output: {tail or '(none)'}. Check settings.openenv.server.")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=5)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
