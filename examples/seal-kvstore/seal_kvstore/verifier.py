"""The verifier: replays the agent's executed calls and the ground truth on separate stores, turn by turn.

A turn passes when the two stores hold the same data after it (state check) and every result the ground
truth's calls produced in that turn is among the agent's results of that turn (response check). The episode's
reward is 1 when every turn passes. What it found per turn is a typed :class:`TurnCheck`, stored in
``TurnVerdict.checks`` and read back by the diagnoser with :meth:`TurnCheck.of`.
"""

from __future__ import annotations

from pydantic import BaseModel

from seal_platform.types import Task, TurnVerdict

from .tasks import Call, KVStore, ground_truth


class TurnCheck(BaseModel):
    """What the verifier found in one ground-truth turn."""

    state_ok: bool
    response_ok: bool
    executed: int  # the agent's calls that ran in this turn
    rejected: int  # the agent's messages in this turn whose call could not be parsed or named no tool
    expected: int  # ground-truth calls of the turn

    @classmethod
    def of(cls, verdict: TurnVerdict) -> TurnCheck:
        return cls.model_validate(verdict.checks)


def verify(task: Task, turns: list[list[Call]], rejected: list[int] | None = None) -> list[TurnVerdict]:
    """One verdict per ground-truth turn; turns the agent never reached (beyond ``turns``) fail unreached."""
    rejected = rejected or [0] * len(turns)
    agent, reference = KVStore(), KVStore()
    verdicts = []
    for index, expected in enumerate(ground_truth(task)):
        if index >= len(turns):
            check = TurnCheck(state_ok=False, response_ok=False, executed=0, rejected=0, expected=len(expected))
            verdicts.append(TurnVerdict(turn=index, passed=False, reached=False, checks=check.model_dump()))
            continue
        got = [agent.execute(call) for call in turns[index]]
        want = [reference.execute(call) for call in expected]
        check = TurnCheck(
            state_ok=agent.data == reference.data,
            response_ok=all(result in got for result in want if result != "ok"),
            executed=len(turns[index]), rejected=rejected[index], expected=len(expected),
        )
        verdicts.append(TurnVerdict(turn=index, passed=check.state_ok and check.response_ok, checks=check.model_dump()))
    return verdicts
