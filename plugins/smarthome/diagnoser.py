"""The smart-home diagnoser: one label per ground-truth turn, in BFCL's taxonomy (the reference labels and
the finer ones), each with the reference label A-Patch's base weights are keyed by. The first rule that
fires wins:

======================== ============================================================== ==========================
label                    when                                                           reference label
======================== ============================================================== ==========================
pass                     the turn passed                                                pass
unreached_turn           the episode ended before the turn                              unreached_turn
invalid_tool_call        nothing ran; a message did not parse or named an unknown tool  empty_turn_model_response
argument_mismatch        a call was refused for its arguments (missing, unexpected, not state_mismatch
                         an allowed value) and the turn was not put right; or the right
                         tool ran with other arguments
missing_tool_call        the ground truth's tool was never called                       state_mismatch
empty_turn_model_response no call at all                                                empty_turn_model_response
state_mismatch           anything else (the state was already wrong from an earlier
                         turn, or an extra call changed it)                             state_mismatch
======================== ============================================================== ==========================

The order follows the paper's Table 5: a call refused for a bad enum value or a missing argument is an
argument mismatch (constraint cues help it), not a recovery failure. ``recovery_failure`` is not emitted: every
error a smart-home tool returns is such a refusal (:func:`.tools.check_arguments`). Each label maps to ONE reference
label, so A-Patch's base weight of a label never depends on which turns came first.
"""

from __future__ import annotations

from collections.abc import Iterable

from seal_platform.labels import UNREACHED_LABEL
from seal_platform.types import ToolCall, Trajectory, TurnLabel, TurnVerdict

from .episode import TurnChecks

SOURCE = "smarthome"
LABELS = ("pass", UNREACHED_LABEL, "invalid_tool_call", "argument_mismatch", "empty_turn_model_response",
          "missing_tool_call", "state_mismatch")


def label_turn(verdict: TurnVerdict, calls: list[ToolCall]) -> tuple[str, str, str]:
    """(label, reference label, rationale) of one turn, from its verdict and the calls made in it."""
    if verdict.passed:
        return "pass", "pass", "the home's state matches the ground truth"
    if not verdict.reached:
        return UNREACHED_LABEL, UNREACHED_LABEL, "the episode ended before this turn"
    ran = [c for c in calls if c.result is not None]
    failed = [c for c in calls if c.error]
    if not ran and any(c.rejected for c in calls):
        return (
            "invalid_tool_call",
            "empty_turn_model_response",
            "no call ran: " + next(c.rejected for c in calls if c.rejected),
        )
    if failed and (not ran or calls[-1].error):
        # Every error a smart-home tool returns is a refusal of the call's arguments (tools.check_arguments).
        return (
            "argument_mismatch",
            "state_mismatch",
            "a call was refused for its arguments: " + (failed[-1].error or ""),
        )
    if not ran:
        return "empty_turn_model_response", "empty_turn_model_response", "the agent made no tool call"
    gt = TurnChecks.model_validate(verdict.checks).gt_calls
    names = {c.name for c in ran}
    missing = [g["name"] for g in gt if g["name"] not in names]
    if missing:
        return "missing_tool_call", "state_mismatch", f"{', '.join(missing)} was never called"
    made = [(c.name, c.arguments) for c in ran]
    if any((g["name"], g["arguments"]) not in made for g in gt):
        return "argument_mismatch", "state_mismatch", "the right tool with other arguments"
    return "state_mismatch", "state_mismatch", "the state differs (an earlier turn's mistake or an extra call)"


def diagnose(trajectories: Iterable[Trajectory], source: str = SOURCE) -> list[TurnLabel]:
    labels = []
    for traj in trajectories:
        for verdict in traj.turn_verdicts:
            calls = [c for c in traj.tool_calls if c.turn == verdict.turn]
            label, ref, why = label_turn(verdict, calls)
            labels.append(TurnLabel(trajectory_id=traj.id, turn=verdict.turn, label=label, source=source,
                                    rationale=why, reference_label=ref))
    return labels
