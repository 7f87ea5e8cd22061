"""Scripted rollout engines for the bfcl episode tests (helpers, not tests).

``GroundTruthEngine`` plays a task's ground truth through the full episode protocol: per user turn, one
assistant message with the turn's ground-truth calls in the environment's tool-call format, then (after the
observations) a plain-text reply that ends the turn. Conversations do not name their task and some tasks
share their whole prompt, so the task being played is set per episode thread with :func:`playing` (see
:func:`task_mapper`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from seal_platform.types import Generation, Message, SamplingParams, Task
from seal_platform_libs.toolenv.calls import parse_call
from seal_platform_libs.toolenv.formats import ParsedCall, ToolCallFormat

_local = threading.local()


def current_task() -> Task:
    return _local.task


def task_of(item: Any) -> Task:
    return item[0] if isinstance(item, tuple) else item


def task_mapper(workers: int = 4) -> Callable[[Callable[[Any], Any], Iterable[Any]], list[Any]]:
    """An ``executor.map`` replacement that tells the scripted engine which task each episode plays."""
    pool = ThreadPoolExecutor(max_workers=workers)

    def mapper(fn: Callable[[Any], Any], items: Iterable[Any], on_infra_failure: Any = None) -> list[Any]:
        def run(item: Any) -> Any:
            _local.task = task_of(item)
            return fn(item)

        return list(pool.map(run, list(items)))

    return mapper


def _chars(conversation: list[Message]) -> int:
    return sum(len(m.content) + 8 for m in conversation)


class _Base:
    name = "scripted"

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[SamplingParams] = []
        self._lock = threading.Lock()

    def count_tokens(self, conversation: list[Message]) -> int:
        # Roughly what a BPE tokenizer gives for English and JSON.
        return _chars(conversation) // 4

    def close(self) -> None:
        pass

    def _gen(self, text: str, conversation: list[Message]) -> Generation:
        with self._lock:
            self.calls += 1
        ids = [ord(c) % 1000 for c in text] or [0]
        return Generation(
            text=text, token_ids=ids, logprobs=[-0.5] * len(ids), prompt_tokens=self.count_tokens(conversation)
        )

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        with self._lock:
            self.seen.append(sampling)
        return [self._gen(self.reply(c), c) for c in conversations]

    def reply(self, conversation: list[Message]) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


def gt_calls(task: Task, turn: int, docs_by_name: dict[str, dict] | None = None) -> list[ParsedCall]:
    """The ground-truth calls of ``turn`` as keyword calls (positional arguments named by the docs' order)."""
    from seal_platform_plugins.bfcl import data

    if docs_by_name is None:
        docs = data.tool_docs(task) + [d for ds in data.held_out_docs(task).values() for d in ds]
        docs_by_name = {d["name"]: d for d in docs}
    out = []
    for text in task.payload["ground_truth"][turn]:
        call = parse_call(text)
        assert call.ok, (task.id, text, call.error)
        kwargs = dict(call.kwargs)
        params = list(docs_by_name[call.name]["parameters"]["properties"])
        for name, value in zip(params, call.args):
            kwargs[name] = value
        out.append(ParsedCall(call.name, kwargs))
    return out


def turn_index(conversation: list[Message]) -> int:
    """The user turn the conversation is in: user turns start after the system message and after every
    plain-text assistant reply."""
    turn = -1
    previous = None
    for message in conversation:
        if message.role == "user" and previous != "user":
            turn += 1
        previous = message.role
    return turn


class GroundTruthEngine(_Base):
    """Replays the ground truth of the task set with :func:`task_mapper` / ``_local.task``."""

    def __init__(self, fmt: ToolCallFormat, final_text: str = "Done."):
        super().__init__()
        self.fmt = fmt
        self.final_text = final_text

    def reply(self, conversation: list[Message]) -> str:
        task = current_task()
        turn = turn_index(conversation)
        if conversation[-1].role == "tool":
            return self.final_text
        calls = gt_calls(task, turn)
        return self.fmt.render_calls(calls) if calls else self.final_text


class SilentEngine(_Base):
    """Never calls a tool."""

    def reply(self, conversation: list[Message]) -> str:
        return "I am sorry, I cannot help with that."


class ListEngine(_Base):
    """Replies from a fixed list, in order (for hand-built episodes); repeats the last one when exhausted."""

    def __init__(self, replies: list[str]):
        super().__init__()
        self.replies = list(replies)
        self.prompts: list[list[Message]] = []

    def reply(self, conversation: list[Message]) -> str:
        self.prompts.append(list(conversation))
        index = min(len(self.prompts) - 1, len(self.replies) - 1)
        return self.replies[index]
