"""The model-facing side of an environment, complete and runnable: what the engine takes (role/content
messages), tools rendered into the system text with a worked example, calls parsed from the model's text
(as JSON only, never evaluated), and per-turn verdicts built from the calls. docs/write-an-environment-plugin.md
("The model-facing protocol") shows this file; `pytest examples/seal-kvstore/tests/test_model_facing.py` runs it.
"""

from __future__ import annotations

import json
import re

from seal_platform.types import Generation, Interface, Message, SamplingParams, Task, ToolCall, Trajectory, TurnVerdict

# --- 1. the tools, rendered into the system text -------------------------------------------------------------

TOOLS = {
    "set_light": {
        "description": "Switch a room's light.",
        "parameters": {"room": ["kitchen", "bedroom"], "state": ["on", "off"]},
    },
    "lock_door": {
        "description": "Lock or unlock a door.",
        "parameters": {"door": ["front", "back"], "locked": ["yes", "no"]},
    },
}
STOP = "</tool_call>"
CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def render_tool(name: str, tool: dict) -> str:
    params = ", ".join(f"{p}: one of {'|'.join(values)}" for p, values in tool["parameters"].items())
    return f"- {name}({params}): {tool['description']}"


def system_text(worked_example: bool = True) -> str:
    lines = ["You control a smart home with these tools:", *(render_tool(n, t) for n, t in TOOLS.items()),
             'Call one tool per message as <tool_call>{"name": "...", "arguments": {...}}</tool_call>.',
             "Answer without a call when the request is done."]
    if worked_example:  # small models copy a worked call far better than they follow a description
        lines += [
            "Example:",
            "User: Please use set_light to turn the kitchen light on.",
            'Assistant: <tool_call>{"name": "set_light", "arguments": {"room": "kitchen", "state": "on"}}</tool_call>',
            "Tool: ok",
            "Assistant: The kitchen light is on.",
        ]
    return "\n".join(lines)


# --- 2. calls parsed from the model's text (JSON only; a bad call is an error message for the model) ---------


def parse_call(text: str) -> tuple[dict | None, str | None]:
    """(call, None); (None, None) when the text holds no call; (None, why) for a call that cannot run."""
    match = CALL.search(text)
    if match is None:
        return None, None
    try:
        data = json.loads(match.group(1))
        name, arguments = data["name"], dict(data.get("arguments") or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, 'Error: write the call as {"name": "...", "arguments": {...}} inside <tool_call></tool_call>.'
    if name not in TOOLS:
        return None, f"Error: unknown tool {name!r}; the tools are {', '.join(TOOLS)}."
    allowed = TOOLS[name]["parameters"]
    for param, values in allowed.items():
        if arguments.get(param) not in values:
            return None, f"Error: {name}.{param} must be one of {', '.join(values)}."
    return {"name": name, "arguments": {p: arguments[p] for p in allowed}}, None


# --- 3. one episode: messages in, text out; each user turn gets a verdict ----------------------------------


def play(task: Task, engine, interface: Interface, sampling: SamplingParams, attempts_per_turn: int = 1) -> Trajectory:
    sampling = sampling.model_copy(update={"stop": [STOP], "max_new_tokens": 48})  # what is the environment's own
    messages = [Message(role="system", content=interface.system_text)]
    trajectory = Trajectory(
        task_id=task.id, category=task.category, group=task.id, interface_revision=interface.revision
    )
    for turn, (request, expected) in enumerate(zip(task.payload["requests"], task.payload["expected"])):
        messages.append(Message(role="user", content=request))
        made = []
        for _ in range(attempts_per_turn):
            generation = engine.generate([messages], sampling)[0]
            messages.append(Message.from_generation(generation))  # keeps token ids and log-probs for training
            call, error = parse_call(generation.text)
            if call is None and error is None:
                break  # an answer without a call ends the turn
            if call is None:
                trajectory.tool_calls.append(ToolCall(turn=turn, name="?", rejected=error))
                messages.append(Message(role="tool", content=error or ""))
                continue
            made.append(call)
            trajectory.tool_calls.append(
                ToolCall(turn=turn, name=call["name"], arguments=call["arguments"], result="ok")
            )
            messages.append(Message(role="tool", content="ok"))
        passed = made == [expected]
        trajectory.turn_verdicts.append(TurnVerdict(turn=turn, passed=passed, checks={"calls": len(made)}))
        if not passed:
            break  # later turns are not reached
    reached = len(trajectory.turn_verdicts)
    trajectory.turn_verdicts += [TurnVerdict(turn=t, passed=False, reached=False)
                                 for t in range(reached, len(task.payload["expected"]))]
    trajectory.messages = messages
    trajectory.reward = float(all(v.passed for v in trajectory.turn_verdicts))
    return trajectory


# --- 4. trying it without a model: a scripted engine ----------------------------------------------------------


class ScriptedEngine:
    """Answers each conversation from a script: the engine interface, with no model behind it."""

    name = "scripted"

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        self.seen += [[{"role": m.role, "content": m.content} for m in c] for c in conversations]
        return [Generation(text=self.replies.pop(0), token_ids=[1, 2], logprobs=[-0.5, -0.5]) for _ in conversations]

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content.split()) for m in conversation)

    def close(self) -> None:
        pass


TASK = Task(id="home-0", category="named", split="train", payload={
    "requests": ["Please use lock_door to lock the front door.", "Now use set_light to switch the bedroom light off."],
    "expected": [{"name": "lock_door", "arguments": {"door": "front", "locked": "yes"}},
                 {"name": "set_light", "arguments": {"room": "bedroom", "state": "off"}}]})


def test_a_right_episode_passes_every_turn_and_the_engine_saw_only_role_content_messages():
    engine = ScriptedEngine([
        '<tool_call>{"name": "lock_door", "arguments": {"door": "front", "locked": "yes"}}', "Done.",
        '<tool_call>{"name": "set_light", "arguments": {"room": "bedroom", "state": "off"}}', "Done.",
    ])
    interface = Interface(revision=0, system_text=system_text())
    trajectory = play(TASK, engine, interface, SamplingParams(temperature=0.7), attempts_per_turn=2)
    assert trajectory.reward == 1.0 and [v.passed for v in trajectory.turn_verdicts] == [True, True]
    first = engine.seen[0]
    assert [m["role"] for m in first] == ["system", "user"] and "lock_door(door: one of front|back" in first[0][
        "content"
    ]
    assert [m.role for m in trajectory.messages].count("tool") == 2


def test_a_bad_call_is_rejected_with_a_message_and_the_later_turn_is_unreached():
    engine = ScriptedEngine(['<tool_call>{"name": "front door", "arguments": {}}'])
    trajectory = play(TASK, engine, Interface(system_text=system_text()), SamplingParams(), attempts_per_turn=1)
    assert trajectory.reward == 0.0
    assert trajectory.tool_calls[0].rejected.startswith("Error: unknown tool 'front door'")
    assert [(v.passed, v.reached) for v in trajectory.turn_verdicts] == [(False, True), (False, False)]


def test_model_text_is_only_parsed():
    assert parse_call("The tool is lock_door.") == (None, None)
    assert parse_call('<tool_call>__import__("os").system("x")</tool_call>')[1].startswith("Error: write the call")
    assert parse_call('<tool_call>{"name": "set_light", "arguments": {"room": "attic", "state": "on"}}')[1] == (
        "Error: set_light.room must be one of kitchen, bedroom.")
