"""A-Patch's formulas on hand-computed cases."""

from __future__ import annotations

import pytest

from seal_platform.capability import CapabilityState
from seal_platform.types import Trajectory, TurnLabel
from seal_platform_plugins.grpo.apatch import APatch
from seal_platform_plugins.grpo.settings import APatchSettings, GRPOSettings


def _traj(tid: str, reward: float, group: str = "g") -> Trajectory:
    return Trajectory(id=tid, task_id=group, category="c", group=group, reward=reward)


def _labels(tid: str, *names: str, ref: str | None = None) -> list[TurnLabel]:
    return [
        TurnLabel(trajectory_id=tid, turn=i, label=n, source="test", reference_label=ref) for i, n in enumerate(names)
    ]


def _case():
    trajs = [_traj("t1", 0.0), _traj("t2", 1.0), _traj("t3", 0.0), _traj("t4", 1.0)]
    labels = (
        _labels("t1", "state_mismatch", "state_mismatch")
        + _labels("t2", "pass", "pass")
        + _labels("t3", "spurious_tool_call", "gt_error")
    )  # t4 has no label
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    return trajs, labels, state


def test_dynamic_weights_by_hand():
    trajs, labels, state = _case()
    apatch = APatch(APatchSettings())
    result = apatch.reweight(trajs, labels, state, step=0)
    # N = 5 (gt_error excluded). state_mismatch: count 2, rbar 0:
    #   target = 1.0 * (1 + 1 * 2/5 * 1 * min(1, 2/32)) = 1.025; rho = .75 * 1 + .25 * 1.025
    rho_sm = 0.75 + 0.25 * 1.025
    # spurious_tool_call: target = 2 * (1 + 1/5 * 1/32) = 2.0125 -> clipped to 2.0; rho = 2.0
    assert result.label_weights["state_mismatch"] == pytest.approx(rho_sm)
    assert result.label_weights["spurious_tool_call"] == pytest.approx(2.0)
    assert result.label_weights["pass"] == 1.0
    assert result.label_weights["gt_error"] == 1.0
    w = result.trajectory_weights
    assert w["t1"] == pytest.approx(rho_sm)
    assert w["t2"] == 1.0
    assert w["t3"] == pytest.approx(2.0)  # gt_error left out of the mean
    assert w["t4"] == 1.0  # no labels


def test_ema_over_steps_and_repeat_call_is_idempotent():
    trajs, labels, state = _case()
    apatch = APatch(APatchSettings(count_saturation=2))
    apatch.reweight(trajs, labels, state, step=0)
    # target(state_mismatch) = 1 + 2/5 * 1 * min(1, 2/2) = 1.4
    assert apatch.rho["state_mismatch"] == pytest.approx(0.75 * 1.0 + 0.25 * 1.4)
    apatch.reweight(trajs, labels, state, step=0)  # same step again: no second EMA move
    assert apatch.rho["state_mismatch"] == pytest.approx(1.1)
    apatch.reweight(trajs, labels, state, step=1)
    assert apatch.rho["state_mismatch"] == pytest.approx(0.75 * 1.1 + 0.25 * 1.4)
    # A label absent from the window decays back towards its base.
    empty = CapabilityState(epoch=1)
    apatch.reweight([], [], empty, step=2)
    assert apatch.rho["state_mismatch"] == pytest.approx(0.75 * (0.75 * 1.1 + 0.25 * 1.4) + 0.25 * 1.0)


def test_mean_reward_lowers_pressure_and_clip_bounds():
    # instance_mismatch (base 0.6): half the trajectories containing it succeed.
    trajs = [_traj("a", 1.0), _traj("b", 0.0)]
    labels = _labels("a", "instance_mismatch") + _labels("b", "instance_mismatch")
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    apatch = APatch(APatchSettings(alpha=2.0, count_saturation=1, beta=1.0))
    apatch.reweight(trajs, labels, state, step=0)
    # N = 2, count 2, rbar 0.5: target = 0.6 * (1 + 2 * 1 * 0.5 * 1) = 1.2; beta 1 -> rho = target
    assert apatch.rho["instance_mismatch"] == pytest.approx(1.2)
    low = APatch(APatchSettings(alpha=0.0, min_scale=0.7, beta=1.0))
    low.reweight(trajs, labels, state, step=0)
    assert low.rho["instance_mismatch"] == pytest.approx(0.7)  # base 0.6 clipped up to min_scale


def test_finer_labels_map_to_reference_base_weights():
    trajs = [_traj("x", 0.0)]
    labels = _labels("x", "invalid_tool_call", ref="empty_turn_model_response") + _labels(
        "x", "argument_mismatch", ref="state_mismatch"
    )
    apatch = APatch(APatchSettings(mode="static"))
    result = apatch.reweight(trajs, labels, CapabilityState(), step=0)
    assert result.label_weights == {"invalid_tool_call": 1.5, "argument_mismatch": 1.0}
    assert result.trajectory_weights["x"] == pytest.approx((1.5 + 1.0) / 2)
    # A finer label with its own base entry uses it; an unknown label gets the default.
    own = APatch(APatchSettings(mode="static", base_weights={"invalid_tool_call": 1.7}, default_base_weight=0.9))
    own.learn_labels(labels)
    assert own.weight("invalid_tool_call") == 1.7
    assert own.weight("argument_mismatch") == 0.9
    # A finer label mapped to an excluded reference label is excluded too.
    excl = APatch()
    excl.learn_labels(_labels("x", "backend_crash", ref="gt_error"))
    assert excl.trajectory_scale(["backend_crash"]) == 1.0


def test_static_and_off_modes():
    trajs, labels, state = _case()
    static = APatch(APatchSettings(mode="static"))
    result = static.reweight(trajs, labels, state, step=0)
    assert result.label_weights["state_mismatch"] == 1.0 and result.trajectory_weights["t3"] == 2.0
    assert static.rho == {}  # frozen at base: nothing tracked
    off = APatch(APatchSettings(mode="off")).reweight(trajs, labels, state, step=0)
    assert set(off.trajectory_weights.values()) == {1.0}
    assert set(off.label_weights.values()) == {1.0}


def test_apply_to_positive_or_negative_only():
    trajs = [_traj("win", 1.0), _traj("lose", 0.0)]
    labels = _labels("win", "correct_abstention") + _labels("lose", "spurious_tool_call")
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    pos = APatch(APatchSettings(mode="static", apply_to="positive")).reweight(trajs, labels, state, 0)
    assert pos.trajectory_weights == {"win": 1.8, "lose": 1.0}
    neg = APatch(APatchSettings(mode="static", apply_to="negative")).reweight(trajs, labels, state, 0)
    assert neg.trajectory_weights == {"win": 1.0, "lose": 2.0}



@pytest.mark.parametrize("grpo", [GRPOSettings(), GRPOSettings(normalize_std=False), GRPOSettings(advantage_eps=1.0)])
def test_apply_to_reads_the_runs_advantage_whose_sign_no_setting_changes(grpo: GRPOSettings):
    # A singleton group (advantage = reward), a group of three and a uniform group (advantage 0 everywhere).
    trajs = [_traj("alone", -0.5, "s"), _traj("a", 1.0), _traj("b", 0.0), _traj("c", 0.0),
             _traj("u1", 1.0, "u"), _traj("u2", 1.0, "u")]
    labels = [lab for t in trajs for lab in _labels(t.id, "spurious_tool_call")]
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    pos = APatch(APatchSettings(mode="static", apply_to="positive"), grpo).reweight(trajs, labels, state, 0)
    assert pos.trajectory_weights == {"alone": 1.0, "a": 2.0, "b": 1.0, "c": 1.0, "u1": 1.0, "u2": 1.0}
    neg = APatch(APatchSettings(mode="static", apply_to="negative"), grpo).reweight(trajs, labels, state, 0)
    assert neg.trajectory_weights == {"alone": 2.0, "a": 1.0, "b": 2.0, "c": 2.0, "u1": 1.0, "u2": 1.0}

def test_trajectory_scale_clip_and_state_roundtrip():
    apatch = APatch(APatchSettings(trajectory_min=0.8, trajectory_max=1.2))
    apatch.rho = {"state_mismatch": 0.5}
    assert apatch.trajectory_scale(["state_mismatch"]) == 0.8
    assert apatch.trajectory_scale(["spurious_tool_call"]) == 1.2
    apatch.reference = {"argument_mismatch": "state_mismatch"}
    apatch.updated_step = 3
    clone = APatch(apatch.settings)
    clone.load_state_dict(apatch.state_dict())
    assert clone.state_dict() == apatch.state_dict()


def test_settings_reject_inverted_ranges():
    with pytest.raises(ValueError):
        APatchSettings(min_scale=2.0, max_scale=1.0)
    with pytest.raises(ValueError):
        APatchSettings(base_weights={"pass": 0.0})


def test_unreached_turns_neither_weigh_nor_count():
    trajs = [_traj("a", 0.0), _traj("b", 0.0)]
    labels = _labels("a", "state_mismatch", "unreached_turn", "unreached_turn") + _labels("b", "unreached_turn")
    state = CapabilityState()
    state.update(0, 0, trajs, labels)
    result = APatch(APatchSettings()).reweight(trajs, labels, state, step=0)
    # N = 1 (only state_mismatch counts): target = 1 + 1 * 1/1 * 1 * min(1, 1/32)
    assert result.label_weights["state_mismatch"] == pytest.approx(0.75 + 0.25 * (1 + 1 / 32))
    assert result.trajectory_weights["a"] == pytest.approx(result.label_weights["state_mismatch"])
    assert result.trajectory_weights["b"] == 1.0  # nothing but unreached turns: as if unlabelled


def test_the_reference_base_weights_are_given_for_the_core_reference_labels():
    # grpo's default base weights and exclusions are keyed by the reference labels the core defines, every one
    # of them either weighed or excluded (never both); the exclusions are the core's excluded labels.
    from seal_platform.labels import EXCLUDED_LABELS, REFERENCE_LABELS
    from seal_platform_plugins.grpo.settings import REFERENCE_BASE_WEIGHTS

    excluded = APatchSettings().excluded_labels
    assert excluded == list(EXCLUDED_LABELS)
    assert sorted([*REFERENCE_BASE_WEIGHTS, *excluded]) == sorted(REFERENCE_LABELS)


def test_a_finer_labels_base_weight_does_not_depend_on_label_order():
    """A finer label reported with two reference labels takes the one reported most often (ties: by name),
    whatever order the labels came in; the mapping survives a checkpoint."""
    mixed = (_labels("a", "recovery_failure", ref="instance_mismatch")
             + _labels("b", "recovery_failure", ref="state_mismatch")
             + _labels("c", "recovery_failure", ref="state_mismatch"))
    bases = set()
    for order in (mixed, list(reversed(mixed)), [mixed[1], mixed[0], mixed[2]]):
        apatch = APatch(APatchSettings(mode="static"))
        apatch.learn_labels(order)
        bases.add(apatch.weight("recovery_failure"))
        assert apatch.reference["recovery_failure"] == "state_mismatch"
    assert bases == {APatchSettings().base_weights["state_mismatch"]}
    tie = APatch(APatchSettings(mode="static"))
    tie.learn_labels(list(reversed(mixed[:2])))
    assert tie.reference["recovery_failure"] == "instance_mismatch"  # 1 each: the first by name
    again = APatch(APatchSettings(mode="static"))
    again.load_state_dict(apatch.state_dict())
    assert again.reference["recovery_failure"] == "state_mismatch"
    again.learn_labels(_labels("d", "recovery_failure", ref="instance_mismatch"))
    assert again.reference["recovery_failure"] == "instance_mismatch"  # the counts came along: 2 against 2
    old = APatch()
    old.load_state_dict({"rho": {}, "reference": {"x": "gt_error"}})  # a state saved before the counts
    assert old.reference == {"x": "gt_error"} and old.is_excluded("x")
