"""What :func:`~.plugin.check_machine` can tell about a configured MCP server without starting or contacting it:
a stdio server's command is an executable this machine has (looked up as the SDK's ``stdio_client`` starts it:
on the PATH the server process gets, relative paths from its working directory) and its working directory
exists; a URL server's address parses and names a host (with a valid port, if it gives one)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

from .settings import MCPServerSettings


def server_problems(where: str, server: MCPServerSettings) -> list[str]:
    """Each problem with ``server`` (the recipe key ``where``) as one paragraph: what the recipe asks, what
    this machine has, what to do. Empty when nothing is wrong that can be seen without starting the server."""
    label = f"{where} ({server.name!r})"
    if server.url is not None:
        return _url_problems(label, server.url)
    problems = []
    cwd = Path(server.cwd).expanduser() if server.cwd else None
    if cwd is not None and not cwd.is_dir():
        problems.append(f"{label}: its cwd {server.cwd!r} is not a directory on this machine (relative paths are "
                        f"read from the current directory, {Path.cwd()}), so the server cannot start: give an "
                        "existing folder, or leave cwd out (the run's directory).")
    command = server.program()
    if command == sys.executable:  # `python`: the interpreter running seal-platform
        return problems
    if os.sep in command or (os.altsep and os.altsep in command):
        path = Path(command).expanduser()
        if not path.is_absolute():
            path = (cwd if cwd is not None and cwd.is_dir() else Path.cwd()) / path
        if not path.exists():
            problems.append(f"{label}: its command {command!r} does not exist on this machine (looked for "
                            f"{str(path)!r}), so the server cannot start: fix the path (relative paths are read from "
                            "the server's cwd, else the current directory).")
        elif path.is_dir() or not os.access(path, os.X_OK):
            problems.append(f"{label}: its command {command!r} is not an executable file ({str(path)!r} is "
                            f"{'a directory' if path.is_dir() else 'not executable'}), so the server cannot start: "
                            "name the program to run (or make the file executable: chmod +x).")
        return problems
    search = server.env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(command, path=search) is None:
        source = "the PATH the server's env sets" if "PATH" in server.env else "this machine's PATH"
        problems.append(f"{label}: its command {command!r} is not found on {source}, so the server cannot start: "
                        f"install it, or give its absolute path in command ('python' means this interpreter, "
                        f"{sys.executable}).")
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
