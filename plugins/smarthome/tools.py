"""The smart-home backend: four tools with required parameters and enumerated values, their docs, and a
validating executor over a plain state dict.

Arguments come from model text through ``json.loads`` only; they are checked against the tool's schema
(required, unknown, enum and integer range) before anything runs, and never evaluated. Errors come back as
``Error during execution: ...`` strings, the shape the shared recovery-feedback classifier reads
(:func:`seal_platform_libs.toolenv.interface.classify_observation`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

ROOMS = ("kitchen", "bedroom", "living_room", "office")
DOORS = ("front", "back", "garage")
GENRES = ("jazz", "rock", "classical", "pop")

# Tool docs in the JSON-schema shape BFCL's docs use, so the shared renderers (required markers, allowed
# values, type hints) apply unchanged. The pristine presentation shows descriptions, not the enum lists.
TOOL_DOCS: list[dict[str, Any]] = [
    {
        "name": "set_light",
        "description": "Switch the light of a room on or off.",
        "parameters": {
            "type": "dict",
            "properties": {
                "room": {"type": "string", "description": "The room.", "enum": list(ROOMS)},
                "state": {"type": "string", "description": "The new light state.", "enum": ["on", "off"]},
                "brightness": {"type": "integer", "description": "Brightness in percent, 1 to 100."},
            },
            "required": ["room", "state"],
        },
    },
    {
        "name": "set_thermostat",
        "description": "Set the target temperature of a room in degrees Celsius.",
        "parameters": {
            "type": "dict",
            "properties": {
                "room": {"type": "string", "description": "The room.", "enum": list(ROOMS)},
                "temperature": {"type": "integer", "description": "Degrees Celsius, 16 to 28."},
                "mode": {"type": "string", "description": "The climate mode.", "enum": ["heat", "cool", "auto"]},
            },
            "required": ["room", "temperature"],
        },
    },
    {
        "name": "lock_door",
        "description": "Lock or unlock a door.",
        "parameters": {
            "type": "dict",
            "properties": {
                "door": {"type": "string", "description": "The door.", "enum": list(DOORS)},
                "action": {"type": "string", "description": "What to do.", "enum": ["lock", "unlock"]},
            },
            "required": ["door", "action"],
        },
    },
    {
        "name": "play_music",
        "description": "Play music of a genre in a room.",
        "parameters": {
            "type": "dict",
            "properties": {
                "room": {"type": "string", "description": "The room.", "enum": list(ROOMS)},
                "genre": {"type": "string", "description": "The music genre.", "enum": list(GENRES)},
                "volume": {"type": "integer", "description": "Volume, 0 to 10."},
            },
            "required": ["room", "genre"],
        },
    },
]
DOCS_BY_NAME = {doc["name"]: doc for doc in TOOL_DOCS}
RANGES = {("set_light", "brightness"): (1, 100), ("set_thermostat", "temperature"): (16, 28),
          ("play_music", "volume"): (0, 10)}


class ToolError(ValueError):
    """A call the backend refuses; the message is what the agent reads."""


def initial_state(rng: Any) -> dict[str, Any]:
    """A random home: the verifier compares whole states, so unasked-for changes fail a turn."""
    return {
        "lights": {r: {"state": rng.choice(["on", "off"]), "brightness": 50} for r in ROOMS},
        "thermostats": {r: {"temperature": rng.randint(18, 24), "mode": "auto"} for r in ROOMS},
        "doors": {d: rng.choice(["locked", "unlocked"]) for d in DOORS},
        "music": {r: None for r in ROOMS},
    }


def check_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """The call's arguments once they satisfy the tool's schema; :class:`ToolError` otherwise."""
    doc = DOCS_BY_NAME.get(name)
    if doc is None:
        raise ToolError(f"unknown tool {name!r}; available tools: {', '.join(DOCS_BY_NAME)}")
    if not isinstance(arguments, dict):
        raise ToolError("arguments must be an object")
    params = doc["parameters"]
    props = params["properties"]
    unexpected = [k for k in arguments if k not in props]
    if unexpected:
        raise ToolError(f"{name}() got an unexpected keyword argument '{unexpected[0]}'")
    missing = [k for k in params["required"] if k not in arguments]
    if missing:
        raise ToolError(f"{name}() missing required argument: {', '.join(missing)}")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        schema = props[key]
        if schema["type"] == "integer":
            # a float must be whole (not NaN or infinite: JSON's NaN, Infinity and 1e999 parse to those)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or isinstance(value, float) and not value.is_integer()):
                raise ToolError(f"{key} must be an integer, got {json.dumps(value)[:40]}")
            value = int(value)
            lo, hi = RANGES[(name, key)]
            if not lo <= value <= hi:
                raise ToolError(f"{key} must be between {lo} and {hi}, got {json.dumps(value)[:40]}")
        elif not isinstance(value, str):
            raise ToolError(f"{key} must be a string, got {json.dumps(value)[:40]}")
        if "enum" in schema and value not in schema["enum"]:
            raise ToolError(f"invalid value {value!r} for {key}")
        out[key] = value
    return out


def execute(state: dict[str, Any], name: str, arguments: Any) -> str:
    """Run one call on ``state`` (in place) and return its result text; :class:`ToolError` if refused."""
    args = check_arguments(name, arguments)
    if name == "set_light":
        light = state["lights"][args["room"]]
        light["state"] = args["state"]
        if "brightness" in args:
            light["brightness"] = args["brightness"]
        return json.dumps({"room": args["room"], "light": light["state"]})
    if name == "set_thermostat":
        thermo = state["thermostats"][args["room"]]
        thermo["temperature"] = args["temperature"]
        if "mode" in args:
            thermo["mode"] = args["mode"]
        return json.dumps({"room": args["room"], "temperature": thermo["temperature"]})
    if name == "lock_door":
        state["doors"][args["door"]] = "locked" if args["action"] == "lock" else "unlocked"
        return json.dumps({"door": args["door"], "status": state["doors"][args["door"]]})
    if name == "play_music":
        state["music"][args["room"]] = {"genre": args["genre"], "volume": args.get("volume", 5)}
        return json.dumps({"room": args["room"], "playing": args["genre"]})
    raise ToolError(f"unknown tool {name!r}")  # pragma: no cover - check_arguments rejects it first


def run_calls(state: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``state`` after ``calls`` (ground truth: they must all succeed)."""
    out = copy.deepcopy(state)
    for call in calls:
        execute(out, call["name"], call["arguments"])
    return out


def render_docs(docs: list[dict[str, Any]]) -> str:
    """Tool docs as short text lines (a 135M model reads these better than JSON schemas, and CPU prefill
    time grows with the prompt)."""
    lines = []
    for doc in docs:
        props = doc["parameters"]["properties"]
        lines.append(f"- {doc['name']}({', '.join(props)}): {doc['description']}")
        for key, schema in props.items():
            lines.append(f"    {key}: {schema.get('description', '')}")
    return "\n".join(lines)
