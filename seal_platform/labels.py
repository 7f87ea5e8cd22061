"""The label taxonomy as the loaded plugins define it: ``seal-platform labels [ENV]``.

Diagnosers register their labels (:class:`seal_platform.registry.DiagnoserSpec`): the label set, the
reference label(s) each finer label refines, what each means, and the environments they label. A label that
refines no other is a reference label itself; A-Patch's base weights are per reference label, and every
:class:`TurnLabel` carries the reference label that applies to its turn in ``reference_label``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .plugins import PluginHost


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
            rows.append(LabelRow(name, plugin, label, tuple(spec.reference.get(label, ())), spec.meanings.get(label, "")))
    return rows
