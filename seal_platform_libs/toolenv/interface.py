"""How an interface revision changes what the agent of a tool environment sees (training only).

Tool docs are BFCL-style JSON (``{"name", "description", "parameters": {"type", "properties", "required"}}``);
the ``bfcl`` and ``smarthome`` plugins render theirs through here.

Revision 0 is the pristine interface (spec ``{}``): every function here returns its input unchanged for it
(``render_tools`` returns the very list it was given, ``system_addendum`` returns "" and ``recovery_hint``
None), so evaluation prompts are byte-identical to the official presentation. Which changes a revision
activates, and why, is decided in :mod:`seal_platform_libs.toolenv.evolution`; the spec it writes is an
:class:`InterfaceSpec`, stored as::

    {"version": 1, "scopes": {"<category or *>": {"changes": [...sorted names...],
                                                  "guidelines": [{"label": ..., "text": ...}, ...]}}}

Everything the renderers need is in the spec, so a stored revision renders the same way later, whatever
the settings of the run that reads it.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from pydantic import ConfigDict, Field

from seal_platform.config import Section
from seal_platform.types import Interface

ALL_SCOPES = "*"
SPEC_VERSION = 1

NO_INVENT_NOTE = (
    "Only call the tools listed above, with their exact names and declared parameters. Never invent a tool "
    "or a parameter; if no listed tool can do what is asked, say so instead of calling one."
)
GUIDELINES_HEADER = "Guidelines (from recent practice):"


class Guideline(Section):
    """One line of the capability guidelines, and the label that put it there."""

    model_config = ConfigDict(frozen=True)

    label: str
    text: str


class ScopeSpec(Section):
    """What a revision activates for one scope (a category, or ``*`` for every category)."""

    changes: list[str] = Field(default_factory=list)
    guidelines: list[Guideline] = Field(default_factory=list)

    def dump(self) -> dict[str, Any]:
        """The stored form: only what is set, changes sorted."""
        out: dict[str, Any] = {}
        if self.changes:
            out["changes"] = sorted(self.changes)
        if self.guidelines:
            out["guidelines"] = [g.model_dump() for g in self.guidelines]
        return out


class InterfaceSpec(Section):
    """The typed form of a tool environment's ``Interface.spec`` (formerly ``BfclSpec`` in the bfcl plugin):
    every reader and writer goes through this model, so the keys are spelled here only. The pristine
    interface's spec is ``{}`` (no scopes)."""

    version: int = SPEC_VERSION
    scopes: dict[str, ScopeSpec] = Field(default_factory=dict)

    @classmethod
    def of(cls, spec: dict[str, Any] | Interface) -> InterfaceSpec:
        raw = spec.spec if isinstance(spec, Interface) else spec
        return cls.model_validate(raw) if raw else cls()

    def scope(self, category: str) -> ScopeSpec:
        """The scope that applies to tasks of ``category``: its own, else ``*``, else an empty one."""
        return self.scopes.get(category) or self.scopes.get(ALL_SCOPES) or ScopeSpec()

    def dump(self) -> dict[str, Any]:
        """The stored form (``{}`` when no scope is active; scopes sorted by name)."""
        scopes = {name: self.scopes[name].dump() for name in sorted(self.scopes) if self.scopes[name].dump()}
        return {"version": self.version, "scopes": scopes} if scopes else {}


def scope_of(interface: Interface, category: str) -> ScopeSpec:
    """The part of ``interface``'s spec that applies to tasks of ``category`` (empty when none)."""
    return InterfaceSpec.of(interface).scope(category)


def active_changes(interface: Interface, category: str) -> set[str]:
    """Names of the changes ``interface`` activates for ``category``."""
    return set(scope_of(interface, category).changes)


# --- tool docs ---------------------------------------------------------------------------------------------

_ENUM_LIST = re.compile(r"\[Enum\]\s*:\s*\[([^\]]*)\]", re.IGNORECASE)
_ENUM_PLAIN = re.compile(r"\[Enum\]\s*:\s*([^\[\]\n]+)", re.IGNORECASE)
_OPTIONS = re.compile(r"(?:here are the options|options are|one of)\s*:\s*([^\n]+)", re.IGNORECASE)
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")


def _split_values(text: str) -> list[str]:
    text = text.strip().rstrip(".").strip()
    return [v.strip().strip("\"'") for v in text.split(",") if v.strip().strip("\"'")]


def enum_values(schema: dict[str, Any]) -> list[str]:
    """The closed set of values a parameter accepts, from its ``enum`` field or its description.

    BFCL mostly states enums in prose ("[Enum]: [\"on\", \"off\"]", "[Enum]: USD, RMB", "Options are: a,
    b, c."); only a few docs use the JSON-schema ``enum`` field. Arrays take their items' values.
    """
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return [str(v) for v in schema["enum"]]
    items = schema.get("items")
    if isinstance(items, dict) and isinstance(items.get("enum"), list) and items["enum"]:
        return [str(v) for v in items["enum"]]
    desc = schema.get("description") or ""
    if not isinstance(desc, str):
        return []
    m = _ENUM_LIST.search(desc)
    if m:
        return [a or b for a, b in _QUOTED.findall(m.group(1))] or _split_values(m.group(1))
    for pattern in (_ENUM_PLAIN, _OPTIONS):
        m = pattern.search(desc)
        if m:
            return _split_values(m.group(1))
    return []


def type_text(schema: dict[str, Any]) -> str | None:
    """A short readable type ("string", "array of float") or None when the schema has none."""
    kind = schema.get("type")
    if not isinstance(kind, str):
        return None
    items = schema.get("items")
    if kind == "array" and isinstance(items, dict) and isinstance(items.get("type"), str):
        return f"array of {items['type']}"
    return kind


def _append(desc: str, text: str) -> str:
    desc = desc.rstrip()
    if not desc:
        return text
    return f"{desc} {text}" if desc[-1] in ".!?:;" else f"{desc}. {text}"


def _render_params(params: dict[str, Any], changes: set[str], top: bool) -> None:
    """Rewrite a parameters object (``{"type", "properties", "required"}``) in place."""
    props = params.get("properties")
    if not isinstance(props, dict):
        return
    required = params.get("required")
    required = set(required) if isinstance(required, list) else set()
    if top and "hide_optional" in changes:
        for name in [n for n in props if n not in required]:
            del props[name]
    for name, schema in props.items():
        if not isinstance(schema, dict):
            continue
        desc = schema.get("description")
        desc = desc if isinstance(desc, str) else ""
        if "required_markers" in changes and name in required and not desc.startswith("[required]"):
            desc = f"[required] {desc}".rstrip()
        if "enum_values" in changes and "Allowed values:" not in desc:
            values = enum_values(schema)
            if values:
                desc = _append(desc, "Allowed values: " + ", ".join(values) + ".")
        if "type_hints" in changes:
            kind = type_text(schema)
            if kind:
                desc = _append(desc, f"Type: {kind}.")
        if desc != (schema.get("description") or ""):
            schema["description"] = desc
        # Nested objects (ticket updates, transaction lists) carry their own required lists.
        _render_params(schema, changes, top=False)
        items = schema.get("items")
        if isinstance(items, dict):
            _render_params(items, changes, top=False)


def render_tools(tool_docs: list[dict[str, Any]], interface: Interface, category: str) -> list[dict[str, Any]]:
    """The tool docs the agent sees under ``interface`` for a task of ``category``.

    When no schema change is active (revision 0 in particular) the input list itself is returned, untouched;
    otherwise a rewritten deep copy (the caller's docs are never modified).
    """
    changes = active_changes(interface, category) & {"required_markers", "enum_values", "type_hints", "hide_optional"}
    if not changes:
        return tool_docs
    rendered = copy.deepcopy(tool_docs)
    for doc in rendered:
        params = doc.get("parameters") if isinstance(doc, dict) else None
        if isinstance(params, dict):
            _render_params(params, changes, top=True)
    return rendered


# --- system prompt -----------------------------------------------------------------------------------------


def _scope_addendum(scope: ScopeSpec) -> str:
    parts: list[str] = []
    if "no_invent_note" in scope.changes:
        parts.append(NO_INVENT_NOTE)
    lines = [g.text for g in scope.guidelines if g.text]
    if lines:
        parts.append("\n".join([GUIDELINES_HEADER, *(f"- {line}" for line in lines)]))
    return "\n\n".join(parts)


def system_addendum(interface: Interface, category: str) -> str:
    """Extra system-prompt text under ``interface`` for ``category`` ("" for the pristine one)."""
    return _scope_addendum(scope_of(interface, category))


def describe_system(spec: dict[str, Any] | InterfaceSpec) -> str:
    """A readable rendering of every scope's system addendum (stored as ``Interface.system_text``)."""
    typed = spec if isinstance(spec, InterfaceSpec) else InterfaceSpec.of(spec)
    blocks = []
    for name, scope in sorted(typed.scopes.items()):
        text = _scope_addendum(scope)
        if text:
            blocks.append(f"[{name}]\n{text}")
    return "\n\n".join(blocks)


# --- recovery feedback -------------------------------------------------------------------------------------

# The key of an ``{"error": ...}`` result (or a Python-repr'd one), at the start of the text inside the braces.
# Observations are untrusted and may hold long whitespace runs: the braces and tags around them are found with
# str.strip / startswith / endswith, never a regex with whitespace on both sides of a lazy group (quadratic
# or worse on such runs).
_ERROR_KEY = re.compile(r"[\"']error[\"']\s*:")
# Formats wrap observations (``<tool_response>...</tool_response>`` for Hermes); the hint reads the inside.
_OPEN_TAG, _CLOSE_TAG = "<tool_response>", "</tool_response>"
_EXEC_ERROR = re.compile(r"Error during execution:\s*(.*)", re.DOTALL)
_PLAIN_ERROR = re.compile(r"^error\s*:\s*(.*)", re.DOTALL | re.IGNORECASE)
_PARSE = re.compile(
    r"pars(e|ing) error|could not (be )?pars|malformed|invalid json|not valid json|could not decode|"
    r"failed to parse|unparsable|unparseable|block is not closed|tag has no opening|invalid call syntax|"
    r"not a function call|arguments must be an object|argument names must be strings|"
    r"tool name must be a non-empty string|called object must be a plain tool name",
    re.IGNORECASE,
)
_UNKNOWN_TOOL = re.compile(
    r"unknown (tool|function)|no (such )?(tool|function) (named|called)?|not an available (tool|function)|"
    r"(tool|function) .{0,80}(is )?not (available|in the (current )?(tool|function) list)|"
    r"object has no attribute|is not defined",
    re.IGNORECASE,
)
_MISSING = re.compile(r"missing (?:\d+ )?required (?:positional |keyword-only )?arguments?:?\s*(.*)", re.IGNORECASE)
_UNEXPECTED = re.compile(
    r"unexpected keyword argument\s*'?([^'\s]*)'?|got multiple values for argument\s*'?([^'\s]*)'?|"
    r"takes \d+ (?:positional )?arguments?(?:\(s\))? but \d+ (?:positional )?(?:arguments?(?:\(s\))? )?"
    r"(?:were|was) given",
    re.IGNORECASE,
)
_NOT_AUTH = re.compile(
    r"not authenticated|not logged in|no user is currently logged in|log ?in|authenticate|token expired|"
    r"invalid access token|token not (initialized|found)",
    re.IGNORECASE,
)
_PATH = re.compile(
    r"no such (file|directory)|not a directory|not a file or directory|unsupported path|path not allowed|"
    r"is a directory",
    re.IGNORECASE,
)
_TYPE = re.compile(
    r"must be (a )?(number|numbers|str|string|int|integer|float|list|dict|real number)|"
    r"must be numbers|not supported between instances|unsupported operand type|can only concatenate|"
    r"object is not (iterable|subscriptable|callable)|invalid literal for|could not convert|"
    r"object cannot be interpreted as|expected .{0,40} got|typeerror|must be json values",
    re.IGNORECASE,
)


def classify_observation(observation: str) -> tuple[str, str] | None:
    """What went wrong, as (kind, detail), when ``observation`` reports a failure; None otherwise.

    Kinds: ``parse_error``, ``unknown_tool``, ``missing_argument``, ``unexpected_argument``,
    ``not_authenticated``, ``unknown_path``, ``type_mismatch`` and ``tool_error`` (any other error).
    Tool errors come as ``{"error": ...}`` results or as ``Error during execution: ...`` strings (the
    reference only sees the first kind); the text is only matched, never evaluated.
    """
    if not isinstance(observation, str) or not observation.strip():
        return None
    text = observation.strip()
    if text.startswith(_OPEN_TAG) and text.endswith(_CLOSE_TAG) and len(text) >= len(_OPEN_TAG + _CLOSE_TAG):
        observation = text[len(_OPEN_TAG):-len(_CLOSE_TAG)].strip()
    message: str | None = None
    text = observation.strip()
    inner = text[1:-1].strip() if text.startswith("{") and text.endswith("}") else ""
    key = _ERROR_KEY.match(inner)
    if key:
        message = inner[key.end():].strip()
        try:
            decoded = json.loads(observation)
            if isinstance(decoded, dict) and "error" in decoded:
                message = str(decoded["error"])
        except ValueError:
            message = message.strip().strip("\"'")
    else:
        m = _EXEC_ERROR.search(observation)
        if m:
            message = m.group(1).strip()
    if message is None:
        # The episode's own rejections: parse errors, unknown tools, or any other "Error: ..." it reports.
        text = observation.strip()
        if _PARSE.search(text):
            return "parse_error", text
        if _UNKNOWN_TOOL.search(text):
            return "unknown_tool", text
        m = _PLAIN_ERROR.match(text)
        if m:
            message = m.group(1).strip()
        else:
            # Not error-shaped: only the unmistakable argument errors (the episode's own rejections of a
            # call's arguments) count, so that an ordinary result mentioning "log in" gets no hint.
            return _argument_problem(text)
    found = _argument_problem(message)
    if found:
        return found
    if _NOT_AUTH.search(message):
        return "not_authenticated", message
    if _PATH.search(message):
        return "unknown_path", message
    if _UNKNOWN_TOOL.search(message):
        return "unknown_tool", message
    if _TYPE.search(message):
        return "type_mismatch", message
    return "tool_error", message


def _argument_problem(message: str) -> tuple[str, str] | None:
    m = _MISSING.search(message)
    if m:
        return "missing_argument", m.group(1).strip() or message
    m = _UNEXPECTED.search(message)
    if m:
        return "unexpected_argument", (m.group(1) or m.group(2) or "").strip() or message
    return None


# BFCL's recovery hints by kind (the default; an environment passes its own, evolution.CueTexts.hints).
DEFAULT_HINTS = {
    "parse_error": "Hint: your last message contained a tool call that could not be parsed, so none of its "
    "calls ran. Write every call in exactly the documented format, with valid JSON arguments, and try again.",
    "unknown_tool": "Hint: that tool is not in the current tool list. Call only listed tools, by their exact "
    "names; if none can do it, tell the user.",
    "missing_argument": "Hint: the call is missing a required argument ({detail}). Call the tool again with "
    "every required parameter filled in.",
    "unexpected_argument": "Hint: the call passed an argument the tool does not accept ({detail}). Use only the "
    "parameter names from the tool's documentation.",
    "not_authenticated": "Hint: you are not logged in to this service. Call its login or authentication tool "
    "first, then repeat the call.",
    "unknown_path": "Hint: that file or directory is not where the call looked. Check the current directory "
    "(list its contents, move one folder level at a time) and use names relative to it.",
    "type_mismatch": "Hint: an argument has the wrong type. Pass values of the declared types (numbers as "
    "numbers, lists as lists) and call the tool again.",
    "tool_error": "Hint: the call failed. Read the error, fix its cause and retry, or tell the user if it "
    "cannot be done.",
}


def recovery_hint(interface: Interface, category: str, observation: str,
                  hints: dict[str, str] | None = None) -> str | None:
    """A hint to append after a failed call's observation, or None (always None for revision 0).

    The hint names the problem (missing or unexpected argument, unknown path, not authenticated, unknown
    tool, type mismatch, parse error) when the revision activates recovery feedback for ``category``.
    ``hints``: the environment's texts by kind (:data:`DEFAULT_HINTS`, BFCL's, for a kind it lacks).
    """
    if "recovery" not in active_changes(interface, category):
        return None
    found = classify_observation(observation)
    if found is None:
        return None
    kind, detail = found
    text = (hints or {}).get(kind) or DEFAULT_HINTS[kind]
    return text.replace("{detail}", detail[:200])
