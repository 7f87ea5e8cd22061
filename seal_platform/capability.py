"""The capability state: what the diagnoses say the agent can and cannot do yet.

It is the one summary of the labels that both the interface evolution and A-Patch read, so it lives in the
core, is saved with every step and restored on resume. Two copies of the same tables are kept: ``window``
(the current epoch, reset when an epoch begins) and ``totals`` (the whole run).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, Field

from .types import Trajectory, TurnLabel

POSITIONS = ("early", "middle", "late")


def turn_position(turn: int, n_turns: int) -> str:
    """Early, middle or late third of a dialogue with ``n_turns`` ground-truth turns."""
    if n_turns <= 1:
        return "early"
    # The third that holds the turn's midpoint: symmetric, so the last of two turns is "late".
    third = (2 * turn + 1) * 3 // (2 * n_turns)
    return POSITIONS[min(third, 2)]


class Tally(BaseModel):
    """Counts for one cell. ``count`` counts labelled turns; the other three count trajectories, so that
    ``mean_reward`` is the mean reward of the trajectories that contain the label (as A-Patch defines it)."""

    count: int = 0
    trajectories: int = 0
    successes: int = 0
    reward_sum: float = 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.trajectories if self.trajectories else 0.0


class CapabilityTables(BaseModel):
    trajectories: int = 0
    labelled_turns: int = 0
    # Trajectory-level tallies (each trajectory once), for success rates per task and per category.
    by_task: dict[str, Tally] = Field(default_factory=dict)
    by_category: dict[str, Tally] = Field(default_factory=dict)
    by_label: dict[str, Tally] = Field(default_factory=dict)
    by_category_label: dict[str, dict[str, Tally]] = Field(default_factory=dict)
    by_position_label: dict[str, dict[str, Tally]] = Field(default_factory=dict)
    by_task_label: dict[str, dict[str, Tally]] = Field(default_factory=dict)

    def add(self, trajectory: Trajectory, labels: list[TurnLabel]) -> None:
        self.trajectories += 1
        self.labelled_turns += len(labels)
        for table, key in ((self.by_task, trajectory.task_id), (self.by_category, trajectory.category)):
            tally = table.setdefault(key, Tally())
            tally.count += 1
            tally.trajectories += 1
            tally.successes += int(trajectory.success)
            tally.reward_sum += trajectory.reward
        n_turns = max((lab.turn for lab in labels), default=-1) + 1
        n_turns = max(n_turns, len(trajectory.turn_verdicts))
        tables = {
            "by_label": lambda lab: self.by_label,
            "by_category_label": lambda lab: self.by_category_label.setdefault(trajectory.category, {}),
            "by_position_label": lambda lab: self.by_position_label.setdefault(
                turn_position(lab.turn, n_turns), {}
            ),
            "by_task_label": lambda lab: self.by_task_label.setdefault(trajectory.task_id, {}),
        }
        # A trajectory counts once per cell however many of its turns carry the label.
        seen: set[tuple[str, int, str]] = set()
        for lab in labels:
            for name, table_of in tables.items():
                table = table_of(lab)
                tally = table.setdefault(lab.label, Tally())
                tally.count += 1
                seen_key = (name, id(table), lab.label)
                if seen_key not in seen:
                    seen.add(seen_key)
                    tally.trajectories += 1
                    tally.successes += int(trajectory.success)
                    tally.reward_sum += trajectory.reward

    def count(self, label: str, category: str | None = None) -> int:
        table = self.by_label if category is None else self.by_category_label.get(category, {})
        tally = table.get(label)
        return tally.count if tally else 0

    def prevalence(self, label: str, category: str | None = None, exclude: Iterable[str] = ()) -> float:
        """Share of labelled turns (optionally within a category) that carry ``label``."""
        table = self.by_label if category is None else self.by_category_label.get(category, {})
        excluded = set(exclude)
        total = sum(t.count for name, t in table.items() if name not in excluded)
        return table[label].count / total if total and label in table else 0.0

    def mean_reward(self, label: str, category: str | None = None) -> float:
        table = self.by_label if category is None else self.by_category_label.get(category, {})
        tally = table.get(label)
        return tally.mean_reward if tally else 0.0


class CapabilityState(BaseModel):
    epoch: int = 0
    step: int = 0
    window: CapabilityTables = Field(default_factory=CapabilityTables)
    totals: CapabilityTables = Field(default_factory=CapabilityTables)
    # The latest step's labels alone (the current round's failure profile; empty in states saved before it).
    last: CapabilityTables = Field(default_factory=CapabilityTables)

    def update(self, step: int, epoch: int, trajectories: list[Trajectory], labels: list[TurnLabel]) -> None:
        """Fold one step's labels in; a new epoch starts a fresh window."""
        if epoch != self.epoch:
            self.window = CapabilityTables()
            self.epoch = epoch
        self.step = step
        self.last = CapabilityTables()
        by_traj: dict[str, list[TurnLabel]] = defaultdict(list)
        for lab in labels:
            by_traj[lab.trajectory_id].append(lab)
        for traj in trajectories:
            own = by_traj.get(traj.id, [])
            self.window.add(traj, own)
            self.totals.add(traj, own)
            self.last.add(traj, own)
