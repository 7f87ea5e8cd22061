"""The openenv environment object: the server (a running one, or a local one started from the recipe), the
action doc the agent reads (from the server's action schema), and the tasks (reset arguments)."""

from __future__ import annotations

import atexit
import time
import weakref
from pathlib import Path
from typing import Any

from pydantic import Field

from seal_platform.config import Section
from seal_platform.infra import InfraError
from seal_platform.types import Interface, SamplingParams, Task, Trajectory
from seal_platform_libs.toolenv.episodes import load_task_file

from .client import ErrorAnswer, HTTPSession, LocalServer, OpenEnvUnavailable, SessionRefused, WSSession, probe
from .settings import OpenEnvSettings

EVAL_SEED_BASE = 100_000


class TaskSpec(Section):
    id: str = Field(min_length=1)
    split: str = "train"
    category: str = "default"
    reset: dict[str, Any] = Field(default_factory=dict)


def load_tasks(path: str | Path) -> list[Task]:
    """Every task of a JSON Lines file; a bad line is reported with its number and nothing is half-loaded."""
    return load_task_file(path, TaskSpec, "settings.openenv.tasks", lambda spec: {"reset": spec.reset})


def seed_tasks(n_train: int, n_eval: int) -> list[Task]:
    """Without a task file: reset seeds 0..n_train-1 (train) and 100000.. (eval)."""
    train = [Task(id=f"seed-{i}", category="default", split="train", payload={"reset": {"seed": i}})
             for i in range(n_train)]
    held = [Task(id=f"seed-{EVAL_SEED_BASE + i}", category="default", split="eval",
                 payload={"reset": {"seed": EVAL_SEED_BASE + i}}) for i in range(n_eval)]
    return train + held


def _inline_refs(node: Any, defs: dict[str, Any], kept: set[str], path: tuple[str, ...] = (), depth: int = 0) -> Any:
    """Local ``$ref``s (``#/$defs/...``, pydantic's enums and nested models) replaced by what they name. A
    recursive ref (a model inside itself), and what lies deeper than 8 levels, stay as they are; ``kept`` then
    says so (the schema must keep its definitions for them)."""
    if depth > 8:
        kept.add("...")
        return node
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            name = ref.rsplit("/", 1)[-1]
            if name in path:
                kept.add(name)
            elif isinstance(defs.get(name), dict):
                merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
                return _inline_refs(merged, defs, kept, (*path, name), depth + 1)
        return {k: _inline_refs(v, defs, kept, path, depth + 1) for k, v in node.items()
                if k not in ("$defs", "definitions")}
    if isinstance(node, list):
        return [_inline_refs(v, defs, kept, path, depth + 1) for v in node]
    return node


def action_doc(schema: dict[str, Any], name: str, description: str) -> dict[str, Any]:
    """The tool doc of the action: the schema without openenv-core's ``metadata`` field, refs inlined (the
    definitions stay when a ref does). Raises ValueError when the schema is not an object schema."""
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if not isinstance(schema.get(key) or {}, dict):
            raise ValueError(f"its {key} is not an object")
        defs.update(schema.get(key) or {})
    kept: set[str] = set()
    clean = _inline_refs(schema, defs, kept)
    props, required = clean.get("properties") or {}, clean.get("required") or []
    if not isinstance(props, dict):
        raise ValueError("its properties are not an object")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError("its required is not a list of names")
    clean = {**clean, "type": "object", "properties": {k: v for k, v in props.items() if k != "metadata"},
             "required": [r for r in required if r != "metadata"]}
    if kept:
        clean.update({key: schema[key] for key in ("definitions", "$defs") if key in schema})
    clean.pop("title", None)
    return {"name": name, "description": description or str(schema.get("description") or "").strip()
            or "Act in the environment.", "input_schema": clean}


def described_action(url: str, settings: OpenEnvSettings, schema: dict[str, Any] | None) -> dict[str, Any]:
    """The action doc, from ``settings.action_schema`` or else the server's ``schema`` (its ``GET /schema``;
    None: it gave nothing usable). Raises :class:`OpenEnvUnavailable` with a paragraph when the action is not
    described, or described by something other than a JSON object schema."""
    action_schema = settings.action_schema or (schema or {}).get("action")
    if not isinstance(action_schema, dict):
        raise OpenEnvUnavailable(
            f"The OpenEnv server at {url} does not describe its action (GET /schema gave "
            f"{'nothing usable' if schema is None else 'no action schema'}): set settings.openenv.action_schema "
            "to the action's JSON schema. See docs/openenv.md.")
    try:
        return action_doc(action_schema, settings.action_name, settings.action_description)
    except ValueError as exc:
        where = "settings.openenv.action_schema" if settings.action_schema else f"GET {url}/schema"
        raise OpenEnvUnavailable(
            f"The action schema from {where} is malformed ({exc}): an OpenEnv action is described by a "
            "JSON object schema. See docs/openenv.md.") from None


class OpenEnvEnvironment:
    """Tasks (reset arguments), the action doc and the sessions; revision 0 is the pristine interface."""

    name = "openenv"

    def __init__(self, settings: OpenEnvSettings):
        self.settings = settings
        if settings.tasks:
            self._tasks = load_tasks(settings.tasks)
        else:
            self._tasks = seed_tasks(settings.n_train or 64, settings.n_eval or 16)
        self.categories = tuple(dict.fromkeys(t.category for t in self._tasks))
        self._server: LocalServer | None = None
        if settings.server is not None:
            self._server = LocalServer(settings.server)
            self.url = self._server.start()
            self._finalizer = weakref.finalize(self, self._server.stop)
            atexit.register(self._finalizer)
        else:
            self.url = settings.url.rstrip("/")
        try:
            schema = probe(self.url, settings.timeout_s)
            doc = described_action(self.url, settings, schema)
        except BaseException:
            self.close()
            raise
        self.schema = schema or {}
        self.doc = doc
        try:
            self.session_limit = self._session_limit()
        except BaseException:
            self.close()
            raise

    def tasks(self, split: str) -> list[Task]:
        tasks = [t for t in self._tasks if t.split == split]
        if not tasks:
            splits = sorted({t.split for t in self._tasks})
            raise ValueError(f"the openenv tasks have no {split!r} tasks (they have: {splits})")
        limit = self.settings.n_train if split == "train" else self.settings.n_eval
        return tasks[:limit] if limit else tasks

    def pristine_interface(self) -> Interface:
        return Interface(revision=0)

    def play(self, engine: Any, episodes: list[tuple[Task, str, int]], interface: Interface,
             sampling: SamplingParams) -> list[Trajectory]:
        """Play ``(task, group, sample)`` episodes in lock step and verify them (:mod:`.episode`)."""
        from .episode import run_episodes

        return run_episodes(self, engine, episodes, interface, sampling)

    def docs(self) -> list[dict[str, Any]]:
        return [self.doc]

    def _session_limit(self) -> int:
        """How many sessions the server serves at once (ws), up to the ``max_parallel_episodes`` wanted: the
        recipe's ``max_sessions``, or else found out by holding that many sessions open at once and reading the
        limit from a refusal (openenv-core answers one past its limit with ``CAPACITY_REACHED`` and its
        ``max_sessions``). A server that refuses every session, or cannot open one, is an
        :class:`OpenEnvUnavailable` before any episode."""
        s = self.settings
        want = s.max_parallel_episodes if s.transport == "ws" else 1
        if s.transport != "ws" or s.max_sessions is not None:
            return min(want, s.max_sessions or want)
        sessions: list[WSSession] = []
        refused: SessionRefused | None = None
        try:
            for _ in range(want):
                try:
                    session = WSSession(self.url, s.timeout_s)
                    sessions.append(session)
                    session.state()  # the first answer: a refusal comes at once, instead of it
                except SessionRefused as exc:
                    sessions.pop().close()
                    refused = exc
                    break
                except ErrorAnswer:  # a session with no state before its reset: open all the same
                    continue
                except InfraError as exc:
                    raise OpenEnvUnavailable(f"The OpenEnv server at {self.url} could not open a session before the "
                                             f"run: {exc}. See docs/openenv.md.") from None
        finally:
            for session in sessions:
                session.close()
        if refused is None:
            return want
        if not sessions:
            raise OpenEnvUnavailable(
                f"The OpenEnv server at {self.url} refuses every session ({refused}): nothing can run. It serves "
                "sessions up to its max_concurrent_envs; stop what holds them, or start the server with a larger "
                "limit. See docs/openenv.md.")
        return min(len(sessions), refused.max_sessions or len(sessions))

    def parallel_episodes(self) -> int:
        """Sessions at once: never more than the server serves (:meth:`_session_limit`); a server's one
        environment (http) serves one episode at a time."""
        return self.session_limit

    def open_session(self) -> WSSession | HTTPSession:
        """A fresh session (raises InfraError naming the URL when it cannot be opened)."""
        if self.settings.transport == "ws":
            return WSSession(self.url, self.settings.timeout_s)
        return HTTPSession(self.url, self.settings.timeout_s)

    def reset_session(self, arguments: dict[str, Any]) -> tuple[WSSession | HTTPSession, Any]:
        """A fresh session and its reset's result. A session refused for capacity is asked for again until
        ``timeout_s`` has passed: the server may not yet have let go of the sessions of episodes that just
        ended (this plugin never holds more than the server's limit)."""
        deadline = time.monotonic() + self.settings.timeout_s
        while True:
            session = self.open_session()
            try:
                return session, session.reset(arguments)
            except SessionRefused:
                session.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            except BaseException:
                session.close()
                raise

    def close(self) -> None:
        """Stop the local server, if the plugin started one."""
        if self._server is not None:
            self._server.stop()
