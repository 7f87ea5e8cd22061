"""The ground truth's run recorded once per task and replayed (plugins/bfcl/gt_replay.py): a replayed check
is the same as a fresh one, and tasks where it could differ are never replayed."""

from __future__ import annotations

import copy
import random

import pytest

from official_cases import agreement_cases
from seal_platform.toolenv.calls import parse_call, parse_call_shared
from seal_platform_plugins.bfcl import gt_replay
from seal_platform_plugins.bfcl.backend import Backend
from seal_platform_plugins.bfcl.checker import verify_payload


@pytest.fixture(autouse=True)
def _fresh_recordings():
    gt_replay.clear()
    yield
    gt_replay.clear()


@pytest.fixture(scope="module")
def cases(all_tasks):
    # The agreement test's cases: each task's ground truth and its 3 perturbations, one after another.
    return agreement_cases([task.payload for task in all_tasks], per_task=3, seed=20260323)


def _parsed(turns):
    return [[parse_call(text) for text in turn] for turn in turns]


def test_replayed_checks_equal_fresh_ones(cases):
    """Whole outcomes (verdict, error, every turn's trace) with and without replay, on all 3,200 cases, in
    the cases' order and again shuffled (a task's recording made by any of its transcripts)."""
    fresh = [verify_payload(entry, _parsed(turns)).to_json() for entry, turns, _ in cases]
    replayed = [verify_payload(entry, _parsed(turns), replay_ground_truth=True).to_json() for entry, turns, _ in cases]
    assert replayed == fresh
    used = [key for key, recording in gt_replay._recorded.items() if recording is not None]
    assert len(used) >= 450  # most base / miss_func / miss_param tasks are replayed, not just a few
    gt_replay.clear()
    order = list(range(len(cases)))
    random.Random(5).shuffle(order)
    for index in order[:800]:
        entry, turns, _ = cases[index]
        assert verify_payload(entry, _parsed(turns), replay_ground_truth=True).to_json() == fresh[index]


def test_recording_equals_a_fresh_run_of_the_ground_truth(all_tasks):
    """For every replayable task: per turn, the recorded results are a fresh run's and the recorded public
    state compares equal to the fresh instances' (type, attributes in order, values)."""
    replayable = [task.payload for task in all_tasks if gt_replay.replayable(task.payload)]
    assert len(replayable) >= 450
    for payload in replayable:
        recording = gt_replay.gt_replay(payload)
        assert recording is not None, payload["id"]
        backend = Backend.for_payload(payload)
        for index, turn in enumerate(payload["ground_truth"]):
            assert [backend.execute(parse_call_shared(text))[0] for text in turn] == recording.results[index]
            state = recording.states[index]
            assert [name for name, _, _ in state] == list(backend.instances), payload["id"]
            for name, gt_type, attrs in state:
                live = backend.instances[name]
                assert type(live) is gt_type
                public = [attr for attr in vars(live) if not attr.startswith("_")]
                assert [attr for attr, _ in attrs] == public
                assert all(getattr(live, attr) == value for attr, value in attrs), (payload["id"], index, name)
                # The recording is a copy: no object of it is the live instance's.
                assert all(getattr(live, attr) is not value for attr, value in attrs
                           if isinstance(value, (dict, list)) or hasattr(value, "__dict__"))


def test_tasks_that_could_differ_are_never_replayed(task_by_id):
    long_context = task_by_id["multi_turn_long_context_150"].payload
    assert not gt_replay.replayable(long_context)
    assert gt_replay.gt_replay(long_context) is None
    math = next(t.payload for t in task_by_id.values() if "MathAPI" in t.payload["involved_classes"]
                and "long_context" not in t.id)
    assert not gt_replay.replayable(math)
    clock = next(t.payload for t in task_by_id.values() if "long_context" not in t.id
                 and any("verify_traveler_information(" in call for turn in t.payload["ground_truth"] for call in turn))
    assert not gt_replay.replayable(clock)
    assert gt_replay.gt_replay(clock) is None


def test_a_state_that_does_not_copy_faithfully_is_not_replayed(task_by_id):
    """A nan in the state: a copy of it never equals the original (nor would a model's value compare with
    the copy as with the live state), so the task runs afresh each time -- and still gets its verdict."""
    payload = copy.deepcopy(next(t.payload for t in task_by_id.values() if t.payload["involved_classes"] == ["VehicleControlAPI"]
                                 and "long_context" not in t.id))
    assert gt_replay.replayable(payload)
    payload["initial_config"]["VehicleControlAPI"]["fuelLevel"] = float("nan")
    assert gt_replay.gt_replay(payload) is None
    turns = _parsed(payload["ground_truth"])
    assert verify_payload(payload, turns, replay_ground_truth=True).to_json() == verify_payload(payload, turns).to_json()


def test_a_recording_is_keyed_by_the_exact_ground_truth(task_by_id):
    payload = task_by_id["multi_turn_base_0"].payload
    first = gt_replay.gt_replay(payload)
    assert first is not None and gt_replay.gt_replay(payload) is first
    changed = copy.deepcopy(payload)
    changed["ground_truth"][0] = changed["ground_truth"][0][:-1]
    other = gt_replay.gt_replay(changed)
    assert other is not None and other is not first
    assert len(other.results[0]) == len(first.results[0]) - 1
