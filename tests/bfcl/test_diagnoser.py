"""The heuristic diagnoser: one label per ground-truth turn, a hand-built trajectory per label."""

from __future__ import annotations

from typing import Any

import pytest

from seal_platform.labels import EXCLUDED_LABELS
from seal_platform.types import ToolCall, Trajectory, TurnVerdict
from seal_platform_plugins.bfcl import diagnoser
from seal_platform_plugins.bfcl.diagnoser import ALL_LABELS, REFERENCE_LABELS, label_turns


def verdict(turn: int = 0, passed: bool = False, reached: bool = True, **checks: Any) -> TurnVerdict:
    """A verdict shaped like the verifier's trace, all checks passing unless overridden."""
    base: dict[str, Any] = {
        "gt_calls": ["cd(folder='docs')", "mkdir(dir_name='temp')"],
        "model_calls": [],
        "gt_results": [],
        "model_results": [],
        "gt_error": None,
        "model_errors": [],
        "model_error_calls": [],
        "rejected_calls": [],
        "empty_gt": False,
        "empty_model": True,
        "instance_ok": True,
        "state_ok": True,
        "response_ok": True,
        "checker_error": None,
    }
    base.update(checks)
    if "empty_gt" not in checks:
        base["empty_gt"] = not base["gt_calls"]
    if "empty_model" not in checks:
        base["empty_model"] = not base["model_calls"]
    return TurnVerdict(turn=turn, passed=passed, reached=reached, checks=base)


def call(name: str, turn: int = 0, rejected: str | None = None, error: str | None = None, **arguments: Any) -> ToolCall:
    return ToolCall(turn=turn, name=name, arguments=arguments, rejected=rejected, error=error,
                    result=None if (error or rejected) else "{}")


def traj(verdicts: list[TurnVerdict], calls: list[ToolCall], reward: float = 0.0) -> Trajectory:
    return Trajectory(task_id="multi_turn_base_0", category="multi_turn_base", group="0:t", tool_calls=calls,
                      turn_verdicts=verdicts, reward=reward)


def only_label(v: TurnVerdict, calls: list[ToolCall]) -> tuple[str, str]:
    [lab] = diagnoser.diagnose([traj([v], calls)])
    assert lab.source == "bfcl" and lab.turn == v.turn and lab.rationale
    return lab.label, lab.reference_label


GOOD = [call("cd", folder="docs"), call("mkdir", dir_name="temp")]
GOOD_TEXT = ["cd(folder='docs')", "mkdir(dir_name='temp')"]


def test_gt_error_fires_first():
    v = verdict(gt_error="Error during execution: boom", model_calls=GOOD_TEXT, state_ok=False)
    assert only_label(v, GOOD) == ("gt_error", "gt_error")


def test_spurious_tool_call():
    v = verdict(gt_calls=[], model_calls=["ls()"], passed=True)
    assert only_label(v, [call("ls")]) == ("spurious_tool_call", "spurious_tool_call")


def test_correct_abstention():
    v = verdict(gt_calls=[], passed=True)
    assert only_label(v, []) == ("correct_abstention", "correct_abstention")


def test_empty_turn_model_response():
    assert only_label(verdict(), []) == ("empty_turn_model_response", "empty_turn_model_response")


def test_instance_mismatch():
    v = verdict(model_calls=GOOD_TEXT, instance_ok=False, state_ok=False)
    assert only_label(v, GOOD) == ("instance_mismatch", "instance_mismatch")


def test_checker_error():
    v = verdict(model_calls=GOOD_TEXT, checker_error="KeyError: 'root'")
    assert only_label(v, GOOD) == ("checker_error", "checker_error")


def test_state_mismatch_when_no_finer_cause_shows():
    # The turn's own calls equal the ground truth; the state differs because of an earlier turn.
    v = verdict(model_calls=GOOD_TEXT, state_ok=False)
    assert only_label(v, GOOD) == ("state_mismatch", "state_mismatch")


def test_response_mismatch_when_no_finer_cause_shows():
    v = verdict(model_calls=GOOD_TEXT, response_ok=False)
    assert only_label(v, GOOD) == ("response_mismatch", "response_mismatch")


def test_pass():
    v = verdict(model_calls=GOOD_TEXT, passed=True)
    assert only_label(v, GOOD) == ("pass", "pass")


def test_invalid_tool_call_refines_a_state_mismatch():
    calls = [call("rm", rejected="unknown tool 'rm'"), *GOOD[:1]]
    v = verdict(model_calls=GOOD_TEXT[:1], state_ok=False)
    assert only_label(v, calls) == ("invalid_tool_call", "state_mismatch")


def test_invalid_tool_call_when_every_attempt_was_rejected():
    # Only rejected messages: the agent made no call that ran, which the reference calls an empty turn.
    calls = [call("", rejected="Could not parse the tool call as JSON")]
    assert only_label(verdict(), calls) == ("invalid_tool_call", "empty_turn_model_response")


def test_invalid_tool_call_in_a_turn_that_needed_none():
    # miss_func before the reveal: reaching for a held-out tool is rejected; the turn itself passes.
    v = verdict(gt_calls=[], passed=True)
    assert only_label(v, [call("sort", rejected="unknown tool 'sort'")]) == ("invalid_tool_call", "correct_abstention")


def test_argument_mismatch():
    calls = [call("cd", folder="docs"), call("mkdir", dir_name="tmp")]
    v = verdict(model_calls=["cd(folder='docs')", "mkdir(dir_name='tmp')"], state_ok=False)
    assert only_label(v, calls) == ("argument_mismatch", "state_mismatch")


def test_argument_mismatch_binds_positional_ground_truth_arguments():
    # GT `sort('final_report.pdf')` equals a keyword call; only the other file name is a mismatch.
    gt = ["sort('final_report.pdf')"]
    same = verdict(gt_calls=gt, model_calls=["sort(file_name='final_report.pdf')"], response_ok=False)
    other = verdict(gt_calls=gt, model_calls=["sort(file_name='x.pdf')"], response_ok=False)
    assert only_label(same, [call("sort", file_name="final_report.pdf")])[0] == "response_mismatch"
    assert only_label(other, [call("sort", file_name="x.pdf")]) == ("argument_mismatch", "response_mismatch")


def test_missing_tool_call():
    v = verdict(model_calls=GOOD_TEXT[:1], state_ok=False)
    assert only_label(v, GOOD[:1]) == ("missing_tool_call", "state_mismatch")


def test_recovery_failure():
    calls = [call("cd", error="Error during execution: no such folder", folder="doc"), GOOD[1]]
    v = verdict(model_calls=["cd(folder='doc')", GOOD_TEXT[1]], state_ok=False, model_error_calls=[0])
    assert only_label(v, calls) == ("recovery_failure", "state_mismatch")


def test_recovery_failure_from_an_error_reply():
    # Some backends answer {"error": ...} instead of raising; that is a failed call too.
    failed = ToolCall(turn=0, name="cd", arguments={"folder": "doc"}, result='{"error": "No such folder"}')
    v = verdict(model_calls=["cd(folder='doc')", GOOD_TEXT[1]], state_ok=False)
    assert only_label(v, [failed, GOOD[1]]) == ("recovery_failure", "state_mismatch")


def test_a_recovered_error_is_not_a_recovery_failure():
    calls = [call("cd", error="Error during execution: no such folder", folder="doc"), *GOOD]
    v = verdict(model_calls=["cd(folder='doc')", *GOOD_TEXT], passed=True)
    assert only_label(v, calls) == ("pass", "pass")


def test_unreached_turn_is_not_an_abstention():
    # The reference labels turns after a forced stop correct_abstention; ours says what happened.
    for gt in ([], GOOD_TEXT):
        v = verdict(turn=3, reached=False, gt_calls=gt)
        assert only_label(v, []) == ("unreached_turn", "unreached_turn")
    assert "unreached_turn" in EXCLUDED_LABELS


def test_every_label_has_a_test_and_reference_labels_are_in_order():
    assert REFERENCE_LABELS == (
        "gt_error", "spurious_tool_call", "correct_abstention", "empty_turn_model_response", "instance_mismatch",
        "checker_error", "state_mismatch", "response_mismatch", "pass",
    )
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    for label in ALL_LABELS:
        assert any(t.startswith(label) for t in tested), label


def test_the_reference_labels_are_the_cores_less_unreached_turn():
    # Derived from the one list (seal_platform.labels): the rules compute all of them but unreached_turn, which
    # the diagnoser gives an unreached turn before any rule runs and lists after the finer labels.
    from seal_platform import labels as core

    assert REFERENCE_LABELS + ("unreached_turn",) == core.REFERENCE_LABELS
    assert ALL_LABELS[:len(REFERENCE_LABELS)] == REFERENCE_LABELS and ALL_LABELS[-1] == core.UNREACHED_LABEL
    assert set(core.REFERENCE_LABELS) <= set(ALL_LABELS)


def test_diagnose_labels_every_turn_of_every_trajectory_with_calls_routed_by_turn():
    verdicts = [
        verdict(turn=0, model_calls=GOOD_TEXT, passed=True),
        verdict(turn=1, gt_calls=[], passed=True),
        verdict(turn=2, model_calls=GOOD_TEXT[:1], state_ok=False),
        verdict(turn=3, reached=False),
    ]
    calls = [*GOOD, call("cd", turn=2, folder="docs"), call("rm", turn=1, rejected="unknown tool 'rm'")]
    first = traj(verdicts, calls)
    second = traj([verdict(turn=0, gt_calls=[], passed=True)], [], reward=1.0)
    labels = diagnoser.diagnose([first, second])
    assert [(lab.trajectory_id, lab.turn, lab.label) for lab in labels] == [
        (first.id, 0, "pass"),
        (first.id, 1, "invalid_tool_call"),
        (first.id, 2, "missing_tool_call"),
        (first.id, 3, "unreached_turn"),
        (second.id, 0, "correct_abstention"),
    ]
    assert all(lab.reference_label in REFERENCE_LABELS + ("unreached_turn",) for lab in labels)


# --- label_turns: the verify command's labels, from the trace alone ------------------------------------


def test_label_turns_from_the_trace_alone():
    turns = [
        verdict(turn=0, model_calls=GOOD_TEXT, passed=True),
        verdict(turn=1, model_calls=["cd(folder='docs')", "rm(x=1)"], rejected_calls=[1], state_ok=False),
        verdict(turn=2, model_calls=["cd(folder='doc')", "mkdir(dir_name='temp')"], model_error_calls=[0],
                model_results=["Error during execution: no such folder", "None"], state_ok=False),
        verdict(turn=3, model_calls=["cd(folder='docs')", "mkdir(dir_name='x')"], response_ok=False),
        verdict(turn=4, reached=False),
    ]
    assert label_turns(turns) == [
        "pass",
        "invalid_tool_call",
        "recovery_failure",
        "argument_mismatch",
        "unreached_turn",
    ]
    # The dict form (what a JSON outcome holds) gives the same labels.
    assert label_turns([t.model_dump() for t in turns]) == label_turns(turns)


def test_label_turns_with_tool_calls_uses_them():
    turns = [verdict(turn=0, model_calls=GOOD_TEXT[:1], state_ok=False)]
    assert label_turns(turns, [call("x", rejected="unknown tool 'x'"), GOOD[0]]) == ["invalid_tool_call"]
    assert label_turns(turns, [GOOD[0]]) == ["missing_tool_call"]


@pytest.mark.parametrize("bad", ["cd(folder=open('x'))", "not a call", "__import__('os')"])
def test_unparseable_trace_calls_are_never_evaluated(bad):
    turns = [verdict(turn=0, model_calls=[bad], rejected_calls=[0], state_ok=False)]
    assert label_turns(turns) == ["invalid_tool_call"]
