"""What :func:`~.plugin.check_machine` can tell about the running OpenEnv server a recipe names
(``settings.openenv.url``) in a few seconds: that something answers there, and that it speaks the OpenEnv
protocol as far as the run's start needs it (``GET /health`` answers 200 with JSON; the action is described by
a JSON object schema: ``settings.openenv.action_schema``, else ``GET /schema``'s ``action``). These are the
checks the environment makes when the run builds it, made here before the run's row is written or a model is
loaded. A local server (``settings.openenv.server``) is started by the run itself and not probed here."""

from __future__ import annotations

from typing import Any

from seal_platform.infra import InfraError

from .settings import OpenEnvSettings

#: The longest wait for each of the probe's two requests (less when ``settings.openenv.timeout_s`` is less).
PROBE_TIMEOUT_S = 2.0


def url_problems(settings: OpenEnvSettings) -> list[str]:
    """Each problem with the server at ``settings.url`` as one paragraph (what was asked, what answered, what to
    do); empty when it looks usable, when the recipe starts a local server instead, or when the server was
    only slow to describe its action (the run's own check, with ``timeout_s``, decides then). Never raises."""
    if not settings.url or settings.server is not None:
        return []
    url = settings.url.rstrip("/")
    try:
        problem = _problem(url, settings, min(settings.timeout_s, PROBE_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - a machine check reports, it never raises
        problem = (f"probing the OpenEnv server at {url} failed ({type(exc).__name__}: {exc}); check the URL and "
                   "the server; see docs/openenv.md.")
    return [] if problem is None else [f"settings.openenv.url: {problem}"]


def _problem(url: str, settings: OpenEnvSettings, timeout: float) -> str | None:
    from .client import HTTPClient, NoAnswer, OpenEnvUnavailable
    from .environment import described_action

    client = HTTPClient(url, timeout)
    try:
        try:
            status, _ = client.request("GET", "/health", "health")
        except InfraError as exc:
            return (f"{exc}, so a run cannot use it: start the server (or let the plugin start a local one: "
                    "settings.openenv.server), or fix the URL (an OpenEnv server answers GET /health); see "
                    "docs/openenv.md.")
        if status != 200:
            return (f"the server at {url} answered GET /health with HTTP {status}, not 200: it is not ready, or not "
                    "an OpenEnv server; check the URL and the server; see docs/openenv.md.")
        schema: dict[str, Any] | None = None
        if settings.action_schema is None:
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
