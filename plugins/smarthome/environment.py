"""The smart-home environment object: its tasks and its pristine interface."""

from __future__ import annotations

from seal_platform.types import Interface, Task

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
