"""A tool environment built on the shared library ``seal_platform_libs.toolenv`` instead of code of its own: tool docs
rendered under an interface revision, calls parsed in the Hermes format, recovery hints after failed calls, and
the training interface evolved from the capability state. docs/write-an-environment-plugin.md (section 12)
shows this file; `pytest examples/seal-kvstore/tests/test_toolenv_library.py` runs it. Like the rest of the
example it needs nothing but seal-platform.
"""

from __future__ import annotations

import json

from pydantic import Field

from seal_platform import hookimpl
from seal_platform.capability import CapabilityState
from seal_platform.config import RunConfig, Section
from seal_platform.context import RunContext
from seal_platform.types import Interface, Trajectory, TurnLabel, TurnVerdict
from seal_platform_libs.toolenv.evolution import EvolutionSettings, evolve
from seal_platform_libs.toolenv.formats import get_format
from seal_platform_libs.toolenv.interface import recovery_hint, render_tools, system_addendum

# BFCL-style tool docs: a JSON schema per tool; a closed value set may be stated in the description.
TOOL_DOCS = [{
    "name": "book_room",
    "description": "Book a meeting room for one hour.",
    "parameters": {
        "type": "dict",
        "required": ["room", "hour"],
        "properties": {
            "room": {"type": "string", "description": 'The room. [Enum]: ["red", "blue"]'},
            "hour": {"type": "integer", "description": "Start hour, 0-23."},
            "note": {"type": "string", "description": "A note for the booking."},
        },
    },
}]
FORMAT = get_format("hermes")  # or "python": the agent writes [book_room(room='red', hour=9)]


class CalendarSettings(Section):  # the recipe section `settings.calendar`, registered with register_settings
    # The stock default is the paper's static affordances (mode: reference); this example shows the closed loop.
    evolution: EvolutionSettings = Field(default_factory=lambda: EvolutionSettings(mode="closed_loop"))


def system_text(interface: Interface, category: str) -> str:
    """The system prompt under ``interface``: revision 0 shows TOOL_DOCS untouched and adds nothing."""
    docs = render_tools(TOOL_DOCS, interface, category)
    addendum = system_addendum(interface, category)
    return FORMAT.system_prompt(docs) + (f"\n\n{addendum}" if addendum else "")


def run_call(name: str, arguments: dict) -> str:
    if name != "book_room":
        return f"Error: unknown tool {name!r}"
    if arguments.get("room") not in ("red", "blue"):
        return json.dumps({"error": f"no room named {arguments.get('room')!r}"})
    return json.dumps({"booked": arguments["room"], "hour": arguments.get("hour")})


def tool_messages(interface: Interface, category: str, reply: str) -> list[str]:
    """The tool messages answering one assistant reply (model text is parsed, never evaluated)."""
    parsed = FORMAT.parse(reply)
    if not parsed.ok:  # malformed: the whole message is rejected with the format's error text
        return [FORMAT.render_error(parsed.error or "")]
    out = []
    for call in parsed.calls:
        result = run_call(call.name, call.arguments)
        hint = recovery_hint(interface, category, result)  # None unless the revision turned recovery on
        out.append(FORMAT.render_result(call.name, result + (f"\n{hint}" if hint else "")))
    return out


@hookimpl
def evolve_interface(ctx, interface: Interface, state: CapabilityState) -> Interface | None:
    """The next training revision from the capability state, or None (evaluation keeps revision 0)."""
    return evolve(interface, state, ctx.settings_for("calendar", CalendarSettings).evolution, ["booking"])


# --- what it does ------------------------------------------------------------------------------------------


def _state(label: str) -> CapabilityState:
    """The capability state after 20 failed rollouts whose one turn was labelled ``label``."""
    state = CapabilityState()
    trajectories = [Trajectory(id=f"t{i}", task_id=f"b{i}", group=f"b{i}", category="booking", reward=0.0,
                               turn_verdicts=[TurnVerdict(turn=0, passed=False)]) for i in range(20)]
    labels = [TurnLabel(trajectory_id=t.id, turn=0, label=label, source="calendar") for t in trajectories]
    state.update(0, 0, trajectories, labels)
    return state


def test_revision_0_is_the_plain_presentation() -> None:
    pristine = Interface()
    assert render_tools(TOOL_DOCS, pristine, "booking") is TOOL_DOCS and system_addendum(pristine, "booking") == ""
    assert system_text(pristine, "booking") == FORMAT.system_prompt(TOOL_DOCS)
    reply = '<tool_call>\n{"name": "book_room", "arguments": {"room": "green", "hour": 9}}\n</tool_call>'
    assert tool_messages(pristine, "booking", reply) == [
        '<tool_response>\n{"error": "no room named \'green\'"}\n</tool_response>'
    ]
    assert tool_messages(pristine, "booking", "<tool_call>{oops</tool_call>")[0].startswith(
        "<tool_response>\nError: Could not parse the tool call as JSON")


def test_the_capability_state_drives_the_next_revision(tmp_path) -> None:
    ctx = RunContext(config=RunConfig(environment="calendar"), run_id="t", run_dir=tmp_path)
    revision = evolve_interface(ctx, Interface(), _state("argument_mismatch"))
    assert revision is not None and revision.spec["scopes"]["booking"]["changes"] == ["enum_values", "required_markers"]
    room = render_tools(TOOL_DOCS, revision, "booking")[0]["parameters"]["properties"]["room"]
    assert room["description"] == '[required] The room. [Enum]: ["red", "blue"]. Allowed values: red, blue.'
    assert "Guidelines (from recent practice):" not in system_text(revision, "booking")  # a constraint cue
    assert TOOL_DOCS[0]["parameters"]["properties"]["room"]["description"] == 'The room. [Enum]: ["red", "blue"]'


def test_recovery_failures_turn_on_hints_after_failed_calls(tmp_path) -> None:
    ctx = RunContext(config=RunConfig(environment="calendar"), run_id="t", run_dir=tmp_path)
    revision = evolve_interface(ctx, Interface(), _state("recovery_failure"))
    assert revision is not None and "recovery" in revision.spec["scopes"]["booking"]["changes"]
    failed = '<tool_call>{"name": "book_room", "arguments": {"room": "green", "hour": 9}}</tool_call>'
    (message,) = tool_messages(revision, "booking", failed)
    assert "no room named" in message and "Hint: the call failed." in message
    booked = '<tool_call>{"name": "book_room", "arguments": {"room": "red", "hour": 9}}</tool_call>'
    assert tool_messages(revision, "booking", booked) == [
        '<tool_response>\n{"booked": "red", "hour": 9}\n</tool_response>'
    ]
