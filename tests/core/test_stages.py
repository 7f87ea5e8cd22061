"""What the core fills in around the stage hooks: the one sampling rule (environments with a cap of their own
use it too) and the one scoring rule."""

from __future__ import annotations

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
