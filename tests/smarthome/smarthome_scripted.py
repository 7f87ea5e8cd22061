"""A scripted rollout engine for the smarthome tests (a helper, not a test): it answers each conversation
from a function of its last user message, so tests can play the ground truth or chosen mistakes."""

from __future__ import annotations

import json
from collections.abc import Callable

from seal_platform.types import Generation, Message, SamplingParams, Task


def gt_replies(tasks: list[Task]) -> dict[str, dict]:
    """User text -> the ground-truth call of that turn (the generator maps each text to one call)."""
    out: dict[str, dict] = {}
    for task in tasks:
        for turn in task.payload["turns"]:
            out[turn["user"]] = turn["calls"][0]
    return out


def call_text(call: dict) -> str:
    return f"<tool_call>{json.dumps(call)}</tool_call>"


class ScriptedEngine:
    name = "scripted"

    def __init__(self, reply: Callable[[str, list[Message]], str]):
        self.reply = reply
        self.batches: list[int] = []

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        self.batches.append(len(conversations))
        out = []
        for conv in conversations:
            user = next(m.content for m in reversed(conv) if m.role == "user")
            out.append(Generation(text=self.reply(user, conv), token_ids=[1, 2], logprobs=[-0.1, -0.2]))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content) for m in conversation) // 4

    def close(self) -> None:
        pass
