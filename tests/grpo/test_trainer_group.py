"""seal_platform_libs.policy.trainer_group: the forwarding both training groups share (worker processes over
pipes, grpo's LocalTrainerGroup; Ray actors, RayTrainerGroup): each method goes to every rank, rank 0 answers.
Here the ranks are plain objects in this process, so what each rank received can be read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seal_platform_libs.policy.trainer_group import TrainerGroup


class Rank:
    def __init__(self, rank: int):
        self.rank, self.updates, self.got = rank, 0, []

    def step(self, samples: list[str]) -> dict[str, float]:
        self.got.append(("step", samples))
        self.updates += 1
        return {"rank": float(self.rank), "samples": float(len(samples))}

    def save(self, directory: str) -> None:
        self.got.append(("save", directory))

    def load(self, directory: str) -> dict[str, Any]:
        self.got.append(("load", directory))
        return {"updates": 7, "rank": self.rank}

    def device_type(self) -> str:
        return ["cuda", "cpu"][self.rank % 2]

    def get_updates(self) -> int:
        return self.updates


class InProcessGroup(TrainerGroup):
    def __init__(self, world_size: int):
        self.world_size, self.ranks, self.closed = world_size, [Rank(i) for i in range(world_size)], 0

    def _call(self, method: str, *args: Any) -> Any:
        return [getattr(rank, method)(*args) for rank in self.ranks][0]

    def close(self) -> None:
        self.closed += 1


def test_every_call_reaches_every_rank_and_rank_0_answers(tmp_path: Path):
    with InProcessGroup(3) as group:
        assert group.step(("a", "b")) == {"rank": 0.0, "samples": 2.0}
        group.save(tmp_path)
        assert group.load(tmp_path) == {"updates": 7, "rank": 0}
        assert group.device_type() == "cuda" and group.updates == 1
    # each rank got the whole step's samples as a list, and the checkpoint directory as a string
    assert [r.got for r in group.ranks] == [[("step", ["a", "b"]), ("save", str(tmp_path)),
                                             ("load", str(tmp_path))]] * 3
    assert group.closed == 1


def test_a_group_must_say_how_calls_reach_its_ranks_and_how_it_ends():
    class NoTransport(TrainerGroup):
        def close(self) -> None:
            pass

    with pytest.raises(TypeError, match="_call"):
        NoTransport()  # type: ignore[abstract]


def test_both_training_groups_are_trainer_groups():
    pytest.importorskip("ray")
    from seal_platform_libs.policy.ray_trainers import RayTrainerGroup
    from seal_platform_plugins.grpo.distributed import LocalTrainerGroup

    assert issubclass(LocalTrainerGroup, TrainerGroup) and issubclass(RayTrainerGroup, TrainerGroup)
