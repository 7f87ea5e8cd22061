"""What the core fills in around the stage hooks: the one sampling rule (environments with a cap of their own
use it too) and the one scoring rule."""

from __future__ import annotations

import json

from seal_platform.config import RunConfig
from seal_platform.stages import collect_sampling, evaluate_sampling, sampling_for, score_evaluation
from seal_platform.types import Trajectory


def _config(eval_cap: int | None = None) -> RunConfig:
    return RunConfig(environment="x", rollout={"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 100},
                     evaluation={"max_new_tokens": eval_cap})


def test_training_sampling_is_the_rollout_section_with_the_environments_cap_and_stops():
    s = sampling_for(_config(), evaluation=False, max_new_tokens=48, stop=["</tool_call>"])
    assert (s.temperature, s.top_p, s.max_new_tokens, s.stop) == (0.7, 0.9, 48, ["</tool_call>"])
    assert collect_sampling(_config()).max_new_tokens == 100  # no cap of its own: the recipe's
    assert sampling_for(_config(), evaluation=False, max_new_tokens=None) == collect_sampling(_config())


def test_evaluation_is_greedy_and_its_cap_comes_first_then_the_environments_then_the_rollouts():
    s = sampling_for(_config(), evaluation=True, max_new_tokens=48)
    assert (s.temperature, s.top_p, s.max_new_tokens) == (0.0, 1.0, 48)
    assert sampling_for(_config(eval_cap=32), evaluation=True, max_new_tokens=48).max_new_tokens == 32
    assert evaluate_sampling(_config()).max_new_tokens == 100
    assert evaluate_sampling(_config(eval_cap=32)).max_new_tokens == 32


def test_scoring_is_the_pass_rate_per_category():
    trajs = [Trajectory(task_id=f"t{i}", category=c, group=f"g{i}", reward=r)
             for i, (c, r) in enumerate([("a", 1.0), ("a", 0.0), ("b", 1.0), ("a", 1.0)])]
    result = score_evaluation(trajs, "eval", "toy")
    assert result.split == "eval" and result.n_tasks == 4
    assert result.per_category == {"a": 100.0 * 2 / 3, "b": 100.0}


def _store_with_step(tmp_path, *trajectories: Trajectory):
    from seal_platform.capability import CapabilityState
    from seal_platform.store import RunStore

    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="r", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])

    def record(step: int, *trajectories: Trajectory) -> None:
        store.record_step("r", step=step, epoch=0, trajectories=list(trajectories), labels=[], label_weights={},
                          state=CapabilityState(), interface_revision=0, metrics={}, timings={})

    record(0, *trajectories)
    return store, record


def test_before_a_step_is_stored_only_what_the_per_call_checks_could_not_see_is_checked(tmp_path):
    import pytest

    from seal_platform.errors import PluginError, StoreError
    from seal_platform.stages import check_ids_unused

    held = Trajectory(id="held", task_id="t", category="c", group="g", reward=1.0)
    store, record = _store_with_step(tmp_path, held)
    # Two rounds of dynamic sampling (two calls, each checked on its own) returning one id.
    rounds = [Trajectory(id="twice", task_id=f"t{i}", category="c", group=f"g{i}") for i in range(2)]
    with pytest.raises(PluginError, match=r"^collect of plugin 'env' returned trajectories with duplicate ids "
                                          r"\['twice'\]; a trajectory's id must be unique across the run store"):
        check_ids_unused(store, rounds, "collect", "env")
    with pytest.raises(PluginError, match=r"returned trajectories whose ids are already in the run store: "
                                          r"\['held' \(run r, step 0, train\)\]; "):
        check_ids_unused(store, [held.model_copy()], "collect", "env")
    # Rewards are each call's check (check_collected, score_evaluation), not redone here; a writer that
    # bypasses the stages still meets the store's own guard, which shares the predicate.
    nan = Trajectory(task_id="t", category="c", group="g")
    nan.reward = float("nan")
    check_ids_unused(store, [nan], "collect", "env")
    with pytest.raises(StoreError, match="the reward of trajectory .* is nan, not a finite number"):
        record(1, nan)


def test_the_diagnoser_guide_quotes_the_labels_undeclared_event_as_the_run_records_it():
    import re
    from pathlib import Path

    from seal_platform.stages import undeclared_note

    guide = " ".join((Path(__file__).resolve().parents[2] / "docs" / "write-a-diagnoser.md").read_text().split())
    message, data = undeclared_note(0, {"repetition": {"repeated"}})
    assert f"e.g. `{message}` (its data: `{json.dumps(data)}`)" in guide
    assert re.search(r"\*\*Empty labels\*\* are refused", guide)


def test_a_plugin_calling_sys_exit_in_a_stage_fails_that_stage_and_a_ctrl_c_still_stops():
    import sys

    import pytest

    from seal_platform.errors import PluginError
    from seal_platform.stages import wrap

    with pytest.raises(PluginError) as raised:
        wrap("collect", "quitter", lambda: sys.exit(3))
    said = str(raised.value)
    assert said.startswith("the 'collect' stage failed in plugin 'quitter': SystemExit: 3 (at "), said

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wrap("collect", "quitter", interrupted)
