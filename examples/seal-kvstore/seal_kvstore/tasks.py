"""Tasks and the tools: a key-value store the agent edits and reads over several user turns."""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from seal_platform.types import Task

CATEGORIES = ("store", "update", "cleanup")
WORDS = ("blue", "green", "tea", "paris", "seven", "lamp", "river", "oak")
KEYS = ("color", "drink", "city", "number", "item", "place", "tree")


class Call(BaseModel):
    """One tool call, parsed from model text or written in a task's ground truth."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, str] = Field(default_factory=dict)


class KVStore:
    """The backend: a dict behind four tools. Every episode gets its own (nothing leaks between them)."""

    TOOLS = {
        "put": "put(key, value): store value under key (overwrites)",
        "get": "get(key): the value stored under key",
        "delete": "delete(key): remove key",
        "list_keys": "list_keys(): every key, sorted",
    }

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def execute(self, call: Call) -> str:
        """Run one call; a bad call returns an error string (the agent sees it), never raises."""
        args = call.arguments
        if call.name == "put" and set(args) == {"key", "value"}:
            self.data[args["key"]] = args["value"]
            return "ok"
        if call.name in ("get", "delete") and set(args) == {"key"}:
            if args["key"] not in self.data:
                return f"Error: no key {args['key']!r}"
            return self.data[args["key"]] if call.name == "get" else (self.data.pop(args["key"]) and "ok")
        if call.name == "list_keys" and not args:
            return ", ".join(sorted(self.data)) or "(empty)"
        return f"Error: bad arguments for {call.name}: {sorted(args)}"


def make_tasks(split: str, n: int, seed: int) -> list[Task]:
    """``n`` tasks of ``split``, the categories in turn; each user turn comes with its ground-truth calls."""
    rng = random.Random(f"{seed}:{split}")
    tasks = []
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        k1, k2 = rng.sample(KEYS, 2)
        v1, v2 = rng.sample(WORDS, 2)
        turns: list[tuple[str, list[Call]]] = [
            (f"Store {v1!r} under the key {k1!r}.", [Call(name="put", arguments={"key": k1, "value": v1})]),
        ]
        if category == "update":
            turns.append((f"Change {k1!r} to {v2!r}.", [Call(name="put", arguments={"key": k1, "value": v2})]))
        if category == "cleanup":
            turns.append(
                (
                    f"Also store {v2!r} under {k2!r}, then remove {k1!r}.",
                    [Call(name="put", arguments={"key": k2, "value": v2}), Call(name="delete", arguments={"key": k1})],
                )
            )
            turns.append(("Which keys are stored now?", [Call(name="list_keys")]))
        else:
            turns.append((f"What is stored under {k1!r}?", [Call(name="get", arguments={"key": k1})]))
        payload: dict[str, Any] = {
            "questions": [q for q, _ in turns],
            "ground_truth": [[c.model_dump() for c in calls] for _, calls in turns],
        }
        tasks.append(Task(id=f"kv-{split}-{i}", category=category, split=split, payload=payload))
    return tasks


def ground_truth(task: Task) -> list[list[Call]]:
    return [[Call.model_validate(c) for c in turn] for turn in task.payload["ground_truth"]]
