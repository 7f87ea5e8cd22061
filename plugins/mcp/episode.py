"""Episodes and the verifier of the mcp environment.

Protocol (as smarthome's): the agent sees a system prompt with the tool docs (rendered under the interface
revision) and the recipe's worked examples, then the first user turn. In each user turn it gets up to
``attempts_per_turn`` generations. A generation with tool calls has them checked against the tool's JSON schema
(a call that fails never reaches the server) and executed on the episode's own server process; a failed call's
error (plus a recovery hint when the revision enables them) comes back and the agent may try again. A
generation without a call ends the turn. After each turn the task's check calls run on the server (the agent
does not see them). Episodes advance in lock step in chunks of ``max_parallel_episodes`` (the engine batches
each round's generations; that many server processes are alive at once).

A server failure (start, timeout, exit, unreadable output) makes the episode an infrastructure failure
(:func:`seal_platform.infra.failed_trajectory`): never diagnosed, its group masked out of the update.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from seal_platform.infra import InfraError
from seal_platform.types import (
    Interface,
    Message,
    SamplingParams,
    Task,
    ToolCall,
    Trajectory,
    TurnVerdict,
)
from seal_platform_libs.toolenv.jsoncalls import clip_text, parse_calls
from seal_platform_libs.toolenv.lockstep import ScriptedEpisode, play_lockstep
from seal_platform_libs.toolenv.schemadocs import recovery_hint, render_docs, unknown_arguments, validate_arguments

from .client import MCPConnection, ToolResult

SYSTEM = (
    "You can use these tools:\n{tools}\n"
    "Call a tool as <tool_call>{{\"name\": \"...\", \"arguments\": {{...}}}}</tool_call>. "
    "Make one call for each request."
)


def start_servers(env: Any) -> list[MCPConnection]:
    """Fresh sessions with every server (one episode's), started but not waited for."""
    return [MCPConnection(server).start() for server in env.settings.servers]


def open_servers(env: Any, started: list[MCPConnection] | None = None) -> list[MCPConnection]:
    """Fresh sessions with every server (one episode's; ``started``: those of :func:`start_servers`), ready
    and reset when the recipe says so. An :class:`InfraError` closes them all."""
    conns: list[MCPConnection] = started if started is not None else start_servers(env)
    try:
        for conn in conns:
            conn.wait_ready()
        for conn in conns:
            if env.settings.isolation == "reset":
                _recipe_call(conn, "the reset tool", env.settings.reset_tool, env.settings.reset_arguments)
            for call in conn.server.setup:
                _recipe_call(conn, "the setup call", call.name, call.arguments)
        return conns
    except BaseException:
        for conn in conns:
            conn.close()
        raise


def _recipe_call(conn: MCPConnection, what: str, name: str, arguments: dict[str, Any]) -> None:
    """A call the recipe makes (reset, set-up): a failure is the infrastructure's, not the agent's."""
    result = conn.call(name, arguments)
    if result.is_error or conn.server.is_error_text(result.text):
        raise InfraError(f"{what} {name} of {conn.server.name!r} failed: {clip_text(result.text, 200)}")


def close_servers(conns: list[MCPConnection]) -> None:
    """End an episode's sessions: each server's tear-down calls (failures ignored: the episode is over), then
    the session and process (and the start's own folder)."""
    for conn in conns:
        if not conn.closed:
            for call in conn.server.teardown:
                try:
                    conn.call(call.name, call.arguments)
                except InfraError:
                    break
        conn.close()


def server_call(env: Any, conns: list[MCPConnection], name: str, arguments: dict[str, Any]) -> ToolResult:
    """Call the tool shown as ``name``; a result the server flags, or whose text matches the server's
    ``error_pattern``, is an error."""
    env.docs()
    index, tool = env._owner[name]
    result = conns[index].call(tool, arguments)
    failed = result.is_error or conns[index].server.is_error_text(result.text)
    return ToolResult(clip_text(result.text, env.settings.max_result_chars), failed)


def unsendable(arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` cannot go to a server (JSON-RPC is UTF-8: a lone surrogate such as ``"\\ud800"`` in
    model text has no encoding), or None."""
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "the arguments are not valid Unicode text (a lone surrogate such as \\ud800)"
    return None


def run_checks(env: Any, conns: list[MCPConnection], turn: dict[str, Any]) -> list[str]:
    return [("error: " if r.is_error else "") + r.text
            for r in (server_call(env, conns, c["name"], c["arguments"]) for c in turn["check"])]


def build_prompt(env: Any, task: Task, interface: Interface) -> list[Message]:
    changes = interface.spec.get("changes", [])
    intro = env.settings.system_prompt.strip()
    system = (f"{intro}\n" if intro else "") + SYSTEM.format(tools=render_docs(env.docs(), changes))
    if "call_format" in changes and env.docs():
        doc = env.docs()[0]
        system += (f"\nA tool call is one JSON object inside the tags, e.g. <tool_call>{{\"name\": \"{doc['name']}\", "
                   "\"arguments\": {...}}</tool_call>, with the arguments named as in the list above.")
    context = str(task.payload.get("context") or "").strip()
    if context:
        system += f"\n{context}"
    messages = [Message(role="system", content=system)]
    for example in env.settings.worked_examples:
        messages += [Message(role="user", content=str(example["user"])),
                     Message(role="assistant", content=f"<tool_call>{json.dumps(example['call'])}</tool_call>")]
        if example.get("result") is not None:
            messages.append(Message(role="tool", content=str(example["result"])))
        if example.get("answer") is not None:
            messages.append(Message(role="assistant", content=str(example["answer"])))
    return messages


@dataclass
class _Episode(ScriptedEpisode):
    env: Any = None
    conns: list[MCPConnection] = field(default_factory=list)
    checks: list[list[str]] = field(default_factory=list)
    answers: dict[int, str] = field(default_factory=dict)  # turn -> the agent's final message (without a call)

    def begin(self) -> None:
        self.conns = open_servers(self.env, self.conns)
        super().begin()

    def turn_ended(self) -> None:
        """The turn's check calls, on the episode's servers (the agent does not see them)."""
        self.checks.append(run_checks(self.env, self.conns, self.task.payload["turns"][self.turn]))

    def react(self, text: str) -> None:
        env, s = self.env, self.env.settings
        self.attempts += 1
        calls, error = parse_calls(text, s.max_calls_per_message)
        changes = self.interface.spec.get("changes", [])
        names = [d["name"] for d in env.docs()]
        hint_doc: dict[str, Any] | None = None
        if error is not None:
            self.traj.tool_calls.append(ToolCall(turn=self.turn, name="", rejected=error))
            observations, failed = [f"Error: {error}"], True
        elif not calls:
            self.answers[self.turn] = text
            self.end_turn()
            return
        else:
            observations, failed = [], False
            for call in calls:
                record = ToolCall(turn=self.turn, name=call["name"], arguments=call["arguments"])
                doc = next((d for d in env.docs() if d["name"] == call["name"]), None)
                if doc is None:
                    record.rejected = f"unknown tool {call['name']!r}; available tools: {', '.join(names)}"
                    observations.append(f"Error: {record.rejected}")
                    failed = True
                else:
                    extra = unknown_arguments(doc, call["arguments"])
                    problem = ((f"unexpected argument {extra[0]!r}" if extra else None)
                               or unsendable(call["arguments"]) or validate_arguments(doc, call["arguments"]))
                    if problem:
                        record.error = f"Error: invalid arguments for {call['name']}: {problem}"
                        failed = True
                    else:
                        result = server_call(env, self.conns, call["name"], call["arguments"])
                        if result.is_error:
                            record.error = f"Error during execution: {result.text}"
                            failed = True
                        else:
                            record.result = result.text
                    observations.append(record.error or record.result or "")
                    hint_doc = doc if record.error else hint_doc
                self.traj.tool_calls.append(record)
        content = "\n".join(observations)
        if failed and "recovery_hints" in changes:
            content = f"{content}\n{recovery_hint(hint_doc, content, names)}"
        self.messages.append(Message(role="tool", content=content))
        if wants_answer(self.task.payload["turns"][self.turn]):
            # The turn goes on until the agent answers without a call: its calls, and one message for the answer.
            if self.attempts >= s.attempts_per_turn + 1:
                self.end_turn()
        elif not failed or self.attempts >= s.attempts_per_turn:
            self.end_turn()

    def close(self) -> None:
        close_servers(self.conns)

    def score(self) -> None:
        self.traj.turn_verdicts = verify(self.env, self.task, self.traj, self.checks, self.answers)
        self.traj.reward = 1.0 if all(v.passed for v in self.traj.turn_verdicts) else 0.0


def wants_answer(turn: dict[str, Any]) -> bool:
    """Whether the turn checks the agent's final answer (``answer_contains``/``answer_equals``)."""
    return bool(turn.get("answer_contains")) or turn.get("answer_equals") is not None


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def answer_ok(turn: dict[str, Any], answer: str | None) -> bool:
    """The turn's answer checks on the agent's final message (None: it never answered)."""
    if answer is None:
        return False
    said = _norm(answer)
    if turn.get("answer_equals") is not None and said != _norm(turn["answer_equals"]):
        return False
    return all(_norm(part) in said for part in turn.get("answer_contains") or [])


def verify(env: Any, task: Task, traj: Trajectory, checks: list[list[str]],
           answers: dict[int, str] | None = None) -> list[TurnVerdict]:
    """One verdict per turn: every kind of check the turn declares must hold (``check`` calls' results equal
    the reference's, ``check_result``, the answer checks); a turn that declares none passes when every
    ground-truth call was made with (at least) its arguments. A turn whose ground truth makes a call needs one
    successful call of the agent."""
    reference = env.reference(task)
    answers = answers or {}
    verdicts = []
    for i, turn in enumerate(task.payload["turns"]):
        made = [c for c in traj.tool_calls if c.turn == i and c.result is not None]
        called = bool(made) or not turn["calls"]
        reached = i < len(checks)
        ref = reference[i]
        kinds: dict[str, bool] = {}
        if turn["check"]:
            kinds["check"] = reached and checks[i] == ref["checks"]
        if turn.get("check_result"):
            kinds["check_result"] = all(any(c.name == g["name"] and c.result == r for c in made)
                                        for g, r in zip(turn["calls"], ref["results"]))
        if wants_answer(turn):
            kinds["answer"] = answer_ok(turn, answers.get(i))
        if not kinds:
            kinds["arguments"] = all(any(c.name == g["name"] and all(c.arguments.get(k) == v
                                                                     for k, v in g["arguments"].items())
                                         for c in made) for g in turn["calls"])
        ok = reached and called and all(kinds.values())
        verdicts.append(TurnVerdict(turn=i, passed=bool(ok), reached=reached, checks={
            "gt_calls": turn["calls"], "model_calls": [{"name": c.name, "arguments": c.arguments} for c in made],
            "check_results": checks[i] if reached else [], "reference_results": ref["checks"],
            "reference_call_results": ref["results"], "answer": answers.get(i), "kinds": kinds, "called": called}))
    return verdicts


def run_episodes(env: Any, engine: Any, episodes: list[tuple[Task, str, int]], interface: Interface,
                 sampling: SamplingParams) -> list[Trajectory]:
    """Play ``(task, group, sample)`` episodes (in chunks, each in lock step; every episode's servers of a chunk
    start at once) and verify them."""

    def make(task: Task, traj: Trajectory) -> _Episode:
        return _Episode(task, traj, build_prompt(env, task, interface), interface, env=env, conns=start_servers(env))

    # A URL server whose sessions share one state (reset per episode) serves one episode at a time.
    chunk = 1 if env.settings.shared_state() else env.settings.max_parallel_episodes
    return play_lockstep(engine, episodes, interface, sampling, make, chunk)
