"""The task file: JSON Lines, one task per line.

``{"id": "t1", "split": "train", "category": "lookup", "turns": [{"user": "...", "calls": [{"name": ...,
"arguments": {...}}], "check": [{"name": "get_item", "arguments": {...}}]}]}``

``calls`` is the turn's ground truth; ``check`` lists calls (read-only tools) run against the server after
the turn: the turn passes when their results on the agent's server equal their results on a reference server
that ran the ground truth. A turn without ``check`` passes when every ground-truth call was made with the
same arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from seal_platform.toolenv.episodes import load_task_file
from seal_platform.types import Task


class CallSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class TurnSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1)
    calls: list[CallSpec] = Field(default_factory=list)
    check: list[CallSpec] = Field(default_factory=list)


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    split: str = "train"
    category: str = "default"
    turns: list[TurnSpec] = Field(min_length=1)


def load_tasks(path: str | Path) -> list[Task]:
    """Every task of the file; a bad line is reported with its number and nothing is half-loaded."""
    return load_task_file(path, TaskSpec, "settings.mcp.tasks",
                          lambda spec: {"turns": [t.model_dump() for t in spec.turns]})
