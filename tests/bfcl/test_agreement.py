"""Our verifier agrees with bfcl_eval's multi_turn_checker: verdict and error type, on every case.

Cases: the 800 ground-truth answers (4 categories x 200) and 2,400 deterministic perturbations of them
(dropped, duplicated, swapped, moved, altered and spurious calls, emptied turns, keyword -> positional
arguments, wrong turn counts). The official checker runs with a never-reused model name per check and its
cached instances are deleted afterwards (see official_cases.official_verdict).
"""

from __future__ import annotations

import collections
import random

import pytest
from official_cases import PERTURBATION_KINDS, agreement_cases, official_verdict

from seal_platform_plugins.bfcl.verifier import verify

PER_TASK = 3
SEED = 20260323

# The official verdicts of the 3,200 cases take ~25 s to compute: one worker computes them once for the module
# (`make test` distributes by group) instead of every worker that draws one of these tests computing its own.
pytestmark = pytest.mark.xdist_group("bfcl_agreement")


@pytest.fixture(scope="module")
def cases(all_tasks):
    return agreement_cases([task.payload for task in all_tasks], per_task=PER_TASK, seed=SEED)


@pytest.fixture(scope="module")
def official(cases):
    official_verdict(cases[0][0], cases[0][1])  # takes the long-context snapshot before any check
    return [official_verdict(entry, turns) for entry, turns, _ in cases]


def _ours(task_by_id, entry, turns):
    outcome = verify(task_by_id[entry["id"]], turns)
    return outcome.success, outcome.error_type


def test_case_set_is_systematic(cases):
    kinds = collections.Counter(kind for _, _, kind in cases)
    assert kinds["ground_truth"] == 800
    assert sum(kinds.values()) - 800 >= 2000
    assert all(kinds[kind] >= 200 for kind in PERTURBATION_KINDS)
    # Deterministic: the same seed gives the same cases.
    again = agreement_cases([entry for entry, _, kind in cases if kind == "ground_truth"], PER_TASK, SEED)
    assert [turns for _, turns, _ in again] == [turns for _, turns, _ in cases]


def test_ground_truth_passes_both(cases, official, task_by_id):
    for (entry, turns, kind), theirs in zip(cases, official):
        if kind == "ground_truth":
            assert theirs == (True, None), entry["id"]
            assert _ours(task_by_id, entry, turns) == (True, None), entry["id"]


def test_full_agreement(cases, official, task_by_id):
    mismatches = []
    for (entry, turns, kind), theirs in zip(cases, official):
        ours = _ours(task_by_id, entry, turns)
        if ours != theirs:
            mismatches.append((entry["id"], kind, ours, theirs))
    assert not mismatches, mismatches[:10]
    verdicts = collections.Counter(theirs for theirs in official)
    # The perturbations exercise every failure mode, not just one.
    for error_type in (
        "multi_turn:empty_turn_model_response",
        "multi_turn:instance_state_mismatch",
        "multi_turn:execution_response_mismatch",
        "multi_turn:force_terminated",
    ):
        assert verdicts[(False, error_type)] >= 50, verdicts
    assert not any(str(kind).startswith("raised") for _, kind in verdicts)


def test_every_trace_fits_the_checks_schema(cases, task_by_id):
    """The checker builds each turn's checks without validating them (its hot path): on every case, each
    stored ``checks`` must still be exactly what TurnChecks validates and dumps, fields in CHECK_KEYS order."""
    from seal_platform_plugins.bfcl.trace import CHECK_KEYS, TurnChecks

    for entry, turns, kind in cases:
        for verdict in verify(task_by_id[entry["id"]], turns).turns:
            assert tuple(verdict.checks) == CHECK_KEYS, (entry["id"], kind)
            assert TurnChecks.model_validate(verdict.checks).model_dump() == verdict.checks, (entry["id"], kind)


def test_any_order_gives_the_same_verdicts(cases, official, task_by_id):
    order = list(range(len(cases)))
    random.Random(7).shuffle(order)
    for index in order:
        entry, turns, _ = cases[index]
        assert _ours(task_by_id, entry, turns) == official[index]
    # The official checker too, once each check has a fresh namespace (a sample, in a new order).
    for index in order[:300]:
        entry, turns, _ = cases[index]
        assert official_verdict(entry, turns) == official[index]


def test_worker_process_path_agrees(cases, official, task_by_id, executor):
    from seal_platform_libs.toolenv.calls import parse_call

    sample = random.Random(3).sample(range(len(cases)), 120)
    for index in sample:
        entry, turns, _ = cases[index]
        outcome = executor.verify(task_by_id[entry["id"]], [[parse_call(c) for c in turn] for turn in turns])
        assert (outcome.success, outcome.error_type) == official[index]


def test_long_context_objects_shared_within_a_check_like_the_official(task_by_id):
    # TravelAPI's long-context credit cards are module-level dicts both official instance sets share: an
    # insurance bought on one by the model also shows in the ground truth's state, so this passes there.
    task = task_by_id["multi_turn_long_context_150"]
    token = task.payload["initial_config"]["TravelAPI"]["access_token"]
    turns = [list(turn) for turn in task.payload["ground_truth"]]
    turns[-1].append(
        f"purchase_insurance(access_token='{token}', insurance_type='basic', booking_id='booking_902', "
        "insurance_cost=10.0, card_id='1234567812345678')"
    )
    theirs = official_verdict(task.payload, turns)
    assert _ours(task_by_id, task.payload, turns) == theirs
    # ... and nothing leaks into the next check: the same transcript, checked again, gets the same verdict.
    assert _ours(task_by_id, task.payload, turns) == theirs
    # With the card bought on in a non-final turn but the GT turn left out, state still differs by the
    # booking side only where the official says so.
    turns[0].append(turns[-1].pop())
    assert _ours(task_by_id, task.payload, turns) == official_verdict(task.payload, turns)


def _parsed(turns):
    from seal_platform_libs.toolenv.calls import parse_call

    return [[parse_call(call) for call in turn] for turn in turns]


def test_a_group_replays_the_ground_truth_once_and_gives_each_transcript_its_own_outcome(cases, task_by_id):
    """verify_group (``seal-platform verify``'s path for the records of one task) replays the ground truth once,
    in lockstep with every transcript: each outcome, per-turn trace included, equals verify_payload's for that
    transcript alone, on every case -- the cases of a task grouped as they come, and in a shuffled mix."""
    from seal_platform_plugins.bfcl.checker import verify_group, verify_payload

    by_task = collections.defaultdict(list)
    for index, (entry, _, _) in enumerate(cases):
        by_task[entry["id"]].append(index)
    alone = [verify_payload(entry, _parsed(turns)).to_json() for entry, turns, _ in cases]
    rng = random.Random(11)
    for task_id, indices in by_task.items():
        order = indices + rng.sample(indices, len(indices))  # each transcript twice, in another order
        together = verify_group(task_by_id[task_id].payload, [_parsed(cases[i][1]) for i in order])
        assert [outcome.to_json() for outcome in together] == [alone[i] for i in order], task_id


def test_transcripts_that_follow_the_ground_truth_and_then_leave_it_get_their_own_outcomes(all_tasks):
    """In a group, a transcript runs on the ground truth's instances while its calls are the ground truth's, and
    gets its own instance set, brought to the same state, at its first different turn: for every turn at which
    it can leave (a call dropped, or one more of the turn's calls), its outcome, per-turn trace included, equals
    verify_payload's alone -- beside the ground truth itself and a transcript that stops early, and in a group
    of its own."""
    from seal_platform_plugins.bfcl.checker import verify_group, verify_payload

    rng = random.Random(5)
    tasks = [task for task in all_tasks if "long_context" not in task.id and "composite" not in task.id]
    left = 0
    for task in rng.sample(tasks, 40):
        truth = [list(turn) for turn in task.payload["ground_truth"]]
        transcripts = [truth, truth[:-1]]
        for k, turn in enumerate(truth):
            if turn:
                transcripts.append(truth[:k] + [turn[:-1]] + truth[k + 1:])
                transcripts.append(truth[:k] + [turn + turn[-1:]] + truth[k + 1:])
                left += 2
        alone = [verify_payload(task.payload, _parsed(turns)).to_json() for turns in transcripts]
        together = verify_group(task.payload, [_parsed(turns) for turns in transcripts])
        assert [o.to_json() for o in together] == alone, task.id
        # A group of one: the transcript follows the ground truth's instances as far as it can, on its own.
        assert [verify_group(task.payload, [_parsed(turns)])[0].to_json() for turns in transcripts] == alone, task.id
    assert left > 200


def test_in_a_task_whose_sides_share_objects_a_transcript_that_changes_one_is_verified_alone(task_by_id):
    """Where the model's and the ground truth's instances share long-context objects, a model call can change
    the ground truth's state. Officially, an insurance the model buys on a shared credit card shows on both
    sides, so the transcript passes; a ground truth replayed apart from it would not have it, and would fail
    it. In a group, the transcript whose call changed a shared object is verified alone (linked, as
    officially); the others, which change none, share the one ground-truth replay."""
    from seal_platform_plugins.bfcl.checker import verify_group, verify_payload

    task = task_by_id["multi_turn_long_context_150"]
    token = task.payload["initial_config"]["TravelAPI"]["access_token"]
    buys = [list(turn) for turn in task.payload["ground_truth"]]
    buys[0].append(
        f"purchase_insurance(access_token='{token}', insurance_type='basic', booking_id='booking_902', "
        "insurance_cost=10.0, card_id='1234567812345678')"
    )
    plain = [list(turn) for turn in task.payload["ground_truth"]]
    transcripts = [buys, plain, buys]
    together = verify_group(task.payload, [_parsed(turns) for turns in transcripts])
    assert [(o.success, o.error_type) for o in together] == [official_verdict(task.payload, t) for t in transcripts]
    assert [o.success for o in together] == [True, True, True]
    assert [o.to_json() for o in together] == [verify_payload(task.payload, _parsed(t)).to_json() for t in transcripts]
