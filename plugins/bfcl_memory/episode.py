"""Memory episodes: the prerequisite conversations that fill the memory, then the question.

Every conversation starts with BFCL's memory system prompt (the scenario's agent setting and the memory
content at that moment, from ``bfcl_eval.constants.default_prompts``) followed by the tool block of the
recipe's tool-call format. In each user turn the agent may call memory tools (up to ``max_steps`` model
generations per turn, as official BFCL counts); a message without a tool call ends the turn. A malformed
message is answered with an error observation and the turn goes on. The question's score is BFCL's agentic
check on the agent's last message that is not a tool call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seal_platform.engine import RolloutEngine
from seal_platform.types import Message, SamplingParams, Task, ToolCall, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.formats import ToolCallFormat

from .backend import MemoryBackend
from .checker import answer_found
from .data import tool_docs


@dataclass
class EpisodeLimits:
    max_steps: int = 20  # model generations per user turn
    max_new_tokens: int = 512


def system_prompt(backend: MemoryBackend, scenario: str, fmt: ToolCallFormat, compact: bool) -> str:
    from bfcl_eval.constants.default_prompts import (
        MEMORY_AGENT_SETTINGS,
        MEMORY_BACKEND_INSTRUCTION_CORE_ARCHIVAL,
        MEMORY_BACKEND_INSTRUCTION_UNIFIED,
    )

    template = (
        MEMORY_BACKEND_INSTRUCTION_UNIFIED if backend.backend == "rec_sum" else MEMORY_BACKEND_INSTRUCTION_CORE_ARCHIVAL
    )
    memory = template.format(scenario_setting=MEMORY_AGENT_SETTINGS[scenario], memory_content=backend.context())
    return memory + "\n\n" + fmt.system_prompt(list(tool_docs(backend.backend)), compact=compact)


def play(
    engine: RolloutEngine,
    backend: MemoryBackend,
    scenario: str,
    turns: list[list[dict[str, Any]]],
    fmt: ToolCallFormat,
    sampling: SamplingParams,
    limits: EpisodeLimits,
    compact: bool = False,
) -> tuple[list[Message], list[ToolCall], str | None]:
    """One conversation: (messages, tool calls, the last assistant message that made no call)."""
    messages = [Message(role="system", content=system_prompt(backend, scenario, fmt, compact))]
    calls: list[ToolCall] = []
    answer: str | None = None
    for index, turn in enumerate(turns):
        messages += [Message(role=m["role"], content=m["content"]) for m in turn if m.get("role") in ("user", "system")]
        for _ in range(limits.max_steps):
            gen = engine.generate([messages], sampling)[0]
            messages.append(Message.from_generation(gen))
            if gen.finish_reason == "prompt_too_long":
                return messages, calls, answer
            parsed = fmt.parse(gen.text)
            if not parsed.ok:
                calls.append(ToolCall(turn=index, name="", rejected=parsed.error))
                messages.append(Message(role="tool", content=fmt.render_error(parsed.error or "")))
                continue
            if not parsed.calls:
                answer = gen.text
                break
            for call in parsed.calls:
                result = backend.call(call.name, call.arguments) if not call.args else "Error: use keyword arguments"
                record = ToolCall(turn=index, name=call.name, arguments=call.arguments)
                if result.startswith("Error: unknown tool"):
                    record.rejected = result
                elif result.startswith("Error"):
                    record.error = result
                else:
                    record.result = result
                calls.append(record)
                messages.append(Message(role="tool", content=fmt.render_result(call.name, result)))
    return messages, calls, answer


def fill_memory(
    engine: RolloutEngine, backend_name: str, scenario: str, fmt: ToolCallFormat, sampling: SamplingParams,
    limits: EpisodeLimits, compact: bool = False,
) -> dict[str, Any]:
    """Play the scenario's prerequisite conversations in order on one backend; return its memory snapshot."""
    from .data import prereq_conversations

    backend = MemoryBackend(backend_name)
    for entry in prereq_conversations(scenario):
        play(engine, backend, scenario, entry["question"], fmt, sampling, limits, compact)
    return backend.snapshot()


def ask(
    engine: RolloutEngine, task: Task, snapshot: dict[str, Any], fmt: ToolCallFormat, sampling: SamplingParams,
    limits: EpisodeLimits, group: str, sample: int = 0, compact: bool = False,
) -> Trajectory:
    """One question from a filled memory, scored with BFCL's agentic check."""
    p = task.payload
    backend = MemoryBackend(p["backend"], snapshot)
    messages, calls, answer = play(engine, backend, p["scenario"], p["question"], fmt, sampling, limits, compact)
    found = answer is not None and answer_found(answer, p["ground_truth"])
    return Trajectory(
        task_id=task.id, category=task.category, group=group, sample=sample, messages=messages, tool_calls=calls,
        reward=1.0 if found else 0.0,
        finish="completed" if answer is not None else "no_answer",
        turn_verdicts=[TurnVerdict(turn=0, passed=found, checks={"answer": answer, "accepted": p["ground_truth"]})],
    )
