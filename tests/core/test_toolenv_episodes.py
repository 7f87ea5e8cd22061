"""seal_platform_libs.toolenv.episodes: the group keys, the infra-failure-aware score and the JSON Lines task file
that the mcp, openenv and smarthome plugins share."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from seal_platform.types import Task, Trajectory
from seal_platform_libs.toolenv.episodes import (
    evaluation_episodes,
    load_task_file,
    scored_without_infra_failures,
    training_episodes,
)


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", category="c", split="eval", payload={}) for i in range(n)]


def test_training_groups_hold_one_task_of_one_step_and_nothing_else():
    eps = training_episodes(_tasks(3), group_size=4, step=2)
    assert len(eps) == 12
    groups: dict[str, set] = {}
    for task, key, sample in eps:
        groups.setdefault(key, set()).add((task.id, sample))
    assert len(groups) == 3 and all({s for _, s in g} == {0, 1, 2, 3} and len({t for t, _ in g}) == 1
                                    for g in groups.values())
    later = {key for _, key, _ in training_episodes(_tasks(3), 4, step=3)}
    assert not later & set(groups), "the same task in another step is another group"
    evals = evaluation_episodes(_tasks(3), step=2)
    assert [s for *_, s in evals] == [0, 0, 0] and not {k for _, k, _ in evals} & set(groups)


def _traj(task: str, reward: float, infra: str | None = None) -> Trajectory:
    return Trajectory(task_id=task, category="c", group=f"eval0:{task}", reward=reward, infra_failure=infra)


def test_an_episode_lost_to_the_server_is_kept_but_not_scored():
    trajs = [_traj("a", 1.0), _traj("b", 0.0), _traj("c", 0.0, infra="server crashed")]
    ctx = SimpleNamespace(config=SimpleNamespace(evaluation=SimpleNamespace(split="eval")))
    result = scored_without_infra_failures(ctx, _tasks(3), trajs)
    assert result.n_tasks == 3 and result.n_infra_failures == 1 and result.average == 50.0
    assert result.trajectories == trajs


class _Spec(BaseModel):
    id: str
    split: str = "train"
    category: str = "default"
    x: int


def test_task_file_lines_are_validated_and_reported_by_number(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in ({"id": "a", "x": 1}, {"id": "b", "x": 2, "split": "eval"})) + "\n\n"
    )
    tasks = load_task_file(path, _Spec, "settings.demo.tasks", lambda s: {"x": s.x})
    assert [(t.id, t.split, t.payload) for t in tasks] == [("a", "train", {"x": 1}), ("b", "eval", {"x": 2})]
    path.write_text(json.dumps({"id": "a", "x": 1}) + "\n" + json.dumps({"id": "a", "x": 2}) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: task id 'a' repeats"):
        load_task_file(path, _Spec, "settings.demo.tasks", lambda s: {})
    path.write_text(json.dumps({"id": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: not a valid task"):
        load_task_file(path, _Spec, "settings.demo.tasks", lambda s: {})
    with pytest.raises(ValueError, match=r"not found \(settings.demo.tasks"):
        load_task_file(tmp_path / "nope.jsonl", _Spec, "settings.demo.tasks", lambda s: {})


def test_a_task_file_line_that_is_not_utf8_is_named_by_file_line_and_byte(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"id": "a", "x": 1}\r\n{"id": "caf\xe9", "x": 2}\n')  # a Latin-1 byte on line 2
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: not UTF-8 text \(byte 0xe9 at column 12 cannot be decoded\)"):
        load_task_file(path, _Spec, "settings.demo.tasks", lambda s: {})


def test_the_helpers_result_passes_the_cores_check_and_a_miscount_does_not():
    from seal_platform.errors import PluginError
    from seal_platform.stages import score_evaluation

    trajs = [_traj("t0", 1.0), _traj("t1", 0.0, infra="server crashed"), _traj("t2", 0.0)]
    ctx = SimpleNamespace(config=SimpleNamespace(evaluation=SimpleNamespace(split="eval")))
    result = score_evaluation(scored_without_infra_failures(ctx, _tasks(3), trajs), "eval", "p", _tasks(3))
    assert (result.n_tasks, result.n_infra_failures, result.average) == (3, 1, 50.0)
    with pytest.raises(PluginError, match="2 infrastructure failure"):
        score_evaluation(result.model_copy(update={"n_tasks": 1, "n_infra_failures": 2}), "eval", "p", None)
