"""How an interface revision changes what the BFCL agent sees (training only).

Revision 0 is the pristine interface: every function here returns its input unchanged for it, so evaluation
prompts are byte-identical to the official presentation. (Initial stubs; issue 5 fills them in.)
"""

from __future__ import annotations

from typing import Any

from seal_platform.types import Interface


def render_tools(tool_docs: list[dict[str, Any]], interface: Interface, category: str) -> list[dict[str, Any]]:
    """The tool docs the agent sees under ``interface`` for a task of ``category``."""
    return tool_docs


def system_addendum(interface: Interface, category: str) -> str:
    """Extra system-prompt text under ``interface`` ("" for the pristine one)."""
    return ""


def recovery_hint(interface: Interface, category: str, observation: str) -> str | None:
    """A hint to append after a failed call's observation, or None."""
    return None
