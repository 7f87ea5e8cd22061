"""The mcp diagnoser: one label per ground-truth turn, in BFCL's taxonomy (finer labels with the reference
label each refines). The first rule that fires wins:

========================= ================================================= ============================
label                     when                                              reference label
========================= ================================================= ============================
pass                      the turn passed                                   pass
unreached_turn            the episode ended before the turn                 unreached_turn
invalid_tool_call         nothing ran; a message did not parse or named an   empty_turn_model_response
                          unknown tool
recovery_failure          a call failed (schema or server error) and the     instance_mismatch / state_mismatch
                          turn was not put right
empty_turn_model_response no call at all                                    empty_turn_model_response
answer_mismatch           the calls passed their checks, the final answer   state_mismatch
                          (answer_contains/answer_equals) did not
missing_tool_call         a ground-truth tool was never called              state_mismatch
argument_mismatch         the right tools with other arguments              state_mismatch
state_mismatch            anything else                                     state_mismatch
========================= ================================================= ============================
"""

from __future__ import annotations

from collections.abc import Iterable

from seal_platform.labels import UNREACHED_LABEL
from seal_platform.types import ToolCall, Trajectory, TurnLabel, TurnVerdict

SOURCE = "mcp"
LABELS = ("pass", UNREACHED_LABEL, "invalid_tool_call", "recovery_failure", "empty_turn_model_response",
          "answer_mismatch", "missing_tool_call", "argument_mismatch", "state_mismatch")
REFERENCE = {"invalid_tool_call": ("empty_turn_model_response",),
             "recovery_failure": ("instance_mismatch", "state_mismatch"),
             "missing_tool_call": ("state_mismatch",), "argument_mismatch": ("state_mismatch",),
             "answer_mismatch": ("state_mismatch",)}
MEANINGS = {
    "pass": "the turn passed its check",
    UNREACHED_LABEL: "the episode ended before the turn",
    "invalid_tool_call": "nothing ran: a message did not parse or named an unknown tool",
    "recovery_failure": "a call failed (rejected by the schema or an error from the server) and was not put right",
    "empty_turn_model_response": "the agent made no tool call",
    "answer_mismatch": "the calls were right, the final answer was not",
    "missing_tool_call": "a ground-truth tool was never called",
    "argument_mismatch": "the right tools with other arguments",
    "state_mismatch": "the server's state differs from the ground truth's",
}


def _subset(gt: dict, made: dict) -> bool:
    return all(made.get(k) == v for k, v in gt.items())


def label_turn(verdict: TurnVerdict, calls: list[ToolCall]) -> tuple[str, str, str]:
    if verdict.passed:
        return "pass", "pass", "the turn passed its check"
    if not verdict.reached:
        return UNREACHED_LABEL, UNREACHED_LABEL, "the episode ended before this turn"
    ran = [c for c in calls if c.result is not None]
    failed = [c for c in calls if c.error]
    if not ran:
        if any(c.rejected for c in calls):
            return (
                "invalid_tool_call",
                "empty_turn_model_response",
                "no call ran: " + next(c.rejected for c in calls if c.rejected),
            )
        if failed:
            return "recovery_failure", "instance_mismatch", "every call failed: " + (failed[-1].error or "")[:200]
        return "empty_turn_model_response", "empty_turn_model_response", "the agent made no tool call"
    if failed and calls[-1].error:
        return "recovery_failure", "state_mismatch", "the last call failed: " + (calls[-1].error or "")[:200]
    kinds = verdict.checks.get("kinds") or {}
    if kinds.get("answer") is False and all(ok for kind, ok in kinds.items() if kind != "answer"):
        said = verdict.checks.get("answer")
        return "answer_mismatch", "state_mismatch", ("the final answer did not pass its check" if said is not None
                                                     else "the agent never gave a final answer")
    gt = verdict.checks.get("gt_calls", [])
    names = {c.name for c in ran}
    missing = [g["name"] for g in gt if g["name"] not in names]
    if missing:
        return "missing_tool_call", "state_mismatch", f"{', '.join(missing)} was never called"
    if any(not any(c.name == g["name"] and _subset(g["arguments"], c.arguments) for c in ran) for g in gt):
        return "argument_mismatch", "state_mismatch", "the right tool with other arguments"
    return "state_mismatch", "state_mismatch", "the check's results differ (an earlier mistake or an extra call)"


def diagnose(trajectories: Iterable[Trajectory], source: str = SOURCE) -> list[TurnLabel]:
    labels = []
    for traj in trajectories:
        if traj.infra_failure:
            continue
        for verdict in traj.turn_verdicts:
            calls = [c for c in traj.tool_calls if c.turn == verdict.turn]
            label, ref, why = label_turn(verdict, calls)
            labels.append(TurnLabel(trajectory_id=traj.id, turn=verdict.turn, label=label, source=source,
                                    rationale=why, reference_label=ref))
    return labels
