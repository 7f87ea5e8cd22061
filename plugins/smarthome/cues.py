"""The smart home's cue texts: guideline lines and recovery hints written for this environment (every request
is one action on one device with one of four tools), handed to the shared evolution and hint code.

BFCL's texts speak of paths, logins and requests that need no tool; none of that exists here."""

from __future__ import annotations

from seal_platform.labels import UNREACHED_LABEL
from seal_platform_libs.toolenv.evolution import CueTexts

TOOLS = "set_light, set_thermostat, lock_door and play_music"

CUES = CueTexts(
    guidelines={
        "missing_tool_call": "Every request is one action: call the one tool for the device it names (a light, "
        "a thermostat, a door, music).",
        "empty_turn_model_response": "Do not just describe the action: make the tool call that performs it.",
        UNREACHED_LABEL: "Make the call for each request right away, then answer in one short sentence.",
    },
    hints={
        "missing_argument": "Hint: the call is missing a required argument ({detail}). Call the tool again with "
        "every required parameter, e.g. the room.",
        "unexpected_argument": "Hint: the tool has no parameter {detail}. Use only the parameter names from its "
        "documentation.",
        "unknown_tool": f"Hint: there is no such tool. The tools are {TOOLS}.",
        "type_mismatch": "Hint: a value has the wrong type ({detail}). Numbers go as numbers, names as strings.",
        "tool_error": "Hint: the call was refused ({detail}). Use one of the allowed values listed in the tool's "
        "documentation and call it again.",
    },
)
