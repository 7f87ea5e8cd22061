"""What :func:`~.plugin.check_machine` can tell about the OpenEnv server a recipe names in a few seconds.

A running server (``settings.openenv.url``): that its host name resolves, that something answers there, and that
it speaks the OpenEnv protocol as far as the run's start needs it (``GET /health`` answers 200 with JSON; the
action is described by a JSON object schema: ``settings.openenv.action_schema``, else ``GET /schema``'s
``action``). These are the checks the environment makes when the run builds it, made here before the run's row
is written or a model is loaded. The probe runs in a daemon thread that the check waits for at most
``probe_timeout_s`` (or ``timeout_s`` if less) for the host's resolution and ``GET /health`` together, and as
long again for ``GET /schema``: a blocking ``getaddrinfo`` (which no HTTP timeout covers) or a server that
trickles its answer cannot hold the check longer.

A local server (``settings.openenv.server``) is started by the run itself, so it is not probed; its command is
looked up as the run will start it (on the PATH it gets, or an executable file) and its working directory must
exist."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from seal_platform.executables import command_problems
from seal_platform.infra import InfraError

from .settings import PROBE_TIMEOUT_S, OpenEnvSettings

__all__ = ["PROBE_TIMEOUT_S", "server_problems", "url_problems"]

_FAILED = "check the URL and the server; see docs/openenv.md."
# What to do about a server that does not answer GET /health.
_START = ("start the server (or let the plugin start a local one: settings.openenv.server), or fix the URL (an "
          "OpenEnv server answers GET /health); see docs/openenv.md.")


def server_problems(settings: OpenEnvSettings) -> list[str]:
    """Each problem with starting the local server ``settings.server`` on this machine, as one paragraph
    (its command is not found or not executable, its cwd is not a folder); empty without a local server."""
    server = settings.server
    if server is None:
        return []
    return command_problems("settings.openenv.server", server.command, cwd=server.cwd, env=server.env)


def url_problems(settings: OpenEnvSettings) -> list[str]:
    """Each problem with the server at ``settings.url`` as one paragraph (what was asked, what answered, what to
    do); empty when it looks usable, when the recipe starts a local server instead, or when the server was
    only slow to describe its action (the run's own check, with ``timeout_s``, decides then). Returns within
    about twice the probe's limit whatever the server or the name resolver do; never raises."""
    if not settings.url or settings.server is not None:
        return []
    url = settings.url.rstrip("/")
    try:
        problem = _bounded(url, settings)
    except Exception as exc:  # noqa: BLE001 - a machine check reports, it never raises
        problem = f"probing the OpenEnv server at {url} failed ({type(exc).__name__}: {exc}); {_FAILED}"
    return [] if problem is None else [f"settings.openenv.url: {problem}"]


class _Watch:
    """What the probe's thread is doing (``resolve``, ``health``, ``schema``), until when it may, and its answer
    once it has one."""

    def __init__(self, limit: float):
        self.limit = limit
        self.changed = threading.Condition()
        self.stage = "resolve"
        self.started = time.monotonic()
        self.deadline = self.started + limit
        self.resolving_took = 0.0
        self.done = False
        self.abandoned = False  # the check answered without the thread: it makes no further request
        self.answer: str | None = None

    def enter(self, stage: str, *, new_budget: bool = False) -> bool:
        """Whether the thread should go on to ``stage`` (not when the check has already answered)."""
        with self.changed:
            now = time.monotonic()
            if self.stage == "resolve":
                self.resolving_took = now - self.started
            self.stage = stage
            if new_budget:
                self.deadline = now + self.limit
            self.changed.notify_all()
            return not self.abandoned

    def finish(self, answer: str | None) -> None:
        with self.changed:
            self.done, self.answer = True, answer
            self.changed.notify_all()


def _limit(settings: OpenEnvSettings) -> float:
    return min(settings.timeout_s, settings.probe_timeout_s)


def _raise_limit(settings: OpenEnvSettings) -> str:
    """Which setting to raise for a server (or resolver) that is only slow."""
    if settings.timeout_s < settings.probe_timeout_s:
        return (f"raise settings.openenv.timeout_s (now {settings.timeout_s:g} s; the check waits no longer than a "
                "run would)")
    return f"raise settings.openenv.probe_timeout_s (now {settings.probe_timeout_s:g} s)"


def _bounded(url: str, settings: OpenEnvSettings) -> str | None:
    """:func:`_problem` in a daemon thread, waited for stage by stage; a stage past its deadline is the answer
    (the thread is left to end on its own: its requests have timeouts, a hung resolver holds only it)."""
    watch = _Watch(_limit(settings))

    def work() -> None:
        try:
            answer = _problem(url, settings, watch)
        except Exception as exc:  # noqa: BLE001 - reported, never raised
            answer = f"probing the OpenEnv server at {url} failed ({type(exc).__name__}: {exc}); {_FAILED}"
        watch.finish(answer)

    threading.Thread(target=work, name=f"openenv-probe {url}", daemon=True).start()
    with watch.changed:
        while not watch.done:
            left = watch.deadline - time.monotonic()
            if left <= 0:
                watch.abandoned = True
                return _late(url, settings, watch)
            watch.changed.wait(left)
        return watch.answer


def _late(url: str, settings: OpenEnvSettings, watch: _Watch) -> str | None:
    limit = watch.limit
    if watch.stage == "resolve":
        host = urlsplit(url).hostname
        return (f"the host name {host!r} of {url} did not resolve within {limit:g} s (this machine's name resolver "
                "did not answer), so a run cannot use it: check the host name and this machine's DNS (or give "
                f"the server's IP address in the URL); if the resolver is only slow, {_raise_limit(settings)}; "
                "see docs/openenv.md.")
    if watch.stage == "health":
        took = (f" (resolving its host name took {watch.resolving_took:.1f} s of that)"
                if watch.resolving_took >= 0.1 * limit else "")
        return _slow_health(f"the OpenEnv server at {url} did not answer health within {limit:g} s{took}", settings)
    return None  # only slow to describe its action: the run's own check, with settings.openenv.timeout_s, decides


def _slow_health(what: str, settings: OpenEnvSettings) -> str:
    return f"{what}, so a run cannot use it: if it is up but slow to answer, {_raise_limit(settings)}; else {_START}"


def _resolve(url: str) -> None:
    """Resolve the URL's host as the request will (unless a proxy does that), in this (the probe's) thread, so
    that a resolver that does not answer is told apart from a server that does not. A failure is left to the
    request to report (in the words the run's own check uses)."""
    from urllib.request import getproxies

    from .client import is_loopback

    parts = urlsplit(url)
    if not parts.hostname:
        return
    if not is_loopback(url):  # httpx uses the environment's proxies for other hosts
        proxies = getproxies()
        if proxies.get(parts.scheme) or proxies.get("all"):
            return
    with contextlib.suppress(OSError, UnicodeError, ValueError):
        socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                           type=socket.SOCK_STREAM)


def _problem(url: str, settings: OpenEnvSettings, watch: _Watch) -> str | None:
    from .client import HTTPClient, NoAnswer, OpenEnvUnavailable
    from .environment import described_action

    _resolve(url)
    if not watch.enter("health"):  # the rest of the same budget
        return None
    client = HTTPClient(url, watch.limit)
    try:
        try:
            status, _ = client.request("GET", "/health", "health")
        except NoAnswer as exc:
            return _slow_health(str(exc), settings)
        except InfraError as exc:
            return f"{exc}, so a run cannot use it: {_START}"
        if status != 200:
            return (f"the server at {url} answered GET /health with HTTP {status}, not 200: it is not ready, or not "
                    f"an OpenEnv server; {_FAILED}")
        schema: dict[str, Any] | None = None
        if settings.action_schema is None:
            if not watch.enter("schema", new_budget=True):
                return None
            try:
                status, body = client.request("GET", "/schema", "schema")
            except NoAnswer:
                return None  # only slow: the run's own check, with settings.openenv.timeout_s, decides
            except InfraError:
                status, body = 0, None
            schema = body if status == 200 and isinstance(body, dict) else None
        try:
            described_action(url, settings, schema)
        except OpenEnvUnavailable as exc:
            return str(exc)
        return None
    finally:
        client.close()
