"""The diagnoser: one label per ground-truth turn, from the verifier's :class:`TurnCheck`.

Reference labels (A-Patch's base weights apply to them directly): ``pass``, ``empty_turn_model_response``,
``state_mismatch``, ``response_mismatch``; ``unreached_turn`` for turns the episode never got to. The finer
label ``invalid_tool_call`` (a message in the turn whose call could not be parsed or named no tool) refines
whichever reference label the turn would otherwise get, and each TurnLabel names that one.
"""

from __future__ import annotations

from seal_platform.types import Trajectory, TurnLabel, TurnVerdict

from .verifier import TurnCheck

SOURCE = "kvstore"
MEANINGS = {
    "pass": "the store and the answers match the ground truth after the turn",
    "empty_turn_model_response": "the turn needed calls and the agent made none",
    "state_mismatch": "the store holds other data than the ground truth after the turn",
    "response_mismatch": "a result the user asked for is not among the agent's results",
    "invalid_tool_call": "a call in the turn could not be parsed or named no tool",
    "unreached_turn": "the episode ended before this turn",
}
REFINES = {"invalid_tool_call": ("empty_turn_model_response", "state_mismatch", "response_mismatch")}
LABELS = tuple(MEANINGS)


def reference_label(verdict: TurnVerdict) -> str:
    check = TurnCheck.of(verdict)
    if not verdict.reached:
        return "unreached_turn"
    if verdict.passed:
        return "pass"
    if check.executed == 0 and check.expected > 0:
        return "empty_turn_model_response"
    return "state_mismatch" if not check.state_ok else "response_mismatch"


def label_turn(trajectory: Trajectory, verdict: TurnVerdict) -> TurnLabel:
    reference = reference_label(verdict)
    check = TurnCheck.of(verdict)
    label = "invalid_tool_call" if check.rejected and reference not in ("pass", "unreached_turn") else reference
    why = f"{check.executed} call(s) ran, {check.rejected} rejected, {check.expected} expected"
    return TurnLabel(trajectory_id=trajectory.id, turn=verdict.turn, label=label, source=SOURCE, rationale=why,
                     reference_label=reference)


def diagnose(trajectories: list[Trajectory]) -> list[TurnLabel]:
    return [label_turn(t, v) for t in trajectories for v in t.turn_verdicts]
