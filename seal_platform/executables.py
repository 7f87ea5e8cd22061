"""Whether a program that a plugin starts as a process (a stdio MCP server, a local environment server) can be
started on this machine, seen without starting it: for a plugin's ``check_machine``.

The program is looked up as :class:`subprocess.Popen` (and the MCP SDK's ``stdio_client``, which uses it) looks
it up on POSIX: a name without a path separator on the PATH the process gets (its own ``env``'s ``PATH`` when it
sets one, else ours), a path relative to the process's working directory (else the current directory)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path


def launch_spec(command: str, cwd: str | None = None) -> tuple[str, str | None]:
    """The program and working directory a plugin starts a process with, as :func:`command_problems` checks
    them: ``python`` is the interpreter running seal-platform, and a leading ``~`` in a command that is a path
    or in ``cwd`` is the user's home (a recipe's ``~/servers``; ``subprocess.Popen`` alone would look for a
    folder named ``~``)."""
    if command == "python":
        command = sys.executable
    elif command.startswith("~") and (os.sep in command or (os.altsep and os.altsep in command)):
        command = os.path.expanduser(command)
    return command, (os.path.expanduser(cwd) if cwd else cwd)


def command_problems(label: str, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                     what: str = "the server") -> list[str]:
    """Each problem with starting ``command`` (the recipe's key ``label``; ``python`` means the interpreter
    running seal-platform) in ``cwd`` with the extra environment variables ``env``, as one paragraph: what the
    recipe asks, what this machine has, what to do. ``what`` names the process in them (``the server``).
    Empty when nothing is wrong that can be seen without starting it."""
    env = env or {}
    problems = []
    asked = cwd
    command, cwd = launch_spec(command, cwd)
    folder = Path(cwd) if cwd else None
    if folder is not None and not folder.is_dir():
        problems.append(f"{label}: its cwd {asked!r} is not a directory on this machine (relative paths are read from "
                        f"the current directory, {Path.cwd()}), so {what} cannot start: give an existing folder, or "
                        "leave cwd out (the run's directory).")
    if command == sys.executable:
        return problems
    if os.sep in command or (os.altsep and os.altsep in command):
        path = Path(command)
        if not path.is_absolute():
            path = (folder if folder is not None and folder.is_dir() else Path.cwd()) / path
        if not path.exists():
            problems.append(f"{label}: its command {command!r} does not exist on this machine (looked for "
                            f"{str(path)!r}), so {what} cannot start: fix the path (relative paths are read from "
                            f"{what}'s cwd, else the current directory).")
        elif path.is_dir() or not os.access(path, os.X_OK):
            problems.append(f"{label}: its command {command!r} is not an executable file ({str(path)!r} is "
                            f"{'a directory' if path.is_dir() else 'not executable'}), so {what} cannot start: "
                            "name the program to run (or make the file executable: chmod +x).")
        return problems
    search = env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(command, path=search) is None:
        source = f"the PATH {what}'s env sets" if "PATH" in env else "this machine's PATH"
        problems.append(f"{label}: its command {command!r} is not found on {source}, so {what} cannot start: "
                        f"install it, or give its absolute path in command ('python' means this interpreter, "
                        f"{sys.executable}).")
    return problems
