"""Episodes and the verifier of the smart-home environment.

Protocol: the agent sees a system prompt with the tool docs (rendered under the interface revision), an
optional worked two-turn example, then the first user turn. In each user turn it gets up to
``attempts_per_turn`` generations. A generation with tool calls has them executed in order; if they all
succeed the turn ends, otherwise the error (plus a recovery hint when the revision enables one) comes back
and the agent may try again. A generation without a call ends the turn. Then the next user turn comes.

Verifier (binary, BFCL multi-turn semantics): after every user turn the home's state must equal the state
the ground-truth calls produce from the same starting point, and a turn whose ground truth makes a call
needs at least one executed call. Reward 1 when every turn passes. All episodes advance in lock step, so
the engine batches each round's generations.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, Message, SamplingParams, Task, ToolCall, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.interface import recovery_hint, render_tools, system_addendum
from seal_platform_libs.toolenv.jsoncalls import parse_calls  # JSON only, within limits on size, nesting and calls
from seal_platform_libs.toolenv.lockstep import ScriptedEpisode, play_lockstep

from .cues import CUES
from .tools import TOOL_DOCS, ToolError, execute, render_docs, run_calls

SYSTEM = (
    "You control a smart home with these tools:\n{tools}\n"
    "Call a tool as <tool_call>{{\"name\": \"...\", \"arguments\": {{...}}}}</tool_call>. "
    "Make one call for each request."
)
# The worked dialogue shown before the task: its first ``worked_examples`` turns (one per tool, in this order).
EXAMPLE = [
    ("Turn off the bedroom light.", {"name": "set_light", "arguments": {"room": "bedroom", "state": "off"}},
     '{"room": "bedroom", "light": "off"}'),
    ("Lock the front door.", {"name": "lock_door", "arguments": {"door": "front", "action": "lock"}},
     '{"door": "front", "status": "locked"}'),
    ("Set the kitchen thermostat to 22 degrees.",
     {"name": "set_thermostat", "arguments": {"room": "kitchen", "temperature": 22}},
     '{"room": "kitchen", "temperature": 22}'),
    ("Play rock music in the bedroom.", {"name": "play_music", "arguments": {"room": "bedroom", "genre": "rock"}},
     '{"room": "bedroom", "playing": "rock"}'),
]


def build_prompt(task: Task, interface: Interface, worked_examples: int, example_results: bool = True) -> list[Message]:
    docs = render_tools(TOOL_DOCS, interface, task.category)
    system = SYSTEM.format(tools=render_docs(docs))
    extra = system_addendum(interface, task.category)
    if extra:
        system = f"{system}\n\n{extra}"
    messages = [Message(role="system", content=system)]
    for user, call, result in EXAMPLE[:worked_examples]:
        messages += [Message(role="user", content=user),
                     Message(role="assistant", content=f"<tool_call>{json.dumps(call)}</tool_call>")]
        if example_results:
            messages.append(Message(role="tool", content=result))
    return messages


@dataclass
class _Episode(ScriptedEpisode):
    state: dict[str, Any] = field(default_factory=dict)
    attempts_per_turn: int = 1
    executed: dict[int, int] = field(default_factory=dict)  # turn -> successful calls

    def react(self, text: str) -> None:
        """Apply one generation to the episode: execute its calls, answer, and advance the turn when due."""
        self.attempts += 1
        calls, error = parse_calls(text)
        if error is not None:
            self.traj.tool_calls.append(ToolCall(turn=self.turn, name="", rejected=error))
            observations = [f"Error: {error}"]
            failed = True
        elif not calls:
            self.end_turn()
            return
        else:
            observations, failed = [], False
            for call in calls:
                record = ToolCall(turn=self.turn, name=call["name"], arguments=call["arguments"])
                try:
                    record.result = execute(self.state, call["name"], call["arguments"])
                    self.executed[self.turn] = self.executed.get(self.turn, 0) + 1
                    observations.append(record.result)
                except ToolError as exc:
                    if str(exc).startswith("unknown tool"):
                        record.rejected = str(exc)
                        observations.append(f"Error: {exc}")
                    else:
                        record.error = f"Error during execution: {exc}"
                        observations.append(record.error)
                    failed = True
                self.traj.tool_calls.append(record)
        content = "\n".join(observations)
        if failed:
            hint = recovery_hint(self.interface, self.task.category, content, CUES.hints)
            if hint:
                content = f"{content}\n{hint}"
        self.messages.append(Message(role="tool", content=content))
        if not failed or self.attempts >= self.attempts_per_turn:
            self.end_turn()

    def score(self) -> None:
        self.traj.turn_verdicts = verify(self.task, self.traj)
        for v in self.traj.turn_verdicts:
            v.reached = v.turn <= self.turn
        self.traj.reward = 1.0 if all(v.passed for v in self.traj.turn_verdicts) else 0.0


class TurnChecks(BaseModel):
    """What the smart-home verifier found in one turn (``TurnVerdict.checks``, stored as ``model_dump()``)."""

    gt_calls: list[dict[str, Any]] = []  # the ground truth's calls of the turn: {"name", "arguments"}
    model_calls: list[dict[str, Any]] = []  # the agent's executed calls of the turn, in the same shape
    state_ok: bool = True  # the home's state equals the ground truth's after the turn
    called: bool = True  # the agent executed a call, or the ground truth makes none


def verify(task: Task, traj: Trajectory) -> list[TurnVerdict]:
    """Replay the trajectory's executed calls and the ground truth turn by turn and compare states."""
    gt_state = copy.deepcopy(task.payload["initial_state"])
    model_state = copy.deepcopy(task.payload["initial_state"])
    verdicts = []
    for i, turn in enumerate(task.payload["turns"]):
        gt_state = run_calls(gt_state, turn["calls"])
        made = [c for c in traj.tool_calls if c.turn == i and c.result is not None]
        for call in made:
            execute(model_state, call.name, call.arguments)
        state_ok = model_state == gt_state
        called = bool(made) or not turn["calls"]
        checks = TurnChecks(
            gt_calls=turn["calls"],
            model_calls=[{"name": c.name, "arguments": c.arguments} for c in made],
            state_ok=state_ok,
            called=called,
        )
        verdicts.append(TurnVerdict(turn=i, passed=state_ok and called, checks=checks.model_dump()))
    return verdicts


def run_episodes(
    engine: RolloutEngine,
    episodes: list[tuple[Task, str, int]],
    interface: Interface,
    sampling: SamplingParams,
    attempts_per_turn: int,
    worked_examples: int,
    example_results: bool = True,
) -> list[Trajectory]:
    """Play ``(task, group, sample)`` episodes in lock step, all at once, and verify them."""

    def make(task: Task, traj: Trajectory) -> _Episode:
        return _Episode(task, traj, build_prompt(task, interface, worked_examples, example_results), interface,
                        state=copy.deepcopy(task.payload["initial_state"]), attempts_per_turn=attempts_per_turn)

    return play_lockstep(engine, episodes, interface, sampling, make)
