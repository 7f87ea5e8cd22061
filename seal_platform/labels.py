"""The label taxonomy as the loaded plugins define it: ``seal-platform labels [ENV]``.

Diagnosers register their labels (:class:`seal_platform.registry.DiagnoserSpec`): the label set, the
reference label(s) each finer label refines, what each means, and the environments they label. A label that
refines no other is a reference label itself; A-Patch's base weights are per reference label, and every
:class:`TurnLabel` carries the reference label that applies to its turn in ``reference_label``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only a type: the constants below are imported by plugin settings modules, keep them cheap
    from .plugins import PluginHost

#: A turn the episode never reached (it ended at a step or context limit first). Ours: the reference called
#: such turns ``correct_abstention``, which rewards running out of steps.
UNREACHED_LABEL = "unreached_turn"

#: The SEAL reference implementation's labels (docs/labels.md, "Reference labels"), in the order its rules
#: fire, and ``unreached_turn`` (ours). A-Patch's base weights are per reference label, and a finer label is
#: weighed as the reference label it maps to. The one list of them: ``seal-platform labels`` calls a label
#: that maps to no other a reference label only when it is one of these (or another label maps to it).
REFERENCE_LABELS: tuple[str, ...] = ("gt_error", "spurious_tool_call", "correct_abstention",
                                     "empty_turn_model_response", "instance_mismatch", "checker_error",
                                     "state_mismatch", "response_mismatch", "pass", UNREACHED_LABEL)

#: The reference labels that say nothing about the agent's conduct in the turn (docs/labels.md, base weight
#: "excluded"): the ground truth or a checker raised, or the episode never reached the turn (its cause is
#: labelled on the turn that used up the budget). The one list of them, in the order of
#: :data:`REFERENCE_LABELS`: the default of A-Patch's ``excluded_labels`` (never weighed, never counted), of
#: the interface evolution's ``excluded_labels`` (no capability pressure) and of the LLM judge's
#: ``skip_labels`` (never judged).
EXCLUDED_LABELS: tuple[str, ...] = ("gt_error", "checker_error", UNREACHED_LABEL)

#: The SEAL paper's finer labels (its Table 5) -> the reference labels each may refine (docs/labels.md,
#: "Finer labels and the mapping", the bfcl column). The one mapping: the ``bfcl`` diagnoser registers it as
#: its labels' reference labels, and the LLM judge's ``refine`` mode offers the finer labels that refine the
#: heuristic's label by it. Other environments' diagnosers declare mappings of their own.
REFINES: dict[str, tuple[str, ...]] = {
    "invalid_tool_call": ("spurious_tool_call", "empty_turn_model_response", "state_mismatch", "response_mismatch"),
    "recovery_failure": ("state_mismatch", "response_mismatch"),
    "missing_tool_call": ("state_mismatch", "response_mismatch"),
    "argument_mismatch": ("state_mismatch", "response_mismatch"),
}


@dataclass(frozen=True)
class LabelRow:
    diagnoser: str
    plugin: str
    label: str
    reference: tuple[str, ...]  # () when the label is a reference label itself
    meaning: str


def label_rows(host: PluginHost, environment: str | None = None) -> list[LabelRow]:
    """Every label of every registered diagnoser (those that label ``environment`` when it is given)."""
    diagnosers = host.diagnosers()
    if environment is not None:
        host.require("environment", environment)
    rows = []
    for name, (plugin, spec) in sorted(diagnosers.items()):
        if environment is not None and spec.environments and environment not in spec.environments:
            continue
        for label in spec.labels:
            rows.append(
                LabelRow(name, plugin, label, tuple(spec.reference.get(label, ())), spec.meanings.get(label, ""))
            )
    return rows
