"""One episode: the user's turns in order; in each, the agent calls tools until it answers without one."""

from __future__ import annotations

import json
import re

from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, Message, SamplingParams, Task, ToolCall, Trajectory

from .tasks import Call, KVStore

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
STOP = "</tool_call>"


def parse_call(text: str) -> tuple[Call | None, str | None]:
    """(call, None), (None, None) when the text has no call, or (None, why) for a bad call. Model text is
    only ever parsed as JSON, never evaluated."""
    match = _BLOCK.search(text)
    if match is None:
        return None, None
    try:
        data = json.loads(match.group(1))
        call = Call(name=data["name"], arguments={str(k): str(v) for k, v in (data.get("arguments") or {}).items()})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return (
            None,
            'Error: the call is not valid JSON of the form {"name": ..., "arguments": {...}} '
            f"({type(exc).__name__})",
        )
    if call.name not in KVStore.TOOLS:
        return None, f"Error: unknown tool {call.name!r}; the tools are {', '.join(KVStore.TOOLS)}"
    return call, None


def run_episode(task: Task, engine: RolloutEngine, interface: Interface, sampling: SamplingParams,
                max_steps_per_turn: int, group: str = "", sample: int = 0) -> Trajectory:
    """Play ``task`` under ``interface``; the trajectory's tool calls say what ran (and what was rejected)."""
    messages = [Message(role="system", content=interface.system_text)]
    trajectory = Trajectory(task_id=task.id, category=task.category, group=group, sample=sample,
                            interface_revision=interface.revision)
    store = KVStore()
    for turn, question in enumerate(task.payload["questions"]):
        messages.append(Message(role="user", content=question))
        for _ in range(max_steps_per_turn):
            generation = engine.generate([messages], sampling)[0]
            messages.append(Message.from_generation(generation))
            call, error = parse_call(generation.text)
            if call is None and error is None:
                break  # an answer without a call ends the user's turn
            if call is None:
                trajectory.tool_calls.append(ToolCall(turn=turn, name="?", rejected=error))
                messages.append(Message(role="tool", content=error or ""))
                continue
            result = store.execute(call)
            trajectory.tool_calls.append(
                ToolCall(turn=turn, name=call.name, arguments=dict(call.arguments), result=result)
            )
            messages.append(Message(role="tool", content=result))
        else:
            trajectory.finish = "step_limit"
            trajectory.metadata["turns_reached"] = turn + 1
            break
    trajectory.messages = messages
    trajectory.metadata.setdefault("turns_reached", len(task.payload["questions"]))
    return trajectory
