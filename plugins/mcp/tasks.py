"""The task file: JSON Lines, one task per line.

``{"id": "t1", "split": "train", "category": "lookup", "turns": [{"user": "...", "calls": [{"name": ...,
"arguments": {...}}], "check": [{"name": "get_item", "arguments": {...}}]}]}``

``calls`` is the turn's ground truth; ``check`` lists calls (read-only tools) run against the server after
the turn: the turn passes when their results on the agent's server equal their results on a reference server
that ran the ground truth. ``check_result: true``: each ground-truth call's result on the reference server is
among the results of the agent's calls of that tool (for read-only turns). ``answer_contains`` /
``answer_equals``: the agent's final message of the turn (without a call) contains / equals the text. A turn
with none of these passes when every ground-truth call was made with (at least) its arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from seal_platform.config import Section
from seal_platform.types import Task
from seal_platform_libs.toolenv.episodes import load_task_file


class CallSpec(Section):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class TurnSpec(Section):
    user: str = Field(min_length=1)
    calls: list[CallSpec] = Field(default_factory=list)
    check: list[CallSpec] = Field(default_factory=list)
    # The result of each ground-truth call (on the reference server) must be among the results of the agent's
    # successful calls of that tool: a read-only turn checked by what it returned, not by its argument text.
    check_result: bool = False
    # The agent's final message of the turn (the one without a call) contains each text / equals the text
    # (case and surrounding white space aside).
    answer_contains: list[str] = Field(default_factory=list)
    answer_equals: str | None = None

    def wants_answer(self) -> bool:
        return bool(self.answer_contains) or self.answer_equals is not None


class TaskSpec(Section):
    id: str = Field(min_length=1)
    split: str = "train"
    category: str = "default"
    context: str = ""
    turns: list[TurnSpec] = Field(min_length=1)


def load_tasks(path: str | Path) -> list[Task]:
    """Every task of the file; a bad line is reported with its number and nothing is half-loaded."""
    return load_task_file(path, TaskSpec, "settings.mcp.tasks",
                          lambda spec: {"turns": [t.model_dump() for t in spec.turns], "context": spec.context})
