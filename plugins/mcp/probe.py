"""What :func:`~.plugin.check_machine` can tell about a configured MCP server without starting or contacting it:
a stdio server's command is an executable this machine has (looked up as the SDK's ``stdio_client`` starts it:
on the PATH the server process gets, relative paths from its working directory) and its working directory
exists; a URL server's address parses and names a host (with a valid port, if it gives one)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from seal_platform.executables import command_problems

from .settings import EPISODE_DIR, MCPServerSettings, MCPSettings


def server_problems(where: str, server: MCPServerSettings) -> list[str]:
    """Each problem with ``server`` (the recipe key ``where``) as one paragraph: what the recipe asks, what
    this machine has, what to do. Empty when nothing is wrong that can be seen without starting the server."""
    label = f"{where} ({server.name!r})"
    if server.url is not None:
        return _url_problems(label, server.url)
    problems = [f"{label}: its seed file {seed!r} is not here (relative paths are read from the current directory)."
                for seed in server.seed_files if not Path(seed).expanduser().exists()]
    if EPISODE_DIR in (server.cwd or "") or EPISODE_DIR in str(server.command):
        return problems  # the episode's folder is made at each start: nothing to look at before
    return problems + command_problems(label, str(server.command), cwd=server.cwd, env=server.env)


def tool_problems(settings: MCPSettings) -> list[str]:
    """Start each server once and list its tools (a server that does not start or answer is one problem), then
    every tool the recipe and the task file name must be among them (:meth:`MCPEnvironment.tool_problems`).
    A task file that does not load is one problem."""
    from .environment import MCPEnvironment, MCPUnavailable

    try:
        environment = MCPEnvironment(settings)
        problems = environment.tool_problems()
    except MCPUnavailable as exc:
        return [str(exc)]
    except (OSError, ValueError) as exc:
        return [str(exc)]
    if len(problems) > 8:
        problems = [*problems[:8], f"and {len(problems) - 8} more tool name problem(s)"]
    return problems


def _url_problems(label: str, url: str) -> list[str]:
    fix = "give the server's MCP endpoint as http(s)://host[:port]/path"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return [f"{label}: its url {url!r} contains whitespace or control characters: {fix}."]
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        return [f"{label}: its url {url!r} does not parse ({exc}): {fix}."]
    if not parts.hostname:
        return [f"{label}: its url {url!r} names no host: {fix}."]
    if port == 0:
        return [f"{label}: its url {url!r} gives port 0: {fix}."]
    return []
