"""Guarded parsing of tool calls in model text (moved here from the mcp plugin; it imports only the standard
library).

A call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a block cut at the stop string (no
closing tag) still counts. Model text is untrusted: it is only ever read with ``json.loads``, after limits on
its size, on the number of blocks, and on the nesting depth of the JSON (checked on the text before parsing,
so a deeply nested document never reaches the parser), never evaluated.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
MAX_TEXT = 20_000  # characters of one message that are looked at
MAX_BLOCK = 8_000  # characters of one call
MAX_DEPTH = 8  # nesting of JSON objects/arrays in one call


def _depth(text: str) -> int:
    """Maximum bracket nesting outside JSON strings."""
    depth = deepest = 0
    in_str = escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_calls(text: str, max_calls: int = 4) -> tuple[list[dict[str, Any]], str | None]:
    """The calls of a message as ``{"name", "arguments"}`` dicts, or ``([], error)``; ``([], None)``: no call."""
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT]
    blocks = _BLOCK.findall(text)
    if len(blocks) > max_calls:
        return [], f"Too many tool calls in one message ({len(blocks)}; at most {max_calls})."
    calls = []
    for body in blocks:
        body = body.strip()
        if len(body) > MAX_BLOCK:
            return [], f"A tool call is too long ({len(body)} characters; at most {MAX_BLOCK})."
        if _depth(body) > MAX_DEPTH:
            return [], f"A tool call nests too deeply (at most {MAX_DEPTH} levels)."
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an int over 4300 digits
            return [], f"Could not parse the tool call as JSON: {getattr(exc, 'msg', exc)}."
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
            return [], 'A tool call must be a JSON object with a "name" and "arguments".'
        args = data.get("arguments", {})
        if not isinstance(args, dict):
            return [], "The tool call's arguments must be a JSON object."
        calls.append({"name": data["name"][:200], "arguments": args})
    return calls, None


def clip_text(text: Any, limit: int) -> str:
    """Untrusted text made safe to show and store: a string, valid UTF-8 (lone surrogates replaced), no control
    characters but newline and tab, at most ``limit`` characters (with a marker saying how much was cut)."""
    if not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = "".join(ch if ch in "\n\t" or (ord(ch) >= 32 and ord(ch) != 127) else "\ufffd" for ch in text[: limit * 2])
    if len(text) > limit:
        text = f"{text[:limit]} [... cut at {limit} characters]"
    return text
