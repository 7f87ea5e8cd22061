"""Verifier semantics and trace shape (agreement with the official checker is in test_agreement.py)."""

from __future__ import annotations

import json

import pytest

from seal_platform_libs.toolenv.calls import from_arguments, parse_call
from seal_platform_plugins.bfcl.trace import CHECK_KEYS, ERROR_PREFIX, TurnChecks, VerifyOutcome, is_error_result
from seal_platform_plugins.bfcl.verifier import reference_labels, verify, verify_record

TASK = "multi_turn_miss_func_0"  # five turns; turn 2 has an empty ground truth


def _gt(task):
    return [list(turn) for turn in task.payload["ground_truth"]]


def test_ground_truth_passes_with_a_full_trace(task_by_id):
    task = task_by_id[TASK]
    outcome = verify(task, _gt(task))
    assert outcome.success and outcome.error_type is None and outcome.turn_count_ok
    assert len(outcome.turns) == len(task.payload["ground_truth"])
    for index, verdict in enumerate(outcome.turns):
        assert verdict.turn == index and verdict.passed and verdict.reached
        assert set(CHECK_KEYS) <= set(verdict.checks)
        assert verdict.checks["gt_calls"] == task.payload["ground_truth"][index]
        assert verdict.checks["model_calls"] == task.payload["ground_truth"][index]
        assert verdict.checks["state_ok"] and verdict.checks["response_ok"] and verdict.checks["instance_ok"]
        json.dumps(verdict.checks)  # JSON-able
    assert outcome.turns[2].checks["empty_gt"] and outcome.turns[2].checks["empty_model"]
    assert reference_labels(outcome) == ["pass", "pass", "correct_abstention", "pass", "pass"]


def test_checks_are_a_typed_model_stored_as_its_dict(task_by_id):
    """Every turn's checks validate as TurnChecks and are stored as its dump, fields in CHECK_KEYS order; a
    reader's view of a stored trace keeps what it holds, defaults what it lacks and drops unknown keys."""
    task = task_by_id[TASK]
    broken = _gt(task)
    broken[1] = []  # an empty model turn, then unreached turns
    for outcome in (verify(task, _gt(task)), verify(task, broken), verify(task, _gt(task)[:2])):
        for verdict in outcome.turns:
            assert tuple(verdict.checks) == CHECK_KEYS
            assert TurnChecks.model_validate(verdict.checks).model_dump() == verdict.checks
    view = TurnChecks.view({"state_ok": "not a bool", "surprise": 1})
    assert view.state_ok == "not a bool" and view.gt_calls == [] and view.empty_gt is None
    assert not hasattr(view, "surprise")


def test_structured_and_string_calls_give_the_same_verdict(all_tasks):
    keyword_only = [
        t for t in all_tasks if all(not parse_call(c).args for turn in t.payload["ground_truth"] for c in turn)
    ]
    for task in keyword_only[::40]:
        structured = [[from_arguments(parse_call(c).name, parse_call(c).kwargs) for c in turn] for turn in _gt(task)]
        ours, theirs = verify(task, structured), verify(task, _gt(task))
        assert ours.success and theirs.success
        assert [t.checks["model_results"] for t in ours.turns] == [t.checks["model_results"] for t in theirs.turns]


def test_fewer_turns_fail_and_mark_unreached(task_by_id):
    task = task_by_id[TASK]
    outcome = verify(task, _gt(task)[:3])
    assert not outcome.success and outcome.error_type == "multi_turn:force_terminated"
    assert [t.reached for t in outcome.turns] == [True, True, True, False, False]
    assert [t.passed for t in outcome.turns] == [True, True, True, False, False]
    assert outcome.turns[3].checks["model_calls"] == [] and outcome.turns[3].checks["gt_calls"]
    assert reference_labels(outcome)[3:] == ["unreached_turn", "unreached_turn"]
    longer = verify(task, _gt(task) + [[]])
    assert not longer.success and longer.error_type == "multi_turn:force_terminated"


def test_empty_model_turn_on_a_non_empty_gt_turn(task_by_id):
    task = task_by_id[TASK]
    turns = _gt(task)
    turns[1] = []
    outcome = verify(task, turns)
    assert not outcome.success and outcome.error_type == "multi_turn:empty_turn_model_response"
    assert outcome.error_message == "Model response list is empty for turn 1"
    assert reference_labels(outcome)[1] == "empty_turn_model_response"


def test_spurious_call_in_an_empty_gt_turn_passes_but_its_state_carries(task_by_id):
    task = task_by_id[TASK]
    turns = _gt(task)
    turns[2] = ["pwd()"]  # harmless: the turn passes (official semantics)
    outcome = verify(task, turns)
    assert outcome.success and reference_labels(outcome)[2] == "spurious_tool_call"
    turns[2] = ["mkdir(dir_name='surprise')"]  # changes state: a later turn fails the state check
    outcome = verify(task, turns)
    assert outcome.turns[2].passed and not outcome.success
    assert outcome.error_type == "multi_turn:instance_state_mismatch"
    assert outcome.turns[3].checks["state_diff"] == {"GorillaFileSystem": ["root"]}
    assert reference_labels(outcome)[3] == "state_mismatch"


def test_response_check_counts_results_of_earlier_turns(task_by_id):
    task = task_by_id["multi_turn_base_0"]
    turns = _gt(task)
    turns[1] = [c for c in turns[1] if not c.startswith("grep(")]  # drop a read-only call
    outcome = verify(task, turns)
    assert outcome.error_type == "multi_turn:execution_response_mismatch"
    checks = outcome.turns[1].checks
    assert checks["state_ok"] and not checks["response_ok"] and len(checks["missing_results"]) == 1
    assert reference_labels(outcome)[1] == "response_mismatch"
    # A result the model already produced in an earlier turn counts for a later one.
    task = task_by_id["multi_turn_base_2"]
    turns = _gt(task)
    assert turns[2] == ["diff(file_name1='ideas.txt', file_name2='TeamNotes.txt')"]
    turns[1] = turns[1] + turns[2]
    turns[2] = ["pwd()"]
    assert verify(task, turns).success


def test_model_errors_and_rejections_are_traced(task_by_id):
    task = task_by_id["multi_turn_base_0"]
    turns = _gt(task)
    turns[0] = ["cd(folder='nowhere')", "cd(bogus=1)", "open('x')", "cd(folder=x)"] + turns[0]
    outcome = verify(task, turns)
    checks = outcome.turns[0].checks
    assert checks["model_error_calls"] == [0, 1, 2, 3]
    assert checks["rejected_calls"] == [1, 2, 3]
    assert (
        checks["model_errors"][1] == ERROR_PREFIX + "GorillaFileSystem.cd() got an unexpected keyword argument 'bogus'"
    )
    assert checks["model_errors"][2] == ERROR_PREFIX + "name 'open' is not defined"
    assert outcome.success  # failed calls change nothing here


def test_is_error_result():
    assert is_error_result(ERROR_PREFIX + "boom")
    assert is_error_result('{"error": "cd: no such dir"}')
    assert not is_error_result('{"result": 3}')
    assert not is_error_result('{"errors_seen": 0}')
    assert not is_error_result("plain text")


def test_outcome_json_round_trip(task_by_id):
    task = task_by_id[TASK]
    turns = _gt(task)
    turns[0] = turns[0][:1]
    outcome = verify(task, turns)
    again = VerifyOutcome.from_json(json.loads(json.dumps(outcome.to_json())))
    assert again == outcome


def test_verify_record_output_and_labels(task_by_id):
    task = task_by_id[TASK]
    record = {"task_id": TASK, "turns": _gt(task)}
    assert verify_record(record) == {
        "task_id": TASK,
        "success": True,
        "labels": ["pass", "pass", "correct_abstention", "pass", "pass"],
    }
    record["turns"][0] = []
    out = verify_record(record, label_turns=lambda task, outcome: [f"t{v.turn}" for v in outcome.turns])
    assert out["success"] is False and out["labels"] == ["t0", "t1", "t2", "t3", "t4"]
    # Garbage calls are the model's problem, not a bad record.
    out = verify_record({"task_id": TASK, "turns": [["not a call ("]] * 5})
    assert out["success"] is False and out["labels"][0] == "state_mismatch"


def test_verify_record_with_an_executor(executor, task_by_id):
    task = task_by_id[TASK]
    out = verify_record({"task_id": TASK, "turns": _gt(task)}, executor=executor)
    assert out["success"] is True


@pytest.mark.parametrize(
    "record, message",
    [
        ([], "JSON object"),
        ({"turns": []}, "task_id"),
        ({"task_id": "multi_turn_base_0"}, "turns"),
        ({"task_id": "multi_turn_base_0", "turns": "cd()"}, "turns"),
        ({"task_id": "multi_turn_base_0", "turns": [[1]]}, "strings"),
        ({"task_id": "multi_turn_nope_1", "turns": []}, "multi-turn category"),
        ({"task_id": "multi_turn_base_9999", "turns": []}, "multi_turn_base_9999"),
    ],
)
def test_bad_records_raise_value_error(record, message):
    with pytest.raises(ValueError, match=message):
        verify_record(record)


def test_replaying_the_same_parsed_calls_is_independent(task_by_id):
    from seal_platform_plugins.bfcl.backend import Backend

    task = task_by_id["multi_turn_base_4"]  # TwitterAPI, already authenticated
    backend = Backend.for_payload(task.payload)
    call = parse_call("post_tweet(content='hi', tags=['#a'], mentions=[])")
    assert '"tags": ["#a"]' in backend.execute(call)[0]
    call.kwargs["tags"].append("#changed")  # the caller's objects are not the backend's
    tweets = backend.instances["TwitterAPI"].tweets
    assert list(tweets.values())[-1]["tags"] == ["#a"]
    # And verifying the same parsed transcript twice gives the same outcome.
    turns = [[parse_call(c) for c in turn] for turn in _gt(task)]
    turns[0].append(parse_call("post_tweet(content='x', tags=['#t'], mentions=['@m'])"))
    assert verify(task, turns).to_json() == verify(task, turns).to_json()
