"""The capability state (seal_platform/capability.py) on hand-built label streams.

It lives in the core but the BFCL interface evolution is its main reader, so its semantics are pinned here:
``count`` counts labelled turns, ``trajectories``/``successes``/``reward_sum`` count trajectories once per
cell, positions split a dialogue in thirds, the window restarts with each epoch, totals never do, and the
whole state survives a JSON round trip (the run store keeps it as JSON and a resumed run reloads it).
"""

from __future__ import annotations

import json

import pytest

from seal_platform.capability import CapabilityState, CapabilityTables, turn_position
from seal_platform.types import Trajectory, TurnLabel, TurnVerdict


def traj(tid: str, task: str, category: str, reward: float, n_turns: int) -> Trajectory:
    return Trajectory(
        id=tid,
        task_id=task,
        category=category,
        group=task,
        reward=reward,
        turn_verdicts=[TurnVerdict(turn=t, passed=reward > 0.5) for t in range(n_turns)],
    )


def labels(tid: str, per_turn: list[str]) -> list[TurnLabel]:
    return [TurnLabel(trajectory_id=tid, turn=t, label=lab, source="test") for t, lab in enumerate(per_turn)]


def stream() -> tuple[list[Trajectory], list[TurnLabel]]:
    """Four rollouts of two tasks in two categories."""
    trajs = [
        traj("a", "base_1", "multi_turn_base", 1.0, 3),
        traj("b", "base_1", "multi_turn_base", 0.0, 3),
        traj("c", "param_7", "multi_turn_miss_param", 0.0, 3),
        traj("d", "param_7", "multi_turn_miss_param", 0.0, 3),
    ]
    labs = (
        labels("a", ["pass", "pass", "pass"])
        + labels("b", ["pass", "state_mismatch", "state_mismatch"])
        + labels("c", ["argument_mismatch", "state_mismatch", "pass"])
        + labels("d", ["argument_mismatch", "argument_mismatch", "argument_mismatch"])
    )
    return trajs, labs


def test_counts_are_turns_and_trajectory_tallies_count_each_trajectory_once() -> None:
    state = CapabilityState()
    trajs, labs = stream()
    state.update(step=0, epoch=0, trajectories=trajs, labels=labs)
    w = state.window
    assert w.trajectories == 4
    assert w.labelled_turns == 12
    assert {k: v.count for k, v in w.by_label.items()} == {"pass": 5, "state_mismatch": 3, "argument_mismatch": 4}
    # Trajectory-level: "pass" appears in a (reward 1), b and c (reward 0).
    p = w.by_label["pass"]
    assert (p.trajectories, p.successes, p.reward_sum) == (3, 1, 1.0)
    assert p.mean_reward == pytest.approx(1 / 3)
    am = w.by_label["argument_mismatch"]
    assert (am.count, am.trajectories, am.successes, am.reward_sum) == (4, 2, 0, 0.0)
    assert w.mean_reward("argument_mismatch") == 0.0
    assert w.count("state_mismatch") == 3


def test_category_and_task_tables() -> None:
    state = CapabilityState()
    trajs, labs = stream()
    state.update(step=0, epoch=0, trajectories=trajs, labels=labs)
    w = state.window
    base = w.by_category_label["multi_turn_base"]
    assert {k: (v.count, v.trajectories, v.successes) for k, v in base.items()} == {
        "pass": (4, 2, 1),
        "state_mismatch": (2, 1, 0),
    }
    assert w.count("argument_mismatch", "multi_turn_miss_param") == 4
    assert w.count("argument_mismatch", "multi_turn_base") == 0
    assert w.prevalence("state_mismatch", "multi_turn_base") == pytest.approx(2 / 6)
    assert w.prevalence("argument_mismatch") == pytest.approx(4 / 12)
    task = w.by_task_label["param_7"]
    assert {k: (v.count, v.trajectories) for k, v in task.items()} == {
        "argument_mismatch": (4, 2),
        "state_mismatch": (1, 1),
        "pass": (1, 1),
    }
    assert w.mean_reward("pass", "multi_turn_base") == pytest.approx(0.5)


def test_prevalence_excludes_labels_on_request() -> None:
    state = CapabilityState()
    t = traj("x", "t", "multi_turn_base", 0.0, 4)
    state.update(0, 0, [t], labels("x", ["gt_error", "checker_error", "state_mismatch", "pass"]))
    assert state.window.prevalence("state_mismatch") == pytest.approx(1 / 4)
    assert state.window.prevalence("state_mismatch", exclude=("gt_error", "checker_error")) == pytest.approx(1 / 2)
    assert state.window.prevalence("never_seen") == 0.0
    assert state.window.prevalence("pass", category="no_such_category") == 0.0


@pytest.mark.parametrize(
    ("n_turns", "expected"),
    [
        (1, ["early"]),
        (3, ["early", "middle", "late"]),
        (6, ["early", "early", "middle", "middle", "late", "late"]),
    ],
)
def test_turn_position_thirds(n_turns: int, expected: list[str]) -> None:
    assert [turn_position(t, n_turns) for t in range(n_turns)] == expected


def test_last_turn_is_late_and_positions_are_symmetric() -> None:
    assert [turn_position(t, 2) for t in range(2)] == ["early", "late"]
    assert [turn_position(t, 4) for t in range(4)] == ["early", "middle", "middle", "late"]


def test_position_table_uses_the_dialogue_length() -> None:
    state = CapabilityState()
    t = traj("p", "t", "multi_turn_base", 0.0, 6)
    state.update(0, 0, [t], labels("p", ["pass", "pass", "state_mismatch", "pass", "response_mismatch", "pass"]))
    pos = state.window.by_position_label
    assert {k: v.count for k, v in pos["early"].items()} == {"pass": 2}
    assert {k: v.count for k, v in pos["middle"].items()} == {"state_mismatch": 1, "pass": 1}
    assert {k: v.count for k, v in pos["late"].items()} == {"response_mismatch": 1, "pass": 1}
    # One trajectory per cell even with two "pass" turns in the same third.
    assert pos["early"]["pass"].trajectories == 1


def test_position_uses_verdict_count_when_labels_stop_early() -> None:
    """Labels for only the first turns of a 6-turn dialogue must not be spread over all three thirds."""
    state = CapabilityState()
    t = traj("q", "t", "multi_turn_base", 0.0, 6)
    state.update(0, 0, [t], labels("q", ["pass", "state_mismatch"]))
    assert set(state.window.by_position_label) == {"early"}


def test_epoch_starts_a_fresh_window_and_totals_accumulate() -> None:
    state = CapabilityState()
    trajs, labs = stream()
    state.update(step=0, epoch=0, trajectories=trajs, labels=labs)
    state.update(step=1, epoch=0, trajectories=trajs, labels=labs)
    assert state.window.by_label["argument_mismatch"].count == 8
    assert state.window.trajectories == 8
    t = traj("z", "base_9", "multi_turn_base", 1.0, 1)
    state.update(step=2, epoch=1, trajectories=[t], labels=labels("z", ["pass"]))
    assert (state.epoch, state.step) == (1, 2)
    assert state.window.trajectories == 1
    assert set(state.window.by_label) == {"pass"}
    assert state.window.by_label["pass"].successes == 1
    assert state.totals.trajectories == 9
    assert state.totals.by_label["argument_mismatch"].count == 8
    assert state.totals.by_label["pass"].count == 11
    assert state.totals.by_label["pass"].successes == 3


def test_labels_of_other_trajectories_are_ignored_and_unlabelled_trajectories_count() -> None:
    state = CapabilityState()
    t = traj("only", "t", "multi_turn_base", 0.0, 2)
    state.update(0, 0, [t], labels("someone_else", ["state_mismatch"]))
    assert state.window.trajectories == 1
    assert state.window.labelled_turns == 0
    assert state.window.by_label == {}


def test_json_round_trip_restores_every_table() -> None:
    state = CapabilityState()
    trajs, labs = stream()
    state.update(step=0, epoch=0, trajectories=trajs, labels=labs)
    state.update(step=5, epoch=1, trajectories=trajs[:2], labels=[lab for lab in labs if lab.trajectory_id in "ab"])
    dumped = json.loads(json.dumps(state.model_dump(mode="json")))
    restored = CapabilityState.model_validate(dumped)
    assert restored == state
    assert restored.model_dump() == state.model_dump()
    assert CapabilityState.model_validate_json(state.model_dump_json()) == state
    for tables in ("window", "totals"):
        a: CapabilityTables = getattr(state, tables)
        b: CapabilityTables = getattr(restored, tables)
        for label in a.by_label:
            assert b.mean_reward(label) == a.mean_reward(label)
            assert b.prevalence(label, "multi_turn_base") == a.prevalence(label, "multi_turn_base")
    # The restored state goes on exactly as the original would.
    more_t, more_l = stream()
    state.update(6, 1, more_t, more_l)
    restored.update(6, 1, more_t, more_l)
    assert restored == state


def test_task_and_category_tallies_count_each_trajectory_once() -> None:
    state = CapabilityState()
    a = traj("a", "t1", "multi_turn_base", 1.0, 3)
    b = traj("b", "t1", "multi_turn_base", 0.0, 3)
    c = traj("c", "t2", "multi_turn_miss_func", 0.0, 2)
    state.update(0, 0, [a, b, c], labels("a", ["pass"] * 3) + labels("b", ["pass", "state_mismatch", "pass"])
                 + labels("c", ["pass", "pass"]))
    assert state.window.by_task["t1"].trajectories == 2 and state.window.by_task["t1"].successes == 1
    assert state.window.by_task["t1"].mean_reward == 0.5
    assert state.window.by_category["multi_turn_miss_func"].successes == 0
    assert state.totals.by_category["multi_turn_base"].reward_sum == 1.0
