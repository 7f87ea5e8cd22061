"""Tool docs from JSON schemas (MCP ``inputSchema``), their rendering under an interface revision, argument
validation, and recovery hints (moved here from the mcp plugin). It depends only on the standard library and,
for :func:`validate_arguments`, on ``jsonschema`` (imported when called; the ``mcp`` extra installs it).

A doc is ``{"name", "description", "input_schema"}``. The pristine rendering shows each tool with its
parameters and their descriptions; a training revision may add *required markers* (``required`` after a
parameter that must be given), *allowed values* (a schema's ``enum``, also inside ``anyOf``) and *recovery
hints* (after a failed call, what the schema says about the argument that failed).
"""

from __future__ import annotations

import json
from typing import Any

CHANGES = ("required_markers", "allowed_values", "recovery_hints", "call_format")


def enum_of(schema: dict[str, Any]) -> list[Any] | None:
    """The allowed values of a parameter schema (``enum``, or the enums of an ``anyOf``/``oneOf``)."""
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    for key in ("anyOf", "oneOf"):
        values = [v for sub in schema.get(key, []) if isinstance(sub, dict) for v in (enum_of(sub) or [])]
        if values:
            return values
    return None


def type_of(schema: dict[str, Any]) -> str:
    if isinstance(schema.get("type"), str):
        return schema["type"]
    types = [s.get("type") for s in schema.get("anyOf", []) if isinstance(s, dict) and s.get("type") != "null"]
    return "/".join(t for t in types if isinstance(t, str)) or "any"


def render_docs(docs: list[dict[str, Any]], changes: list[str] | tuple[str, ...] = ()) -> str:
    """Short text lines per tool (a small model reads these better than raw JSON schemas)."""
    lines = []
    for doc in docs:
        schema = doc.get("input_schema") or {}
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        lines.append(f"- {doc['name']}({', '.join(props)}): {doc.get('description', '').strip()}")
        for key, prop in props.items():
            prop = prop if isinstance(prop, dict) else {}
            text = f"    {key} ({type_of(prop)})"
            if "required_markers" in changes and key in required:
                text += ", required"
            desc = prop.get("description") or ""
            if desc:
                text += f": {desc}"
            values = enum_of(prop)
            if "allowed_values" in changes and values:
                text += f" Allowed values: {', '.join(json.dumps(v) for v in values)}."
            lines.append(text)
    return "\n".join(lines)


def validate_arguments(doc: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when ``arguments`` satisfy the tool's input schema, else a one-line reason (the first error)."""
    import jsonschema

    schema = doc.get("input_schema") or {"type": "object"}
    try:
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        errors = sorted(validator_cls(schema).iter_errors(arguments), key=lambda e: list(e.path))
    except (jsonschema.SchemaError, RecursionError) as exc:
        return f"the tool's schema cannot be checked: {str(exc)[:200]}"
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path) or "arguments"
    if err.validator == "additionalProperties" or err.validator == "required":
        return err.message[:300]
    return f"{where}: {err.message[:300]}"


def extra_properties_allowed(doc: dict[str, Any]) -> bool:
    return (doc.get("input_schema") or {}).get("additionalProperties", True) is not False


def unknown_arguments(doc: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Argument names the schema does not define (MCP servers built from signatures mostly ignore them
    silently, which would hide a mistake from the agent; they are rejected here)."""
    props = (doc.get("input_schema") or {}).get("properties") or {}
    return [k for k in arguments if k not in props]


def recovery_hint(doc: dict[str, Any] | None, error: str, tool_names: list[str]) -> str:
    """A hint for the agent after a failed call, from the schema of the tool it called."""
    if doc is None:
        return f"Hint: the available tools are {', '.join(tool_names)}."
    schema = doc.get("input_schema") or {}
    props = schema.get("properties") or {}
    parts = []
    required = schema.get("required") or []
    if required:
        parts.append(f"{doc['name']} requires {', '.join(required)}")
    for key, prop in props.items():
        values = enum_of(prop) if isinstance(prop, dict) else None
        if values and key in error:
            parts.append(f"{key} must be one of {', '.join(json.dumps(v) for v in values)}")
    if not parts:
        parts.append("check the arguments against the tool's description")
    return "Hint: " + "; ".join(parts) + ". Try again."


def switch_on_changes(interface: Any, state: Any, settings: Any,
                      triggers: dict[str, tuple[str, ...]]) -> Any:
    """The next training interface of schema-doc environments (``mcp``, ``openenv``): each change of
    ``triggers`` (change -> labels that switch it on) is switched on once one of its labels reaches
    ``settings.min_count`` turns and ``settings.min_prevalence`` of the reached turns in the state's window.
    The spec lists the active changes (sorted); None when the evolution is off or nothing new switches on."""
    from seal_platform.types import Interface

    if not settings.enabled:
        return None
    window = state.window
    active = set(interface.spec.get("changes", []))
    driven_by: list[str] = []
    for change, labels in triggers.items():
        for label in labels:
            share = window.prevalence(label, exclude=("unreached_turn",))
            if window.count(label) >= settings.min_count and share >= settings.min_prevalence:
                if change not in active:
                    driven_by.append(label)
                active.add(change)
                break
    if not driven_by:
        return None
    changes = sorted(active)
    return Interface(spec={"changes": changes},
                     changes=[f"added {c}" for c in changes if c not in interface.spec.get("changes", [])],
                     driven_by=sorted(set(driven_by)))
