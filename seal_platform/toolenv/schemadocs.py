"""Tool docs from JSON schemas (MCP ``inputSchema``), their rendering under an interface revision, argument
validation, and recovery hints (moved here from the mcp plugin). It depends only on the standard library and,
for :func:`validate_arguments`, on ``jsonschema`` >= 4.18 and ``referencing`` (imported when called; the ``mcp``
extra installs them).

A doc is ``{"name", "description", "input_schema"}``. The pristine rendering shows each tool with its
parameters and their descriptions; a training revision may add *required markers* (``required`` after a
parameter that must be given), *allowed values* (a schema's ``enum``, also inside ``anyOf``) and *recovery
hints* (after a failed call, what the schema says about the argument that failed).

Schemas come from the tool servers and are untrusted: any JSON may stand where a schema is expected. Rendering
skips what has the wrong shape; validation checks each schema once against its meta-schema, never fetches a
remote ``$ref`` (no network access, no hang), and refuses every call to a tool whose schema is unusable with a
reason the agent sees, instead of raising.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

CHANGES = ("required_markers", "allowed_values", "recovery_hints", "call_format")
# anyOf/oneOf nesting that enum_of and type_of look into (a server may nest them thousands deep).
MAX_SCHEMA_DEPTH = 8


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def enum_of(schema: dict[str, Any], _depth: int = 0) -> list[Any] | None:
    """The allowed values of a parameter schema (``enum``, or the enums of an ``anyOf``/``oneOf``)."""
    if not isinstance(schema, dict) or _depth > MAX_SCHEMA_DEPTH:
        return None
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    for key in ("anyOf", "oneOf"):
        subs = schema.get(key)
        values = [v for sub in (subs if isinstance(subs, list) else []) for v in (enum_of(sub, _depth + 1) or [])]
        if values:
            return values
    return None


def type_of(schema: dict[str, Any]) -> str:
    schema = _dict(schema)
    if isinstance(schema.get("type"), str):
        return schema["type"]
    subs = schema.get("anyOf")
    types = [s.get("type") for s in (subs if isinstance(subs, list) else []) if isinstance(s, dict)]
    return "/".join(t for t in types if isinstance(t, str) and t != "null") or "any"


def render_docs(docs: list[dict[str, Any]], changes: list[str] | tuple[str, ...] = ()) -> str:
    """Short text lines per tool (a small model reads these better than raw JSON schemas)."""
    lines = []
    for doc in docs:
        schema = _dict(doc.get("input_schema"))
        props = _dict(schema.get("properties"))
        required = set(_strings(schema.get("required")))
        description = doc.get("description")
        description = description.strip() if isinstance(description, str) else ""
        lines.append(f"- {doc['name']}({', '.join(props)}): {description}")
        for key, prop in props.items():
            prop = _dict(prop)
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


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    """The validator of a schema (given as JSON text, so it can be cached: each schema is checked once), or
    the reason it cannot be used (a string)."""
    import jsonschema
    from referencing import Registry

    schema = json.loads(schema_text)
    try:
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"{exc.message[:200]} (at {'/'.join(str(p) for p in exc.path) or 'the top'})"
    except (TypeError, RecursionError) as exc:  # e.g. an unhashable "$schema", nesting deeper than the stack
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    # An empty Registry retrieves nothing (its default ``retrieve`` refuses): a remote "$ref" is unresolvable
    # instead of fetched. Without one, jsonschema would open any URL a server names, with no timeout.
    return validator_cls(schema, registry=Registry())


def validate_arguments(doc: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when ``arguments`` satisfy the tool's input schema, else a one-line reason (the first error). A tool
    whose schema is invalid gets every call refused with a reason saying so; this never raises."""
    schema = doc.get("input_schema") or {"type": "object"}
    unusable = "the tool's input schema is invalid, so no call to it can be checked"
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError, RecursionError) as exc:  # not JSON
        return f"{unusable}: not JSON ({type(exc).__name__})"
    if isinstance(validator, str):
        return f"{unusable}: {validator}"
    try:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    except Exception as exc:  # a schema that passes its meta-schema can still fail here in any way: a "$ref"
        # that resolves to nothing, to a remote URL (refused), to itself, or to a value that is no schema
        return f"the tool's input schema cannot be applied to these arguments: {str(exc)[:200] or type(exc).__name__}"
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path) or "arguments"
    if err.validator == "additionalProperties" or err.validator == "required":
        return err.message[:300]
    return f"{where}: {err.message[:300]}"


def extra_properties_allowed(doc: dict[str, Any]) -> bool:
    return _dict(doc.get("input_schema")).get("additionalProperties", True) is not False


def unknown_arguments(doc: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Argument names the schema does not define (MCP servers built from signatures mostly ignore them
    silently, which would hide a mistake from the agent; they are rejected here)."""
    props = _dict(_dict(doc.get("input_schema")).get("properties"))
    return [k for k in arguments if k not in props]


def recovery_hint(doc: dict[str, Any] | None, error: str, tool_names: list[str]) -> str:
    """A hint for the agent after a failed call, from the schema of the tool it called."""
    if doc is None:
        return f"Hint: the available tools are {', '.join(tool_names)}."
    schema = _dict(doc.get("input_schema"))
    props = _dict(schema.get("properties"))
    parts = []
    required = _strings(schema.get("required"))
    if required:
        parts.append(f"{doc['name']} requires {', '.join(required)}")
    for key, prop in props.items():
        values = enum_of(prop)
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
