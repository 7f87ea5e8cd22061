"""Tool docs from JSON schemas (MCP ``inputSchema``), their rendering under an interface revision, argument
validation, and recovery hints (moved here from the mcp plugin). It depends only on the standard library and,
for :func:`validate_arguments`, on ``jsonschema`` >= 4.18, ``referencing`` and ``google-re2`` (imported when
called; the ``mcp`` and ``openenv`` extras install them).

A doc is ``{"name", "description", "input_schema"}``. The pristine rendering shows each tool with its
parameters and their descriptions; a training revision may add *required markers* (``required`` after a
parameter that must be given), *allowed values* (a schema's ``enum``, also inside ``anyOf``) and *recovery
hints* (after a failed call, what the schema says about the argument that failed).

Schemas come from the tool servers and are untrusted: any JSON may stand where a schema is expected. Rendering
skips what has the wrong shape; validation checks each schema once against its meta-schema, never fetches a
remote ``$ref`` (no network access, no hang), and refuses every call to a tool whose schema is unusable with a
reason the agent sees, instead of raising.

The regexes of a schema (``pattern``, ``patternProperties``, and the ``additionalProperties`` that depends on
them) run on RE2 (``google-re2``), not on Python's ``re``: jsonschema's own keywords use ``re``, whose
backtracking takes exponential time on patterns such as ``(a+)+$`` against a string the model controls (a hang
of the stage). RE2 matches in time linear in the text and bounds each compiled pattern's memory (its
``max_mem``, 8 MiB), and it rejects, at compile time, the features that need backtracking (lookaround,
backreferences) and repeat counts over 1000. A schema's pattern is valid (the meta-schema's ``regex`` format)
when RE2 or Python's ``re`` compiles it; a value or key that meets one RE2 cannot compile is refused with a
reason naming the argument (:class:`UncheckedPattern`), as is a non-empty object under ``unevaluatedProperties``
in a schema that also has ``patternProperties`` (jsonschema computes the evaluated keys with ``re``). Patterns
are ECMA-262 regexes; RE2's syntax covers the usual ones (classes, ``\\d``/``\\w``/``\\s``, anchors,
``(?:...)``, ``(?<name>...)``, ``\\p{L}``, counted repeats), ``\\uXXXX`` is rewritten to RE2's ``\\x{XXXX}``,
and, as in ECMA-262, ``$`` matches only at the very end and ``\\d``/``\\w`` are ASCII (Python's ``re`` let ``$``
match before a final newline and ``\\d`` any Unicode digit).
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from typing import Any

from seal_platform.labels import UNREACHED_LABEL

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


class UncheckedPattern(Exception):
    """The ``cause`` of a validation error for a value (or key) that a schema regex could not be run on: RE2
    cannot compile the pattern, or cannot take the text (a lone surrogate has no UTF-8). The call is refused."""


# ECMA-262's \uXXXX escape (Python's re knows it too), after an odd number of backslashes; RE2 spells it \x{XXXX}.
_UNICODE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


@lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (within RE2's default ``max_mem``, 8 MiB), or why it cannot be (a string)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # else RE2 prints every rejected pattern to stderr
    try:
        return re2.compile(_UNICODE_ESCAPE.sub(r"\1\\x{\2}", pattern), options)
    except Exception as exc:  # re2.error (its message is bytes), UnicodeEncodeError (a lone surrogate)
        reason = exc.args[0] if isinstance(exc, re2.error) and exc.args else exc
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        return f"RE2 cannot compile it: {reason[:120]}"


def _search(pattern: str, text: str) -> bool | str:
    """Whether ``pattern`` matches somewhere in ``text`` (``re.search`` semantics, in linear time), or why it
    cannot be checked (a string)."""
    compiled = _regex(pattern)
    if isinstance(compiled, str):
        return compiled
    try:
        return compiled.search(text) is not None
    except Exception as exc:  # UnicodeEncodeError: the text has a lone surrogate
        return f"{type(exc).__name__}: {str(exc)[:120]}"


@cache
def _linear_time_class(base: Any, patterns_anywhere: bool) -> Any:
    """``base`` (a jsonschema validator class) with every keyword that runs a schema regex replaced by one that
    runs it on RE2 (see the module doc). ``patterns_anywhere``: the schema has ``patternProperties`` somewhere,
    so its ``unevaluatedProperties`` (which would run them on ``re``) refuses any non-empty object."""
    from jsonschema import validators
    from jsonschema.exceptions import ValidationError

    def unchecked(pattern: str, reason: str, path: tuple[str, ...] = ()) -> Any:
        return ValidationError(f"cannot be checked against the tool's schema pattern {pattern!r} ({reason})",
                               path=path, cause=UncheckedPattern(reason))

    def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string"):
            found = _search(patrn, instance)
            if isinstance(found, str):
                yield unchecked(patrn, found)
            elif not found:
                yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, pattern_properties: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in pattern_properties.items():
            for key, value in instance.items():
                found = _search(patrn, key)
                if isinstance(found, str):
                    yield unchecked(patrn, found, (key,))
                elif found:
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, aP: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = set()
        for key in instance:
            if key in properties:
                continue
            results = [_search(p, key) for p in patterns]
            if True in results:
                continue
            unusable = [(p, r) for p, r in zip(patterns, results) if isinstance(r, str)]
            if unusable:
                yield unchecked(*unusable[0], (key,))
            else:
                extras.add(key)
        if validator.is_type(aP, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], aP, path=extra)
        elif not aP and extras:  # jsonschema's messages
            if patterns:
                verb = "does" if len(extras) == 1 else "do"
                joined = ", ".join(repr(each) for each in sorted(extras))
                yield ValidationError(f"{joined} {verb} not match any of the regexes: "
                                      f"{', '.join(repr(each) for each in sorted(patterns))}")
            else:
                listed = sorted(extras, key=str)
                yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, listed))} "
                                      f"{'was' if len(listed) == 1 else 'were'} unexpected)")

    original_unevaluated = base.VALIDATORS.get("unevaluatedProperties")

    def unevaluated_properties(validator: Any, uP: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "object") and instance:
            yield ValidationError(
                "cannot be checked: the tool's schema combines unevaluatedProperties with patternProperties, "
                "whose regexes jsonschema would run on Python's re (no time bound)",
                cause=UncheckedPattern("unevaluatedProperties with patternProperties"))

    replaced = {"pattern": pattern, "patternProperties": pattern_properties,
                "additionalProperties": additional_properties}
    if patterns_anywhere and original_unevaluated is not None:
        replaced["unevaluatedProperties"] = unevaluated_properties
    # Only the keywords this draft has: extending Draft 4 with unevaluatedProperties would add a keyword to it.
    return validators.extend(base, {k: v for k, v in replaced.items() if k in base.VALIDATORS})


@cache
def _schema_format_checker(base: Any) -> Any:
    """The format checker that ``check_schema`` uses for ``base``, its ``regex`` format (which the meta-schema
    gives ``pattern`` and the ``patternProperties`` keys) accepting what RE2 or Python's re compiles: RE2's
    ``\\p{L}`` and ``(?<name>...)`` are ECMA-262 too, and a pattern only re compiles (a lookahead) is refused
    where a call meets it rather than making the whole tool unusable."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    checker.checkers = dict(base.FORMAT_CHECKER.checkers)

    @checker.checks("regex")
    def is_regex(instance: object) -> bool:
        if not isinstance(instance, str) or not isinstance(_regex(instance), str):
            return True
        try:
            re.compile(instance)
        except Exception:  # re.error, or e.g. RecursionError/OverflowError on a hostile pattern
            return False
        return True

    return checker


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    """The validator of a schema (given as JSON text, so it can be cached: each schema is checked once), or
    the reason it cannot be used (a string)."""
    import jsonschema
    from referencing import Registry

    schema = json.loads(schema_text)
    try:
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_cls.check_schema(schema, format_checker=_schema_format_checker(validator_cls))
    except jsonschema.SchemaError as exc:
        return f"{exc.message[:200]} (at {'/'.join(str(p) for p in exc.path) or 'the top'})"
    except (TypeError, RecursionError) as exc:  # e.g. an unhashable "$schema", nesting deeper than the stack
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    # The text has this key (bare, quoted) only where some schema object (or a string value) is exactly it.
    linear_cls = _linear_time_class(validator_cls, '"patternProperties"' in schema_text)
    # An empty Registry retrieves nothing (its default ``retrieve`` refuses): a remote "$ref" is unresolvable
    # instead of fetched. Without one, jsonschema would open any URL a server names, with no timeout.
    return linear_cls(schema, registry=Registry())


def validate_arguments(doc: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """None when ``arguments`` satisfy the tool's input schema, else a one-line reason (the first error; an
    argument that a schema regex could not be run on comes first). A tool whose schema is invalid gets every call
    refused with a reason saying so; this never raises, and never runs a regex on a backtracking engine."""
    schema = doc.get("input_schema") or {"type": "object"}
    unusable = "the tool's input schema is invalid, so no call to it can be checked"
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError, RecursionError) as exc:  # not JSON
        return f"{unusable}: not JSON ({type(exc).__name__})"
    if isinstance(validator, str):
        return f"{unusable}: {validator}"
    try:
        errors = sorted(validator.iter_errors(arguments),
                        key=lambda e: (not isinstance(e.cause, UncheckedPattern), list(e.path)))
    except Exception as exc:  # a schema that passes its meta-schema can still fail here in any way: a "$ref"
        # that resolves to nothing, to a remote URL (refused), to itself, or to a value that is no schema
        return f"the tool's input schema cannot be applied to these arguments: {str(exc)[:200] or type(exc).__name__}"
    if not errors:
        return None
    err = errors[0]
    where = ".".join(str(p) for p in err.path) or "arguments"
    if err.validator in ("additionalProperties", "required") and not isinstance(err.cause, UncheckedPattern):
        return err.message[:300]
    return f"{where}: {err.message[:300]}"


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
            share = window.prevalence(label, exclude=(UNREACHED_LABEL,))
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
