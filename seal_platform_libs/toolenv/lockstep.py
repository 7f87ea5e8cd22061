"""The lock-step episode loop of tool environments: every episode of a chunk advances one agent message per
round, and each round's messages are generated in one engine call (which is what batches generation).

An environment subclasses :class:`LockstepEpisode` with what happens in one of its episodes (how it begins,
how it reacts to an agent message, how it is scored, what it closes) and calls :func:`play_lockstep` with a
factory of its episodes; an environment whose user turns are scripted in the task subclasses
:class:`ScriptedEpisode`, which keeps the turn bookkeeping. The loop is written here once::

    for each chunk of the episodes (all of them when ``chunk`` is None):
        make every episode of the chunk (the factory: prompt, and what starts at once, e.g. server processes)
        ep.begin() for each                       # a failure here loses that episode only
        until every episode is done:              # one engine call per round
            the active episodes' messages -> engine.generate -> one assistant message each
            a prompt over the context: ep.context_limit(); otherwise ep.react(text)
        ep.wrap_up() for each episode still alive (e.g. record the final state)
        ep.close() for every episode (always, also on an error)
        ep.score() for each episode still alive (its verdicts and reward)

An :class:`~seal_platform.infra.InfraError` raised by ``begin``, ``react`` or ``score`` (a server that failed,
not the agent) makes that episode an infrastructure failure (:func:`seal_platform.infra.failed_trajectory`:
never diagnosed, its group masked out of the update); the others go on. Anything else propagates (after
every episode of the chunk is closed). Trajectories come back in the order of the episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from seal_platform.infra import InfraError, failed_trajectory
from seal_platform.types import Interface, Message, SamplingParams, Task, Trajectory

from .episodes import Episode


@dataclass
class LockstepEpisode:
    """One episode of the lock-step loop: its task, its trajectory (the record the loop returns), the
    conversation so far and the interface revision it is played under. Subclasses add their own state (as dataclass
    fields with defaults) and implement :meth:`react`; the other steps default to doing nothing."""

    task: Task
    traj: Trajectory
    messages: list[Message]
    interface: Interface
    done: bool = False

    def begin(self) -> None:
        """Before the first round (e.g. open the episode's session, add the first user turn)."""

    def react(self, text: str) -> None:
        """Apply the agent's message ``text`` (already appended to ``messages``): run its calls, answer, and
        set ``done`` when the episode ends. Model text is untrusted: nothing it says may raise out of here
        (an :class:`InfraError` is the infrastructure's failure, not the agent's)."""
        raise NotImplementedError

    def context_limit(self) -> None:
        """The conversation no longer fits the engine's context: the episode ends here."""
        self.traj.finish = "context_limit"
        self.done = True

    def wrap_up(self) -> None:
        """After the last round, before :meth:`close`, for an episode that was not lost (e.g. record the
        environment's final state)."""

    def close(self) -> None:
        """Release what the episode holds; called once it is lost, and for every episode at the end (so it
        must be safe to call twice)."""

    def score(self) -> None:
        """Fill ``traj``'s verdicts and reward (``traj.messages`` is set already)."""
        raise NotImplementedError


@dataclass
class ScriptedEpisode(LockstepEpisode):
    """An episode whose user turns are scripted in its task (``task.payload["turns"][i]["user"]``): the first
    one is added at :meth:`begin`; a subclass calls :meth:`end_turn` when the agent is done with a turn, which
    adds the next one or ends the episode after the last. ``attempts`` counts the agent's messages in the
    current turn (the subclass increments it in :meth:`react`). :meth:`turn_ended` is the hook for what runs
    between two turns (e.g. the turn's checks)."""

    turn: int = 0
    attempts: int = 0

    def begin(self) -> None:
        self.start_turn()

    def start_turn(self) -> None:
        self.messages.append(Message(role="user", content=self.task.payload["turns"][self.turn]["user"]))
        self.attempts = 0

    def end_turn(self) -> None:
        self.turn_ended()
        self.turn += 1
        if self.turn >= len(self.task.payload["turns"]):
            self.done = True
        else:
            self.start_turn()

    def turn_ended(self) -> None:
        """After the agent's last message of turn ``turn``, before the next turn begins."""


E = TypeVar("E", bound=LockstepEpisode)


def new_trajectory(task: Task, group: str, sample: int, interface: Interface) -> Trajectory:
    """The empty record of an episode played under ``interface``."""
    return Trajectory(task_id=task.id, category=task.category, group=group, sample=sample,
                      interface_revision=interface.revision)


def play_lockstep(engine: Any, episodes: Sequence[Episode], interface: Interface, sampling: SamplingParams,
                  make: Callable[[Task, Trajectory], E], chunk: int | None = None) -> list[Trajectory]:
    """Play ``(task, group, sample)`` episodes in lock step, ``chunk`` at a time (None: all at once), and score
    them; ``make(task, trajectory)`` builds one episode (see the module doc)."""
    size = chunk or max(len(episodes), 1)
    out: list[Trajectory] = []
    for start in range(0, len(episodes), size):
        out += _play_chunk(engine, episodes[start:start + size], interface, sampling, make)
    return out


def _lost(ep: LockstepEpisode, reason: str) -> Trajectory:
    ep.close()
    ep.done = True
    return failed_trajectory(ep.task, ep.traj.group, ep.traj.sample, reason, ep.traj.interface_revision)


def _play_chunk(engine: Any, episodes: Sequence[Episode], interface: Interface, sampling: SamplingParams,
                make: Callable[[Task, Trajectory], E]) -> list[Trajectory]:
    eps: list[LockstepEpisode] = []
    lost: dict[int, Trajectory] = {}  # id(episode) -> its infrastructure failure
    try:
        for task, group, sample in episodes:  # every episode made (and what it starts, started) first
            eps.append(make(task, new_trajectory(task, group, sample, interface)))
        for ep in eps:
            try:
                ep.begin()
            except InfraError as exc:
                lost[id(ep)] = _lost(ep, str(exc))
        while True:
            active = [ep for ep in eps if not ep.done]
            if not active:
                break
            generations = engine.generate([ep.messages for ep in active], sampling)
            for ep, gen in zip(active, generations):
                ep.messages.append(Message.from_generation(gen))
                if gen.finish_reason == "prompt_too_long":
                    ep.context_limit()
                    continue
                try:
                    ep.react(gen.text)
                except InfraError as exc:
                    lost[id(ep)] = _lost(ep, str(exc))
        for ep in eps:
            if id(ep) not in lost:
                ep.wrap_up()
    finally:
        for ep in eps:
            ep.close()
    out = []
    for ep in eps:
        if id(ep) in lost:
            out.append(lost[id(ep)])
            continue
        ep.traj.messages = ep.messages
        try:
            ep.score()
        except InfraError as exc:
            out.append(failed_trajectory(ep.task, ep.traj.group, ep.traj.sample, str(exc),
                                         ep.traj.interface_revision))
            continue
        out.append(ep.traj)
    return out
