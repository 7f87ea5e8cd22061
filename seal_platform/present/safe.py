"""Text that plugins, tools and models supplied, made safe to draw on a terminal.

A label, a category, a tool result, a model's message or an exception's text may hold anything: an escape
sequence that clears the screen or sets the window title (``"\\x1b[2J"``, ``"\\x1b]0;...\\x07"``), a bidi
override that reorders what follows (U+202E), rich markup (``"[bold red]"``), or a single "word" thousands of
characters long. Every renderer of such text in :mod:`seal_platform.present` passes it through
:func:`clean` (a ``str``, for plain output and for strings whose layout :mod:`.fit` checks) or
:func:`safe_text` (the same as a rich :class:`~rich.text.Text`, which rich never parses as markup):

- control characters are shown, not obeyed: C0 ones as their Unicode "control pictures" (ESC as ``␛``, BEL as
  ``␇``), DEL as ``␡``, C1 ones and the bidi and line-separator controls as escapes (``\\x9b``, ``\\u202e``);
  with ``lines=True`` (a multi-line cell: a message, a traceback) newlines and tabs are kept;
- lone surrogates (no UTF-8 encoding) become U+FFFD;
- with ``limit``, text longer than that is cut there with a note of how much was left out (``--json``
  outputs keep everything).

Rich markup needs nothing more: a :class:`~rich.text.Text` is never parsed as markup, and :func:`clean` output
interpolated into a markup string must also go through :func:`rich.markup.escape` (:func:`markup_safe`).
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text

# A label, a diagnoser's or a category's name, a metric name: one token a person reads (and copies) whole,
# clipped beyond this many characters.
LABEL_LIMIT = 64

# C0 controls, DEL, C1 controls, the bidi embeddings/overrides/isolates and marks, the line and paragraph
# separators, lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                              "\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures block: "␛" for ESC, "␇" for BEL
    if code == 0x7F:
        return "\u2421"  # ␡
    if code <= 0x9F:
        return f"\\x{code:02x}"
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return f"\\u{code:04x}"


def clip_note(hidden: int) -> str:
    """What a clipped text ends with: how many characters were left out."""
    return f" ... [{hidden} more characters]"


def clean(value: Any, limit: int | None = None, *, lines: bool = False) -> str:
    """``value`` (``str()`` of it unless a string) with every control character shown instead of obeyed, clipped
    at ``limit`` characters (with a note) when given; ``lines``: newlines and tabs are kept (a ``\\r\\n`` as a
    newline). Without ``limit`` idempotent: cleaned text comes out as it went in."""
    text = value if isinstance(value, str) else str(value)
    note = ""
    if limit is not None and len(text) > limit:
        text, note = text[:limit], clip_note(len(text) - limit)
    if lines:
        text = _UNSAFE_IN_LINES.sub(_visible, text.replace("\r\n", "\n"))
    else:
        text = _UNSAFE.sub(_visible, text)
    return text + note


def safe_text(value: Any, limit: int | None = None, *, lines: bool = False, style: str = "") -> Text:
    """:func:`clean` as a rich :class:`~rich.text.Text` (never parsed as markup), in ``style``."""
    return Text(clean(value, limit, lines=lines), style=style)


def label_text(value: Any, style: str = "") -> Text:
    """A label or a name: :func:`safe_text` clipped at :data:`LABEL_LIMIT`."""
    return safe_text(value, LABEL_LIMIT, style=style)


_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def json_safe(document: str) -> str:
    """A JSON document (``json.dumps(..., ensure_ascii=False)``, pydantic's ``model_dump_json``) with the
    characters a terminal would obey that JSON leaves raw (DEL, C1 controls, bidi controls, line separators,
    lone surrogates) written as ``\\uXXXX`` escapes: the same data for a JSON reader, inert on a terminal (JSON
    escapes the C0 controls itself). Outside strings a JSON document is ASCII, so only strings change."""
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", document)


def markup_safe(value: Any, limit: int | None = None) -> str:
    """:func:`clean`, and escaped for a rich markup string."""
    from rich.markup import escape

    return escape(clean(value, limit))
