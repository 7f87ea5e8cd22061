"""``kv-oracle``: a scripted rollout engine that solves kvstore tasks with probability ``skill`` per call
and otherwise writes a malformed call, so the loop (diagnosis, interface evolution) can be tried without a
model. A real run uses a model engine (``rollout.engine: hf`` or ``vllm``)."""

from __future__ import annotations

import hashlib
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
        return [
            {"name": "put", "arguments": {"key": q[1], "value": q[0]}},
            {"name": "delete", "arguments": {"key": q[2]}},
        ]
    if question.startswith("What is stored"):
        return [{"name": "get", "arguments": {"key": q[0]}}]
    return [{"name": "list_keys", "arguments": {}}]


class OracleEngine:
    """Each reply's draw depends on the engine's seed, the request's sampling seed and the conversation only
    (not on the order in which parallel episodes ask), so a run is reproducible with any number of workers.
    It never learns: a pass rate that moves between evaluations moved with the interface's text."""

    name = "kv-oracle"

    def __init__(self, skill: float = 0.8, seed: int = 0):
        self.skill = skill
        self.seed = seed

    def _draw(self, conversation: list[Message], sampling: SamplingParams | None) -> float:
        text = json.dumps([self.seed, sampling.seed if sampling else None,
                           [(m.role, m.content) for m in conversation]])
        return random.Random(hashlib.sha256(text.encode("utf-8", "replace")).digest()).random()

    def _reply(self, conversation: list[Message], sampling: SamplingParams | None = None) -> str:
        last_user = max(i for i, m in enumerate(conversation) if m.role == "user")
        after = conversation[last_user + 1:]
        done = sum(1 for m in after if m.role == "tool" and not m.content.startswith("Error"))
        calls = plan(conversation[last_user].content)
        if done >= len(calls):
            results = [m.content for m in after if m.role == "tool"]
            return f"Done. {results[-1] if results else ''}".strip()
        if self._draw(conversation, sampling) > self.skill:
            return "<tool_call>{name: put</tool_call>"
        return f"<tool_call>{json.dumps(calls[done])}</tool_call>"

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conversation in conversations:
            text = self._reply(conversation, sampling)
            out.append(Generation(text=text, token_ids=[1] * len(text.split()), logprobs=[-0.1] * len(text.split())))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content.split()) for m in conversation)

    def close(self) -> None:
        pass
