"""The mcp environment object: the task file, the servers' tool docs, and the reference check results."""

from __future__ import annotations

import threading
from typing import Any

from seal_platform.errors import SealError
from seal_platform.infra import InfraError
from seal_platform.types import Interface, SamplingParams, Task, Trajectory

from .client import MCPConnection
from .settings import MCPSettings
from .tasks import load_tasks


class MCPUnavailable(SealError):
    """A server's tools cannot be listed (it does not start, cannot be reached, or breaks): the run cannot go on."""


class MCPEnvironment:
    """Tasks from the task file; tools listed from the servers (once); revision 0 is the pristine interface."""

    name = "mcp"

    def __init__(self, settings: MCPSettings):
        self.settings = settings
        self._tasks = load_tasks(settings.tasks)
        self.categories = tuple(dict.fromkeys(t.category for t in self._tasks))
        self._docs: list[dict[str, Any]] | None = None
        self._owner: dict[str, tuple[int, str]] = {}  # shown tool name -> (server index, server's tool name)
        self._reference: dict[str, list[dict[str, list[str]]]] = {}
        self._lock = threading.Lock()

    def tasks(self, split: str) -> list[Task]:
        tasks = [t for t in self._tasks if t.split == split]
        if not tasks:
            splits = sorted({t.split for t in self._tasks})
            raise ValueError(f"the mcp task file {self.settings.tasks!r} has no {split!r} tasks (it has: {splits})")
        limit = self.settings.n_train if split == "train" else self.settings.n_eval
        return tasks[:limit] if limit else tasks

    def pristine_interface(self) -> Interface:
        return Interface(revision=0)

    def play(self, engine: Any, episodes: list[tuple[Task, str, int]], interface: Interface,
             sampling: SamplingParams) -> list[Trajectory]:
        """Play ``(task, group, sample)`` episodes in lock step and verify them (:mod:`.episode`)."""
        from .episode import run_episodes

        return run_episodes(self, engine, episodes, interface, sampling)

    # --- tools ------------------------------------------------------------------------------------------------

    def docs(self) -> list[dict[str, Any]]:
        """The tools the agent is shown (listed once from every server; names checked for collisions)."""
        with self._lock:
            if self._docs is None:
                docs, owner = [], {}
                for index, server in enumerate(self.settings.servers):
                    try:
                        with MCPConnection(server) as conn:
                            listed = conn.list_tools()
                    except InfraError as exc:
                        where = f"{server.name!r}" + (f" at {server.url}" if server.url else "")
                        raise MCPUnavailable(f"The tools of MCP server {where} could not be listed ({exc}), so the "
                                             "run cannot start. "
                                             "Check the server in settings.mcp.servers (its command, or that its url "
                                             "is up); see docs/mcp.md.") from None
                    for tool in listed:
                        shown = server.tool_prefix + tool["name"]
                        if shown in owner:
                            raise ValueError(f"two MCP servers offer a tool named {shown!r}: set tool_prefix on one "
                                             "of them in settings.mcp.servers")
                        owner[shown] = (index, tool["name"])
                        if tool["name"] not in self.settings.hidden_tools:
                            docs.append({**tool, "name": shown})
                self._docs, self._owner = docs, owner
            return self._docs

    def tool_problems(self) -> list[str]:
        """Every tool the recipe and the task file name that the servers do not offer (listing them, once):
        the tasks' ground-truth and check calls and the worked examples (by the names the agent is shown),
        ``hidden_tools``, ``reset_tool`` and each server's set-up and tear-down calls (by the server's own names).
        Each problem is one line naming where; empty when all exist."""
        self.docs()
        shown = set(self._owner)
        own = {index: {tool for i, tool in self._owner.values() if i == index}
               for index in range(len(self.settings.servers))}
        everyone = set().union(*own.values()) if own else set()
        problems: list[str] = []

        def need(name: str, known: set[str], where: str) -> None:
            if name not in known:
                problems.append(f"{where} names tool {name!r}, which the servers do not offer "
                                f"(they offer: {', '.join(sorted(known)) or 'none'})")

        missing: dict[str, list[str]] = {}  # a tool the task file names and no server offers -> where
        for task in self._tasks:
            for t, turn in enumerate(task.payload["turns"]):
                for kind in ("calls", "check"):
                    for call in turn[kind]:
                        if call["name"] not in shown:
                            missing.setdefault(call["name"], []).append(f"task {task.id!r}, turn {t}, {kind}")
        for name, places in missing.items():
            problems.append(f"the task file {self.settings.tasks} names tool {name!r} {len(places)} time(s) (first: "
                            f"{places[0]}), which the servers do not offer (they offer: "
                            f"{', '.join(sorted(shown)) or 'none'})")
        for i, example in enumerate(self.settings.worked_examples):
            call = example.get("call") if isinstance(example, dict) else None
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                need(call["name"], shown, f"settings.mcp.worked_examples[{i}]")
        for name in self.settings.hidden_tools:
            need(name, everyone, "settings.mcp.hidden_tools")
        for index, server in enumerate(self.settings.servers):
            where = f"settings.mcp.servers[{index}] ({server.name!r})"
            if self.settings.isolation == "reset" and self.settings.reset_tool:
                need(self.settings.reset_tool, own[index], f"settings.mcp.reset_tool, on {where},")
            for kind in ("setup", "teardown"):
                for call in getattr(server, kind):
                    need(call.name, own[index], f"{where}.{kind}")
        return problems

    def route(self, shown: str) -> tuple[int, str] | None:
        self.docs()
        doc_names = {d["name"] for d in self._docs or []}
        return self._owner.get(shown) if shown in doc_names else None

    # --- the reference server: results of each turn's checks after the ground truth ---------------------------

    def reference(self, task: Task) -> list[dict[str, list[str]]]:
        """Per turn, on a fresh server that ran the ground truth: the results of the ground-truth calls
        (``results``) and of the turn's check calls after them (``checks``); cached per task (servers are
        assumed deterministic from their starting state)."""
        with self._lock:
            if task.id in self._reference:
                return self._reference[task.id]
        from .episode import close_servers, open_servers, run_checks, server_call

        conns = open_servers(self)
        try:
            out = []
            for turn in task.payload["turns"]:
                results = []
                for call in turn["calls"]:
                    result = server_call(self, conns, call["name"], call["arguments"])
                    if result.is_error:
                        raise ValueError(f"task {task.id}: the ground-truth call {call['name']} failed on the "
                                         f"reference server: {result.text[:200]}")
                    results.append(result.text)
                out.append({"results": results, "checks": run_checks(self, conns, turn)})
        finally:
            close_servers(conns)
        with self._lock:
            self._reference[task.id] = out
        return out
