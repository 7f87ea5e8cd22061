"""The two control diagnosers, as plain functions of (trajectories, what the run has seen, a seeded RNG).

Both label every ground-truth turn of every trajectory (the turns of its verdicts; turn 0 when it has none),
as a real diagnoser does, but without looking at what happened in the turn:

* ``random_labels``: each label is drawn from the distribution of (label, reference label) pairs the run's
  *other* diagnosers have produced in earlier steps (read from the run store), with an RNG seeded by the
  run's seed and the step, so a rerun or a resumed run draws the same labels. Before any label has been
  seen, every turn gets ``initial_label``.
* ``fixed_label``: every turn gets the same label.

Made the run's primary diagnoser (``diagnosis.primary``), they drive the capability state, the interface
evolution and A-Patch in place of real diagnoses: the referee's question "would random or fixed labels do as
well?" becomes a recipe switch.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import Field

from seal_platform.config import Section
from seal_platform.types import Trajectory, TurnLabel

RANDOM = "random_labels"
FIXED = "fixed_label"
CONTROL_SOURCES = (RANDOM, FIXED)


class ControlSettings(Section):
    """Recipe section ``settings.controls``."""

    fixed_label: str = Field(default="state_mismatch", description="The label fixed_label gives every turn.")
    fixed_reference_label: str | None = Field(
        default=None, description="Its reference label (A-Patch base weight); null: the label itself."
    )
    initial_label: str = Field(
        default="state_mismatch",
        description="What random_labels gives every turn before the run has seen any label from another diagnoser.",
    )
    initial_reference_label: str | None = Field(
        default=None, description="Its reference label; null: the label itself."
    )


def turns_of(traj: Trajectory) -> list[int]:
    return sorted({v.turn for v in traj.turn_verdicts}) or [0]


def fixed_labels(trajectories: Iterable[Trajectory], label: str, reference: str | None) -> list[TurnLabel]:
    return [TurnLabel(trajectory_id=t.id, turn=turn, label=label, source=FIXED, rationale="fixed-label control",
                      reference_label=reference or label)
            for t in trajectories for turn in turns_of(t)]


def random_labels(
    trajectories: Iterable[Trajectory], seen: Counter, rng: random.Random, initial: tuple[str, str]
) -> list[TurnLabel]:
    """Labels drawn from ``seen`` (counts of (label, reference label) pairs), or ``initial`` when empty."""
    pairs = sorted(seen)
    weights = [seen[p] for p in pairs]
    out = []
    for t in trajectories:
        for turn in turns_of(t):
            label, ref = rng.choices(pairs, weights)[0] if pairs else initial
            out.append(TurnLabel(trajectory_id=t.id, turn=turn, label=label, source=RANDOM, reference_label=ref,
                                 rationale=f"random-label control (drawn from {sum(weights)} labels seen so far)"))
    return out


def seen_labels(store: Any, run_id: str, before_step: int, cache: dict[str, Any]) -> Counter:
    """Counts of (label, reference label) from the run's non-control diagnosers in steps before
    ``before_step``, read from the store (incrementally: ``cache`` keeps what was already counted)."""
    counts: Counter = cache.setdefault("counts", Counter())
    done = cache.get("upto", -1)
    if store is None:
        return counts
    if done >= before_step:  # a resumed run re-does steps: count afresh
        counts.clear()
        done = -1
    for step in range(done + 1, before_step):
        for row in store.labels(run_id, step=step):
            if row.source not in CONTROL_SOURCES:
                counts[(row.label, row.reference_label or row.label)] += 1
    cache["upto"] = before_step - 1
    return counts
