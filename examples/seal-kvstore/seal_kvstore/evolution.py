"""Interface evolution from the capability state (training only; evaluation keeps revision 0).

Two changes, each switched on once the current epoch's labels show the problem often enough:

* ``format_example``: a worked call in the system text, when ``invalid_tool_call`` is frequent;
* ``read_back``: "answer with the tool's result", when ``response_mismatch`` is frequent.

The spec lists the active changes (sorted); None is returned when they would not change.
"""

from __future__ import annotations

from pydantic import Field

from seal_platform.capability import CapabilityState
from seal_platform.config import Section
from seal_platform.types import Interface

TRIGGERS = {"format_example": "invalid_tool_call", "read_back": "response_mismatch"}
TEXT = {
    "format_example": 'Example: <tool_call>{"name": "put", "arguments": {"key": "color", "value": "blue"}}</tool_call>',
    "read_back": "When the user asks what is stored, call get (or list_keys) and repeat its result.",
}


class EvolutionSettings(Section):
    enabled: bool = True
    min_count: int = Field(
        default=4, ge=1, le=1_000_000, description="Labelled turns needed before a label can switch a change on."
    )
    min_prevalence: float = Field(default=0.2, ge=0.0, le=1.0, description="Share of labelled turns needed.")


def system_text(base: str, changes: list[str]) -> str:
    return "\n".join([base, *(TEXT[c] for c in changes)])


def evolve(
    interface: Interface, state: CapabilityState, settings: EvolutionSettings, base_text: str
) -> Interface | None:
    if not settings.enabled:
        return None
    window = state.window
    active = set(interface.spec.get("changes", []))
    driven_by = []
    for change, label in TRIGGERS.items():
        share = window.prevalence(label, exclude=("unreached_turn",))  # unreached turns say nothing of the agent
        if window.count(label) >= settings.min_count and share >= settings.min_prevalence:
            if change not in active:
                driven_by.append(label)
            active.add(change)
    if not driven_by:
        return None
    changes = sorted(active)
    # revision, parent and step are the core's to set.
    return Interface(system_text=system_text(base_text, changes), spec={"changes": changes},
                     changes=[f"added {c}" for c in changes if c not in interface.spec.get("changes", [])],
                     driven_by=driven_by)
