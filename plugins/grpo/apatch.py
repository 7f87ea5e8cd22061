"""A-Patch: diagnosis-guided advantage reweighting (docs/seal-method.md, "A-Patch").

GRPO's advantage of rollout j in a group of G rollouts of one task is
``A_j = (R_j - mean R) / (std R + eps)`` (unbiased std): :func:`~.objective.step_advantages`, with the
run's ``grpo`` settings, the same advantage the trainer scales (``apply_to`` reads its sign). A-Patch
rescales it by a trajectory weight ``w_j`` computed from the turn labels of that trajectory; the reward itself
is never changed and, since every weight is positive, no advantage changes sign.

Label weights (``rho``) start at their base value and follow an exponential moving average towards a target
that grows with how common a label is in the current window of the capability state and how badly the
trajectories containing it do::

    N         = count of all labels in the window except the excluded (verifier-side) ones
    target(z) = clip(base(z) * (1 + alpha * count(z)/N * (1 - rbar(z)) * min(1, count(z)/C)), min, max)
    rho_t(z)  = (1 - beta) * rho_{t-1}(z) + beta * target(z)

where ``rbar(z)`` is the mean reward of the trajectories that contain z. Fixed labels (``pass``) keep their
base; excluded labels (``gt_error``, ``checker_error``) weigh 1 and are ignored in trajectory scales. A
trajectory's scale is the mean of rho over its labels (excluded ones left out), clipped to
[trajectory_min, trajectory_max]; 1 when it has no label.

Finer labels (a diagnoser's own taxonomy) each get their own rho; their base weight is their own entry in
``base_weights`` if there is one, else the entry of the reference label they map to
(``TurnLabel.reference_label``), else ``default_base_weight``.

Pure Python (no torch): the ``reweight`` stage runs before any model work.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from seal_platform.capability import CapabilityState
from seal_platform.types import ReweightResult, Trajectory, TurnLabel

from .objective import step_advantages
from .settings import APatchSettings, GRPOSettings


class APatch:
    """The label-weight state of one run and the reweighting rule. Persisted with checkpoints.

    ``grpo``: the run's GRPO settings, whose advantage (``advantage_eps``, ``normalize_std``) the ``apply_to``
    rule reads (the same advantage the trainer scales)."""

    def __init__(self, settings: APatchSettings | None = None, grpo: GRPOSettings | None = None):
        self.settings = settings or APatchSettings()
        self.grpo = grpo or GRPOSettings()
        self.rho: dict[str, float] = {}
        # label -> reference label -> how often diagnosers reported that mapping (the run's totals), and the
        # mapping in force: the most reported, ties broken by name, so it never depends on label order.
        self.reference_counts: dict[str, dict[str, int]] = {}
        self.reference: dict[str, str] = {}
        # The last step whose labels moved rho: a repeated call for the same step does not move it again.
        self.updated_step: int | None = None

    # --- labels -----------------------------------------------------------------------------------------

    def learn_labels(self, labels: Sequence[TurnLabel]) -> None:
        """Remember which reference label each finer label maps to: the one diagnosers reported most often
        over the run, ties broken by name (the same labels in any order give the same mapping)."""
        for lab in labels:
            if lab.reference_label and lab.reference_label != lab.label:
                counts = self.reference_counts.setdefault(lab.label, {})
                counts[lab.reference_label] = counts.get(lab.reference_label, 0) + 1
        self.reference = {label: min(counts, key=lambda ref: (-counts[ref], ref))
                          for label, counts in self.reference_counts.items()}

    def is_excluded(self, label: str) -> bool:
        excluded = self.settings.excluded_labels
        return label in excluded or self.reference.get(label) in excluded

    def is_fixed(self, label: str) -> bool:
        fixed = self.settings.fixed_labels
        return label in fixed or self.reference.get(label) in fixed

    def base(self, label: str) -> float:
        """The base weight of a label (excluded labels: 1)."""
        if self.is_excluded(label):
            return 1.0
        table = self.settings.base_weights
        if label in table:
            return table[label]
        ref = self.reference.get(label)
        if ref is not None and ref in table:
            return table[ref]
        return self.settings.default_base_weight

    def weight(self, label: str) -> float:
        """The current rho of a label (its base until the first update that sees it)."""
        if self.settings.mode == "off":
            return 1.0
        if self.settings.mode == "static" or self.is_excluded(label) or self.is_fixed(label):
            return self.base(label)
        return self.rho.get(label, self.base(label))

    # --- the EMA update -----------------------------------------------------------------------------------

    def targets(self, state: CapabilityState) -> dict[str, float]:
        """target(z) for every label in the window and every label already tracked."""
        s = self.settings
        table = state.window.by_label
        n = sum(t.count for z, t in table.items() if not self.is_excluded(z))
        out: dict[str, float] = {}
        for z in sorted(set(table) | set(self.rho)):
            if self.is_excluded(z) or self.is_fixed(z):
                continue
            base = self.base(z)
            tally = table.get(z)
            if n == 0 or tally is None or tally.count == 0:
                target = base
            else:
                count, rbar = tally.count, tally.mean_reward
                target = base * (1.0 + s.alpha * (count / n) * (1.0 - rbar) * min(1.0, count / s.count_saturation))
            out[z] = min(max(target, s.min_scale), s.max_scale)
        return out

    def update(self, state: CapabilityState, step: int) -> None:
        """Move every tracked label's rho one EMA step towards its target (dynamic mode only)."""
        if self.settings.mode != "dynamic":
            return
        if self.updated_step is not None and step <= self.updated_step:
            return
        beta = self.settings.beta
        for z, target in self.targets(state).items():
            previous = self.rho.get(z, self.base(z))
            self.rho[z] = (1.0 - beta) * previous + beta * target
        self.updated_step = step

    def label_weights(self, labels: Iterable[str] = ()) -> dict[str, float]:
        """rho of every tracked label and of ``labels``."""
        return {z: self.weight(z) for z in sorted(set(self.rho) | set(labels))}

    # --- trajectory scales ----------------------------------------------------------------------------

    def trajectory_scale(self, labels: Sequence[str]) -> float:
        """Mean rho over a trajectory's labels (excluded ones left out), clipped; 1 when none is left."""
        if self.settings.mode == "off":
            return 1.0
        kept = [self.weight(z) for z in labels if not self.is_excluded(z)]
        if not kept:
            return 1.0
        s = self.settings
        return min(max(sum(kept) / len(kept), s.trajectory_min), s.trajectory_max)

    def reweight(
        self,
        trajectories: Sequence[Trajectory],
        labels: Sequence[TurnLabel],
        state: CapabilityState,
        step: int,
    ) -> ReweightResult:
        """The ``reweight`` stage: update rho from the capability state, then weigh each trajectory."""
        self.learn_labels(labels)
        self.update(state, step)
        by_traj: dict[str, list[str]] = defaultdict(list)
        for lab in labels:
            by_traj[lab.trajectory_id].append(lab.label)
        advantages = step_advantages(trajectories, self.grpo)
        apply_to = self.settings.apply_to
        weights: dict[str, float] = {}
        for traj, adv in zip(trajectories, advantages):
            scale = self.trajectory_scale(by_traj.get(traj.id, []))
            if (apply_to == "positive" and adv <= 0) or (apply_to == "negative" and adv >= 0):
                scale = 1.0
            weights[traj.id] = scale
        seen = {lab.label for lab in labels}
        return ReweightResult(trajectory_weights=weights, label_weights=self.label_weights(seen))

    # --- persistence -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"rho": dict(self.rho), "reference": dict(self.reference),
                "reference_counts": {k: dict(v) for k, v in self.reference_counts.items()},
                "updated_step": self.updated_step}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.rho = {str(k): float(v) for k, v in data.get("rho", {}).items()}
        self.reference = {str(k): str(v) for k, v in data.get("reference", {}).items()}
        counts = data.get("reference_counts")
        # States saved before the counts: the mapping they had, counted once.
        self.reference_counts = ({str(k): {str(r): int(n) for r, n in v.items()} for k, v in counts.items()}
                                 if isinstance(counts, dict) else {k: {v: 1} for k, v in self.reference.items()})
        step = data.get("updated_step")
        self.updated_step = int(step) if step is not None else None
