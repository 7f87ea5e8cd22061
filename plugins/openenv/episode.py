"""Episodes and the verifier of the openenv environment.

An episode is one session: ``reset`` with the task's arguments gives the first observation (the user
message); then each agent message is one turn. A message with one ``<tool_call>`` naming the action tool has
its arguments checked against the action schema (a call that fails never reaches the server) and sent as the
action of one ``step``; the step's observation comes back as the tool message (a refused or invalid action
comes back as an error, and the agent may try again). A message without a call, the environment's ``done``,
or ``max_steps`` messages end the episode; the session's ``state`` is then recorded.

The verifier is the environment's own reward: in ``final`` mode the last step's reward decides the episode
(``passed``: at least ``success_threshold``) and each turn that stepped passes when the episode passed; in
``per_step`` mode each step passes when its own reward is at least ``step_threshold`` and the episode's reward
is their sum. A turn whose action never reached the environment never passes.

A server failure (no session, a timeout, a closed connection, an answer outside the protocol, a 5xx) makes
the episode an infrastructure failure (masked). Model output never raises out of here: it is parsed with the
guarded parser, validated, and anything the server says about it is shown as text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from seal_platform.infra import InfraError
from seal_platform.types import Interface, Message, SamplingParams, Task, ToolCall, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.jsoncalls import clip_text, parse_calls
from seal_platform_libs.toolenv.lockstep import LockstepEpisode, play_lockstep
from seal_platform_libs.toolenv.schemadocs import recovery_hint, render_docs, unknown_arguments, validate_arguments

from .client import ActionRefused, StepResult

SYSTEM = (
    "{intro}You act in an environment with this tool:\n{tools}\n"
    "Call it as <tool_call>{{\"name\": \"{name}\", \"arguments\": {{...}}}}</tool_call>, one call per message. "
    "Each call is one action; the environment answers with what it observes."
)


def render_observation(env: Any, observation: Any) -> str:
    """What the agent sees of an observation: the configured field, or the whole observation as JSON."""
    name = env.settings.observation_field
    value = observation.get(name) if name and isinstance(observation, dict) and name in observation else observation
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return clip_text(text, env.settings.max_observation_chars)


def build_prompt(env: Any, interface: Interface) -> list[Message]:
    changes = interface.spec.get("changes", [])
    s = env.settings
    intro = f"{s.system_prompt.strip()}\n" if s.system_prompt.strip() else ""
    system = SYSTEM.format(intro=intro, tools=render_docs(env.docs(), changes), name=s.action_name)
    if "call_format" in changes:
        system += (f"\nA call is one JSON object inside the tags: <tool_call>{{\"name\": \"{s.action_name}\", "
                   "\"arguments\": {...}}</tool_call>, with the arguments named as in the list above.")
    messages = [Message(role="system", content=system)]
    for example in s.worked_examples:
        call = {"name": s.action_name, "arguments": example.get("action", {})}
        messages += [Message(role="user", content=render_observation(env, example.get("observation", ""))),
                     Message(role="assistant", content=f"<tool_call>{json.dumps(call)}</tool_call>")]
        if example.get("result") is not None:
            messages.append(Message(role="tool", content=render_observation(env, example["result"])))
    return messages


@dataclass
class _Episode(LockstepEpisode):
    env: Any = None
    session: Any = None
    turns: list[dict[str, Any]] = field(default_factory=list)  # per agent message: kind, action, reward, ...
    env_done: bool = False

    def begin(self) -> None:
        self.session, result = self.env.reset_session(dict(self.task.payload.get("reset") or {}))
        self.traj.metadata["reset_reward"] = result.reward
        self.messages.append(Message(role="user", content=render_observation(self.env, result.observation)))
        if result.done:
            self.done = self.env_done = True
            self.traj.finish = "done_at_reset"

    def react(self, text: str) -> None:
        env, s = self.env, self.env.settings
        turn = len(self.turns)
        info: dict[str, Any] = {"kind": "", "action": None, "reward": None, "done": False, "error": None}
        self.turns.append(info)
        calls, error = parse_calls(text, 1)
        changes = self.interface.spec.get("changes", [])
        if error is None and not calls:
            info["kind"] = "no_action"
            self.done = True
            self.traj.finish = "no_action"
            return
        result: StepResult | None = None
        if error is None and calls[0]["name"] != s.action_name:
            error = f"unknown tool {calls[0]['name']!r}; the only tool is {s.action_name}"
        if error is not None:
            self.traj.tool_calls.append(ToolCall(turn=turn, name=calls[0]["name"] if calls else "", rejected=error))
            info.update(kind="invalid_call", error=error)
            content = f"Error: {error}"
        else:
            arguments = calls[0]["arguments"]
            record = ToolCall(turn=turn, name=s.action_name, arguments=arguments)
            extra = unknown_arguments(env.doc, arguments)
            problem = (f"unexpected argument {extra[0]!r}" if extra else None) or validate_arguments(env.doc, arguments)
            info["action"] = arguments
            if problem:
                record.error = f"Error: invalid arguments for {s.action_name}: {problem}"
                info.update(kind="invalid_arguments", error=problem)
            else:
                try:
                    result = self.session.step(arguments)
                except ActionRefused as exc:
                    record.error = f"Error: the environment refused the action: {clip_text(str(exc), 600)}"
                    info.update(kind="refused", error=str(exc)[:600])
                else:
                    record.result = render_observation(env, result.observation)
                    info.update(kind="stepped", reward=result.reward, done=result.done)
            self.traj.tool_calls.append(record)
            content = record.error or record.result or ""
        if result is None and "recovery_hints" in changes:
            content = f"{content}\n{recovery_hint(env.doc, content, [s.action_name])}"
        self.messages.append(Message(role="tool", content=content))
        if result is not None and result.done:
            self.done = self.env_done = True
        elif len(self.turns) >= s.max_steps:
            self.done = True
            self.traj.finish = "step_limit"

    def context_limit(self) -> None:
        self.turns.append({"kind": "context_limit", "action": None, "reward": None, "done": False, "error": None})
        super().context_limit()

    def wrap_up(self) -> None:
        """Record the session's final state (a failure to read it is recorded too: the episode itself ran)."""
        if self.session is None:
            return
        try:
            state = self.session.state()
            self.traj.metadata["final_state"] = clip_text(json.dumps(state, ensure_ascii=False, default=str),
                                                          self.env.settings.max_observation_chars)
        except InfraError as exc:
            self.traj.metadata["final_state_error"] = clip_text(str(exc), 300)

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def score(self) -> None:
        self.traj.reward, self.traj.turn_verdicts = verify(self.env, self)
        if not math.isfinite(self.traj.reward):  # finite step rewards whose sum overflows
            raise InfraError(f"the OpenEnv server at {self.env.url} gave step rewards whose sum is not a finite "
                             f"number ({self.traj.reward})")


def episode_reward(env: Any, ep: _Episode) -> float:
    """The environment's reward of the episode: the last step's (final), or the sum of the steps' (per_step)."""
    rewards = [t["reward"] for t in ep.turns if t["kind"] == "stepped"]
    if env.settings.reward_mode == "per_step":
        return float(sum(r for r in rewards if r is not None))
    return float(rewards[-1]) if rewards and rewards[-1] is not None else 0.0


def verify(env: Any, ep: _Episode) -> tuple[float, list[TurnVerdict]]:
    """The trajectory's reward and one verdict per agent message (see the module doc)."""
    s = env.settings
    reward = episode_reward(env, ep)
    passed = reward >= s.success_threshold
    verdicts = []
    for i, info in enumerate(ep.turns):
        stepped = info["kind"] == "stepped"
        if s.reward_mode == "per_step":
            ok = stepped and info["reward"] is not None and info["reward"] >= s.step_threshold
        else:
            ok = stepped and passed
        verdicts.append(TurnVerdict(turn=i, passed=bool(ok), reached=info["kind"] != "context_limit", checks={
            **info, "reward_mode": s.reward_mode, "episode_reward": reward, "episode_passed": passed}))
    ep.traj.metadata.update(env_reward=reward, env_done=ep.env_done,
                            step_rewards=[t["reward"] for t in ep.turns if t["kind"] == "stepped"])
    return (1.0 if passed else 0.0) if s.binary_reward else reward, verdicts


def run_episodes(env: Any, engine: Any, episodes: list[tuple[Task, str, int]], interface: Interface,
                 sampling: SamplingParams) -> list[Trajectory]:
    """Play ``(task, group, sample)`` episodes (in chunks of ``env.parallel_episodes()``, each in lock step)."""
    prompt = build_prompt(env, interface) if episodes else []

    def make(task: Task, traj: Trajectory) -> _Episode:
        return _Episode(task, traj, list(prompt), interface, env=env)

    return play_lockstep(engine, episodes, interface, sampling, make, env.parallel_episodes())
