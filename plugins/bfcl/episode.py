"""The BFCL multi-turn episode protocol, run against any rollout engine.

One episode is one task played to its end::

    system: tool block of every involved class (+ the interface revision's addendum)
    user:   turn 0
    loop:   assistant message (from the engine)
            - parse error or a call to a tool not in the current list -> the whole message is rejected, one
              error observation, the turn does not advance
            - calls -> executed in order on the task's backend instances, one observation each
            - no call -> the user turn ends; the next one is injected (miss_func: at the reveal turn the
              held-out tool docs + "I have updated some more functions", after which they are callable)
    until:  the last user turn ends, or the step limit (model generations per dialogue or per turn) or the
            context limit is hit

The engine is reached only through :class:`seal_platform.engine.RolloutEngine`, so the environment runs
on its own (no trainer). Assistant messages keep the engine's exact token ids and log-probs and are the only
trainable messages. Tool execution happens in worker processes (:mod:`.executor`); this module only sees
a session object with ``call``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, Message, SamplingParams, Task, ToolCall, Trajectory, valid_text
from seal_platform_libs.toolenv import interface as iface
from seal_platform_libs.toolenv.calls import render_call
from seal_platform_libs.toolenv.formats import ParsedCall, ToolCallFormat

from . import data
from .trace import is_error_result

CLIP_MARKER = "\n... [observation clipped: {n} more characters]"


class ToolSession(Protocol):
    """The running backend of one episode (see :class:`.executor.ToolExecutor`)."""

    def call(self, name: str, arguments: dict[str, Any] | None, allowed_tools: Iterable[str] | None) -> Any:
        """Run one call (``allowed_tools``: the episode's current tool list, None: every tool); the result has
        ``result``, ``error`` (text or None) and ``rejected`` (bool)."""
        ...

    def close(self) -> None: ...


@dataclass
class EpisodeLimits:
    """The episode's limits (the reference values by default)."""

    max_steps: int = 20
    step_limit_scope: str = "dialogue"  # or "turn"
    max_context_tokens: int = 16384
    max_observation_tokens: int = 4096
    max_new_tokens: int | None = None


@dataclass
class EpisodeSetup:
    """Everything that presents a task to the agent, fixed for the episode."""

    fmt: ToolCallFormat
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    compact_tools: bool = False
    system_preamble: str = ""


# --- presentation ----------------------------------------------------------------------------------------


def system_prompt(task: Task, interface: Interface, setup: EpisodeSetup) -> tuple[str, list[dict[str, Any]]]:
    """The system message text of ``task`` under ``interface``, and the tool docs it shows."""
    docs = iface.render_tools(data.tool_docs(task), interface, task.category)
    parts = [setup.system_preamble] if setup.system_preamble else []
    parts.append(setup.fmt.system_prompt(docs, compact=setup.compact_tools))
    addendum = iface.system_addendum(interface, task.category)
    if addendum:
        parts.append(addendum)
    return "\n\n".join(parts), docs


def _user_messages(turn: list[dict[str, Any]]) -> list[Message]:
    out = []
    for message in turn:
        role = message.get("role", "user")
        out.append(
            Message(role=role if role in ("user", "system") else "user", content=str(message.get("content", "")))
        )
    return out


def _bind_positional(call: ParsedCall, docs_by_name: dict[str, dict[str, Any]]) -> str | None:
    """Name the positional arguments of a call by the tool doc's parameter order; an error text if impossible."""
    if not call.args:
        return None
    params = list(((docs_by_name.get(call.name) or {}).get("parameters") or {}).get("properties") or {})
    if len(call.args) > len(params):
        return f"{call.name} takes {len(params)} argument(s) but {len(call.args)} positional argument(s) were given."
    for name, value in zip(params, call.args):
        if name in call.arguments:
            return f"{call.name} got multiple values for argument '{name}'."
        call.arguments[name] = value
    call.args = ()
    return None


# --- observations ----------------------------------------------------------------------------------------


def clip_observation(text: str, engine: RolloutEngine, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens (as ``engine`` counts them), with a marker saying so; made
    valid text first (a tool's error may quote a model-chosen name holding a lone surrogate)."""
    text = valid_text(text)
    # A byte-level tokenizer never makes more tokens than bytes, so short texts need no counting.
    if len(text.encode("utf-8")) <= max_tokens:
        return text

    def count(candidate: str) -> int:
        return engine.count_tokens([Message(role="tool", content=candidate)])

    overhead = count("")
    if count(text) - overhead <= max_tokens:
        return text
    # The marker counts against the limit too.
    target = max(0, max_tokens - (count(CLIP_MARKER.format(n=len(text))) - overhead))
    keep = len(text)
    for _ in range(8):
        n = count(text[:keep]) - overhead
        if n <= target:
            break
        keep = max(0, min(keep - 1, int(keep * target / max(n, 1) * 0.97)))
    return text[:keep] + CLIP_MARKER.format(n=len(text) - keep)


# --- the episode -----------------------------------------------------------------------------------------


@dataclass
class _State:
    messages: list[Message]
    tool_calls: list[ToolCall] = field(default_factory=list)
    model_turns: list[list[ParsedCall]] = field(default_factory=list)
    steps: int = 0
    rejected_messages: int = 0
    finish: str = "completed"


def run_episode(
    task: Task,
    engine: RolloutEngine,
    interface: Interface,
    sampling: SamplingParams,
    setup: EpisodeSetup,
    session: ToolSession,
    *,
    group: str = "",
    sample: int = 0,
) -> Trajectory:
    """Play ``task`` to its end with ``engine`` under ``interface``; the trajectory is not verified yet.

    ``Trajectory.metadata["model_turns"]`` holds, per user turn the agent reached (generated in), the calls
    that ran, in BFCL call syntax: what the verifier replays (rejected messages never ran). A stop at a step
    or context limit ends the episode; later turns are unreached.
    """
    started = time.perf_counter()
    system_text, docs = system_prompt(task, interface, setup)
    episode = _Episode(task, engine, interface, sampling, setup, session, {d["name"]: d for d in docs})
    state = _State(messages=[Message(role="system", content=system_text)])
    held = data.held_out_docs(task)
    for turn, question in enumerate(task.payload["question"]):
        state.messages.extend(episode.user_messages(turn, question, held))
        state.model_turns.append([])
        turn_steps = episode.play_turn(state, turn)
        if state.finish != "completed":
            if turn_steps == 0:
                # Stopped before the agent said anything in this turn: it never reached it.
                state.model_turns.pop()
            break
    return _trajectory(task, interface, state, setup, group, sample, time.perf_counter() - started)


@dataclass
class _Episode:
    """What stays fixed during one episode; its methods are the named steps of a user turn."""

    task: Task
    engine: RolloutEngine
    interface: Interface
    sampling: SamplingParams
    setup: EpisodeSetup
    session: ToolSession
    docs_by_name: dict[str, dict[str, Any]]

    @property
    def cap(self) -> int:
        limits = self.setup.limits
        return min(x for x in (self.sampling.max_new_tokens, limits.max_new_tokens) if x is not None)

    def user_messages(self, turn: int, question: list[dict[str, Any]], held: dict[int, Any]) -> list[Message]:
        """The turn's user message(s); at a miss_func reveal turn, the held-out tools first (now callable)."""
        if turn not in held:
            return _user_messages(question)
        revealed = iface.render_tools(held[turn], self.interface, self.task.category)
        self.docs_by_name.update({d["name"]: d for d in revealed})
        user = [Message(role="user", content=self.setup.fmt.reveal_message(revealed, compact=self.setup.compact_tools))]
        return user + (_user_messages(question) if question else [])

    def play_turn(self, state: _State, turn: int) -> int:
        """Generate, check and run the agent's messages until it answers without a call or a limit stops the
        episode (``state.finish``); returns how many messages it generated in this turn."""
        limits = self.setup.limits
        turn_steps = 0
        while True:
            if (state.steps if limits.step_limit_scope == "dialogue" else turn_steps) >= limits.max_steps:
                state.finish = "step_limit"
                return turn_steps
            room = limits.max_context_tokens - self.engine.count_tokens(state.messages)
            if room <= 0:
                state.finish = "context_limit"
                return turn_steps
            generation = self.generate(state, room)
            turn_steps += 1
            parsed = self.setup.fmt.parse(generation.text)
            error = self.rejection(parsed)
            if error is not None:
                self.reject(state, turn, parsed, error)
                continue
            if not parsed.calls:
                if generation.finish_reason == "length" and room <= self.cap:
                    # The reply was cut by the context limit, not finished by the model.
                    state.finish = "context_limit"
                return turn_steps
            self.run_calls(state, turn, parsed.calls)

    def generate(self, state: _State, room: int) -> Any:
        """One assistant message (its sampled tokens and log-probs kept for training)."""
        params = self.sampling.model_copy(update={"max_new_tokens": max(1, min(self.cap, room))})
        generation = self.engine.generate([state.messages], params)[0]
        state.steps += 1
        state.messages.append(Message.from_generation(generation))
        return generation

    def rejection(self, parsed: Any) -> str | None:
        """Why the whole message is rejected (a parse error, a bad positional binding, an unknown tool), or None."""
        error = parsed.error
        if error is None:
            for call in parsed.calls:
                error = _bind_positional(call, self.docs_by_name)
                if error:
                    return error
        if error is None:
            unknown = [c.name for c in parsed.calls if c.name not in self.docs_by_name]
            if unknown:
                names = ", ".join(repr(n) for n in dict.fromkeys(unknown))
                error = (
                    f"unknown tool {names}: not in the current tool list. No call of this message was run; "
                    "call only the listed tools."
                )
        return error

    def reject(self, state: _State, turn: int, parsed: Any, error: str) -> None:
        """Record the rejected message's calls (none of them runs) and answer with the error."""
        state.rejected_messages += 1
        calls = parsed.calls or [ParsedCall(name="")]
        state.tool_calls.extend(ToolCall(turn=turn, name=c.name, arguments=c.arguments, rejected=error) for c in calls)
        _observe(state, self.setup, self.interface, self.task, self.engine, "", error, failed=True, rejected=True)

    def run_calls(self, state: _State, turn: int, calls: list[Any]) -> None:
        """Run the message's calls in order in the tool session; each result (or error) is observed."""
        allowed = sorted(self.docs_by_name)
        for call in calls:
            outcome = self.session.call(call.name, call.arguments, allowed)
            result, err = getattr(outcome, "result", None), getattr(outcome, "error", None)
            state.tool_calls.append(
                ToolCall(turn=turn, name=call.name, arguments=call.arguments, result=result, error=err)
            )
            state.model_turns[-1].append(ParsedCall(call.name, dict(call.arguments)))
            text = err if err is not None else (result if result is not None else "")
            failed = err is not None or is_error_result(text)
            _observe(state, self.setup, self.interface, self.task, self.engine, call.name, text, failed=failed)


def _trajectory(
    task: Task, interface: Interface, state: _State, setup: EpisodeSetup, group: str, sample: int, seconds: float
) -> Trajectory:
    return Trajectory(
        task_id=task.id,
        category=task.category,
        group=group,
        sample=sample,
        interface_revision=interface.revision,
        messages=state.messages,
        tool_calls=state.tool_calls,
        finish=state.finish,
        metadata={
            "steps": state.steps,
            "turns_reached": len(state.model_turns),
            "n_turns": len(task.payload["question"]),
            "rejected_messages": state.rejected_messages,
            "model_turns": [[render_call(c.name, c.arguments) for c in turn] for turn in state.model_turns],
            "format": setup.fmt.name,
            "episode_s": round(seconds, 4),
        },
    )


def _observe(
    state: _State,
    setup: EpisodeSetup,
    interface: Interface,
    task: Task,
    engine: RolloutEngine,
    name: str,
    text: str,
    *,
    failed: bool,
    rejected: bool = False,
) -> None:
    """Append one observation: the clipped result (or the rejection), with the revision's recovery hint."""
    body = text if rejected else clip_observation(text, engine, setup.limits.max_observation_tokens)
    hint = iface.recovery_hint(interface, task.category, body) if failed else None
    if hint:
        body = f"{body}\n{hint}"
    content = setup.fmt.render_error(body) if rejected else setup.fmt.render_result(name, body)
    state.messages.append(Message(role="tool", content=content, name=name or None))
