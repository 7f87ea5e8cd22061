"""The openenv diagnoser: one label per agent message (a turn), from the episode's record. The first rule that
fires wins:

========================= =============================================== ===========================
label                     when                                            reference label
========================= =============================================== ===========================
pass                      the turn passed                                 pass
unreached_turn            the context ran out before the agent answered   unreached_turn
invalid_tool_call         the message did not parse, named another tool,  empty_turn_model_response
                          or made more than one call
empty_turn_model_response no call: the agent stopped acting               empty_turn_model_response
invalid_arguments         the arguments failed the action schema          instance_mismatch
action_refused            the environment refused the action              instance_mismatch
unrewarded_step           per_step: the step's reward is below the bar    state_mismatch
failed_episode            final: the step ran, the episode failed         state_mismatch
========================= =============================================== ===========================

``failed_episode`` is the heuristic's answer where the environment reports only a final reward: it cannot
tell which of the steps that ran was the wrong one, so every such step of a failed episode gets it.
"""

from __future__ import annotations

from collections.abc import Iterable

from seal_platform.labels import UNREACHED_LABEL
from seal_platform.types import Trajectory, TurnLabel, TurnVerdict

SOURCE = "openenv"
LABELS = ("pass", UNREACHED_LABEL, "invalid_tool_call", "empty_turn_model_response", "invalid_arguments",
          "action_refused", "unrewarded_step", "failed_episode")
REFERENCE = {"invalid_tool_call": ("empty_turn_model_response",), "invalid_arguments": ("instance_mismatch",),
             "action_refused": ("instance_mismatch",), "unrewarded_step": ("state_mismatch",),
             "failed_episode": ("state_mismatch",)}
MEANINGS = {
    "pass": "the turn passed (its step was rewarded, or the episode passed)",
    UNREACHED_LABEL: "the context ran out before the agent answered",
    "invalid_tool_call": "the message did not parse, named another tool, or made more than one call",
    "empty_turn_model_response": "the agent made no call (the episode ended there)",
    "invalid_arguments": "the action's arguments failed the action schema (it never reached the environment)",
    "action_refused": "the environment refused the action",
    "unrewarded_step": "the step ran and its reward is below step_threshold (per_step mode)",
    "failed_episode": "the step ran in an episode whose final reward is below success_threshold (final mode)",
}
_BY_KIND = {
    "context_limit": (UNREACHED_LABEL, UNREACHED_LABEL, "the context ran out before the agent answered"),
    "invalid_call": ("invalid_tool_call", "empty_turn_model_response", "the call was not usable"),
    "no_action": ("empty_turn_model_response", "empty_turn_model_response", "the agent made no call"),
    "invalid_arguments": ("invalid_arguments", "instance_mismatch", "the arguments failed the action schema"),
    "refused": ("action_refused", "instance_mismatch", "the environment refused the action"),
}


def label_turn(verdict: TurnVerdict) -> tuple[str, str, str]:
    checks = verdict.checks
    if verdict.passed:
        return "pass", "pass", "the turn passed"
    kind = checks.get("kind", "")
    if kind in _BY_KIND:
        label, ref, why = _BY_KIND[kind]
        return label, ref, f"{why}: {checks['error']}"[:300] if checks.get("error") else why
    if checks.get("reward_mode") == "per_step":
        return "unrewarded_step", "state_mismatch", f"the step's reward was {checks.get('reward')}"
    return "failed_episode", "state_mismatch", f"the episode's reward was {checks.get('episode_reward')}"


def diagnose(trajectories: Iterable[Trajectory], source: str = SOURCE) -> list[TurnLabel]:
    labels = []
    for traj in trajectories:
        if traj.infra_failure:
            continue
        for verdict in traj.turn_verdicts:
            label, ref, why = label_turn(verdict)
            labels.append(TurnLabel(trajectory_id=traj.id, turn=verdict.turn, label=label, source=source,
                                    rationale=why, reference_label=ref))
    return labels
