"""The smart-home environment object: its tasks and its pristine interface."""

from __future__ import annotations

from typing import Any

from seal_platform.types import Interface, SamplingParams, Task, Trajectory

from .settings import SmartHomeSettings
from .tasks import CATEGORIES, make_tasks


class SmartHomeEnvironment:
    """Seeded train / eval tasks; revision 0 is the untouched presentation (evaluation always uses it)."""

    name = "smarthome"
    categories: tuple[str, ...] = CATEGORIES

    def __init__(self, settings: SmartHomeSettings | None = None):
        self.settings = settings or SmartHomeSettings()
        self.categories = tuple(self.settings.categories)

    def tasks(self, split: str) -> list[Task]:
        s = self.settings
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}: smarthome has 'train' and 'eval'")
        n = s.n_train if split == "train" else s.n_eval
        return make_tasks(split, n, s.seed, s.min_turns, s.max_turns, self.categories)

    def pristine_interface(self) -> Interface:
        return Interface(revision=0)

    def play(self, engine: Any, episodes: list[tuple[Task, str, int]], interface: Interface,
             sampling: SamplingParams) -> list[Trajectory]:
        """Play ``(task, group, sample)`` episodes in lock step and verify them (:mod:`.episode`)."""
        from .episode import run_episodes

        s = self.settings
        return run_episodes(engine, episodes, interface, sampling, s.attempts_per_turn, s.worked_examples,
                            s.example_results)
