"""Training-interface evolution on MCP tool docs, driven by the capability state (evaluation keeps revision 0).

Each change is switched on once the current epoch's labels show its trigger often enough:

* ``allowed_values`` (schema enums listed in the docs): ``argument_mismatch`` or ``recovery_failure``;
* ``required_markers`` (``required`` after each required parameter): ``recovery_failure`` or ``missing_tool_call``;
* ``recovery_hints`` (after a failed call, what the schema says): ``recovery_failure``;
* ``call_format`` (the call syntax restated with a call of a real tool): ``invalid_tool_call`` or
  ``empty_turn_model_response``.

The spec lists the active changes (sorted); None is returned when nothing new would switch on.
"""

from __future__ import annotations

from typing import Any

from seal_platform.types import Interface
from seal_platform_libs.toolenv.schemadocs import switch_on_changes

from .settings import MCPEvolutionSettings

TRIGGERS = {
    "allowed_values": ("argument_mismatch", "recovery_failure"),
    "required_markers": ("recovery_failure", "missing_tool_call"),
    "recovery_hints": ("recovery_failure",),
    "call_format": ("invalid_tool_call", "empty_turn_model_response"),
}


def evolve(interface: Interface, state: Any, settings: MCPEvolutionSettings) -> Interface | None:
    return switch_on_changes(interface, state, settings, TRIGGERS)
