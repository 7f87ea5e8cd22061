"""``kv-oracle``: a scripted rollout engine that solves kvstore tasks with probability ``skill`` per call
and otherwise writes a malformed call, so the loop (diagnosis, interface evolution) can be tried without a
model. A real run uses a model engine (``rollout.engine: hf`` or ``vllm``)."""

from __future__ import annotations

import json
import random
import re

from seal_platform.types import Generation, Message, SamplingParams

_QUOTED = re.compile(r"'([^']*)'")


def plan(question: str) -> list[dict]:
    """The calls a question asks for, read from its wording."""
    q = _QUOTED.findall(question)
    if question.startswith("Store"):
        return [{"name": "put", "arguments": {"key": q[1], "value": q[0]}}]
    if question.startswith("Change"):
        return [{"name": "put", "arguments": {"key": q[0], "value": q[1]}}]
    if question.startswith("Also store"):
        return [{"name": "put", "arguments": {"key": q[1], "value": q[0]}}, {"name": "delete", "arguments": {"key": q[2]}}]
    if question.startswith("What is stored"):
        return [{"name": "get", "arguments": {"key": q[0]}}]
    return [{"name": "list_keys", "arguments": {}}]


class OracleEngine:
    name = "kv-oracle"

    def __init__(self, skill: float = 0.8, seed: int = 0):
        self.skill = skill
        self.rng = random.Random(seed)

    def _reply(self, conversation: list[Message]) -> str:
        last_user = max(i for i, m in enumerate(conversation) if m.role == "user")
        after = conversation[last_user + 1:]
        done = sum(1 for m in after if m.role == "tool" and not m.content.startswith("Error"))
        calls = plan(conversation[last_user].content)
        if done >= len(calls):
            results = [m.content for m in after if m.role == "tool"]
            return f"Done. {results[-1] if results else ''}".strip()
        if self.rng.random() > self.skill:
            return "<tool_call>{name: put</tool_call>"
        return f"<tool_call>{json.dumps(calls[done])}</tool_call>"

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conversation in conversations:
            text = self._reply(conversation)
            out.append(Generation(text=text, token_ids=[1] * len(text.split()), logprobs=[-0.1] * len(text.split())))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content.split()) for m in conversation)

    def close(self) -> None:
        pass
