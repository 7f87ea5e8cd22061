"""Training-interface evolution on the action doc, driven by the capability state (evaluation keeps revision 0).

Each change (rendered by the shared tool-doc helpers, ``seal_platform_libs.toolenv.schemadocs``) is switched on once the
current epoch's labels show its trigger often enough:

* ``allowed_values`` (schema enums listed in the doc): ``invalid_arguments`` or ``action_refused``;
* ``required_markers`` (``required`` after each required field): ``invalid_arguments``;
* ``recovery_hints`` (after an invalid or refused action, what the schema says): ``invalid_arguments`` or
  ``action_refused``;
* ``call_format`` (the call syntax restated): ``invalid_tool_call`` or ``empty_turn_model_response``.

``failed_episode`` and ``unrewarded_step`` switch nothing on: the action was well-formed and accepted, and
what a better doc could say about the environment's goal is not in its schema.
"""

from __future__ import annotations

from typing import Any

from seal_platform.types import Interface
from seal_platform_libs.toolenv.schemadocs import switch_on_changes

from .settings import OpenEnvEvolutionSettings

TRIGGERS = {
    "allowed_values": ("invalid_arguments", "action_refused"),
    "required_markers": ("invalid_arguments",),
    "recovery_hints": ("invalid_arguments", "action_refused"),
    "call_format": ("invalid_tool_call", "empty_turn_model_response"),
}


def evolve(interface: Interface, state: Any, settings: OpenEnvEvolutionSettings) -> Interface | None:
    return switch_on_changes(interface, state, settings, TRIGGERS)
