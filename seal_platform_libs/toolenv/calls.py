"""Safe parsing and rendering of BFCL's Python call syntax (``cd(folder='docs')``).

BFCL writes tool calls as Python source and its official checker runs them with ``eval``. We parse them with
:mod:`ast` instead and accept exactly one shape: a plain name called with literal arguments (numbers,
strings, booleans, None and lists / tuples / dicts / sets of those; no bytes, ``...`` or integers too long to
write in decimal). Anything else -- attribute access,
subscripts, nested calls, names, operators, ``*``/``**`` unpacking, lambdas, comprehensions -- yields a
:class:`ParsedCall` whose ``error`` says why; such a call is never executed and replaying it produces a tool
error. Model text therefore never reaches ``eval``, ``exec`` or ``compile`` (``ast.parse`` only builds a
syntax tree, and ``ast.literal_eval`` is applied to argument nodes, which evaluates no code).

This module has no heavy imports; the ``python`` call format (:mod:`.formats`) and the bfcl plugin's
environment, executor worker and verifier all use it.
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# A call text longer than this is rejected before parsing: the longest ground-truth call is a few hundred
# characters, and ast.parse on megabytes of nested brackets costs memory and time for nothing.
MAX_CALL_CHARS = 20_000
# Literal nesting deeper than this is rejected (deeply nested literals can exhaust the C stack while
# parsing, compiling or comparing).
MAX_LITERAL_DEPTH = 32


class CallSyntaxError(ValueError):
    """A text that is not a BFCL call or list of calls at all."""


@dataclass
class ParsedCall:
    """One tool call: a tool name with literal positional and keyword arguments.

    ``error`` is set when the text could not be accepted (then ``name`` is the best guess or ``""`` and the
    arguments are empty); executing such a call yields the tool error
    ``"Error during execution: " + error`` and runs nothing. ``text`` is the source the call came from
    (empty for calls built from structured JSON).
    """

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()
    text: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def render(self) -> str:
        """The call in BFCL Python call syntax (its source text when it has one)."""
        if self.text:
            return self.text
        return render_call(self.name, self.kwargs, self.args)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (for traces and logs; values are rendered with ``repr`` where needed)."""
        return {"name": self.name, "text": self.render(), "error": self.error}


def _depth(node: ast.AST) -> int:
    """The depth of an argument's syntax tree (as ast.iter_child_nodes counts it: a list's ``ctx`` is a
    child). Containers are walked through their element lists directly: the generic walk cost more than
    parsing on arguments nested just under the limit."""
    best = 0
    stack = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > best:
            best = depth
            if depth > MAX_LITERAL_DEPTH:
                return depth
        kind = type(current)
        if kind is ast.Constant:
            continue
        if kind is ast.List or kind is ast.Tuple:
            children: Any = current.elts  # type: ignore[attr-defined]
            best = max(best, depth + 1)  # its ctx (Load)
        elif kind is ast.Set:
            children = current.elts  # type: ignore[attr-defined]
        elif kind is ast.Dict:
            children = [k for k in current.keys if k is not None] + current.values  # type: ignore[attr-defined]
        else:
            children = list(ast.iter_child_nodes(current))
        for child in children:
            stack.append((child, depth + 1))
    return best


def _literal(node: ast.expr) -> Any:
    """The value of a literal argument node; raises ValueError with a readable reason otherwise."""
    if _depth(node) > MAX_LITERAL_DEPTH:
        raise ValueError(f"argument nesting deeper than {MAX_LITERAL_DEPTH} levels")
    if isinstance(node, ast.Name):
        # Same wording as Python's NameError, which is what the official checker reports for e.g. `true`.
        raise ValueError(f"name '{node.id}' is not defined")
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        kind = type(node).__name__
        raise ValueError(f"argument is not a literal value ({kind} expression): {exc}") from None
    _check_json_like(value)
    return value


# Bits per decimal digit: an int of more bits than this times the limit may have more decimal digits than
# Python converts to text (sys.get_int_max_str_digits), so rendering or storing it would raise.
_BITS_PER_DIGIT = math.log2(10)


def _check_json_like(value: Any) -> None:
    """Refuse (ValueError) the literals that have no JSON form and would break a trace or the store later:
    ``...``, bytes, and integers too long to write in decimal (in hex, ``0xfff...``, their source is short).
    The value is walked iteratively (its nesting is already bounded); its ints are measured, never converted."""
    max_digits = sys.get_int_max_str_digits()  # 0: no limit
    stack = [value]
    while stack:
        item = stack.pop()
        if item is Ellipsis or isinstance(item, bytes):
            raise ValueError(f"arguments must be JSON values, not {'...' if item is Ellipsis else 'bytes'}")
        if isinstance(item, int) and max_digits and item.bit_length() > max_digits * _BITS_PER_DIGIT:
            raise ValueError(f"arguments must be JSON values, not an integer of more than {max_digits} digits")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)


def parse_call(text: str) -> ParsedCall:
    """Parse one call like ``mv(source='a.txt', destination='b')``. Never raises.

    Positional arguments are kept in ``args`` (ground truth uses them, e.g. ``sort('final_report.pdf')``);
    they are bound to parameter names by position when executed, as Python would.
    """
    if not isinstance(text, str):
        return ParsedCall(name="", text=repr(text), error=f"a call must be a string, got {type(text).__name__}")
    source = text.strip()
    if len(source) > MAX_CALL_CHARS:
        return ParsedCall(
            name="", text=source[:200] + "...", error=f"call text longer than {MAX_CALL_CHARS} characters"
        )
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return ParsedCall(name="", text=source, error=f"invalid call syntax: {exc}")
    return _from_node(tree.body, source)


# Shared parses are kept for texts up to this length (every ground-truth call and nearly every model call),
# at most 8,192 of them: a few tens of MB even if every one were a 1,000-character list of numbers.
_SHARED_CALL_CHARS = 1_000


@lru_cache(maxsize=8192)
def _parse_shared(text: str) -> ParsedCall:
    return parse_call(text)


def parse_call_shared(text: str) -> ParsedCall:
    """:func:`parse_call`, each text parsed once per process (the same calls recur in every verification
    of a task). The result is shared: read it, never modify it (the bfcl plugin's ``Backend.execute`` gives a
    call fresh argument objects before a method can change them)."""
    if isinstance(text, str) and len(text) <= _SHARED_CALL_CHARS:
        return _parse_shared(text)
    return parse_call(text)


def _from_node(node: ast.expr, source: str) -> ParsedCall:
    if not isinstance(node, ast.Call):
        return ParsedCall(name="", text=source, error="not a function call")
    if not isinstance(node.func, ast.Name):
        # Attribute access (os.system, x.__class__), subscripts and calls of calls never name a tool.
        return ParsedCall(name="", text=source, error="the called object must be a plain tool name")
    name = node.func.id
    if name.startswith("__"):
        return ParsedCall(name=name, text=source, error=f"name '{name}' is not defined")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    try:
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise ValueError("argument unpacking (*) is not allowed")
            args.append(_literal(arg))
        for keyword in node.keywords:
            if keyword.arg is None:
                raise ValueError("keyword unpacking (**) is not allowed")
            if keyword.arg in kwargs:
                raise ValueError(f"keyword argument repeated: {keyword.arg}")
            kwargs[keyword.arg] = _literal(keyword.value)
    except ValueError as exc:
        return ParsedCall(name=name, text=source, error=str(exc))
    return ParsedCall(name=name, kwargs=kwargs, args=tuple(args), text=source)


def parse_calls(text: str) -> list[ParsedCall]:
    """Parse a BFCL call list ``[f(a=1), g(b='x')]`` (or a single call) into calls.

    Individual calls that are not acceptable come back with ``error`` set; a text that is not a call or a
    list at all raises :class:`CallSyntaxError`.
    """
    source = text.strip() if isinstance(text, str) else ""
    if not source:
        raise CallSyntaxError("empty text: expected a call like f(a=1) or a list [f(a=1), g()]")
    if len(source) > MAX_CALL_CHARS * 10:
        raise CallSyntaxError("call list text too long")
    try:
        tree = ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise CallSyntaxError(f"invalid call syntax: {exc}") from None
    body = tree.body
    if isinstance(body, (ast.List, ast.Tuple)):
        # Not ast.get_source_segment: it re-splits the whole source for every element (quadratic).
        segment = _segmenter(source)
        return [_from_node(element, segment(element)) for element in body.elts]
    if isinstance(body, ast.Call):
        return [_from_node(body, source)]
    raise CallSyntaxError("expected a call like f(a=1) or a list of calls [f(a=1), g()]")


def _segmenter(source: str):
    """``segment(node)``: the source text of a node, in time linear in the node's length (ast positions are
    UTF-8 byte offsets within lines; the line starts are computed once)."""
    data = source.encode("utf-8")
    starts = [0]
    index = data.find(b"\n")
    while index != -1:
        starts.append(index + 1)
        index = data.find(b"\n", index + 1)

    def segment(node: ast.AST) -> str:
        try:
            begin = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
            end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        except (AttributeError, IndexError, TypeError):
            return ""
        return data[begin:end].decode("utf-8", errors="replace")

    return segment


# Syntax elements of a call list that the parser turns into nodes: words and numbers, openers, keyword
# '=', unary signs (string literals are counted one each by the scan).
_ATOM = re.compile(r"[\w.]+|[(\[{=+\-~]")
_QUOTE = re.compile("['\"]")
_SIMPLE_LITERAL = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def code_counts(text: str, max_parens: int, max_elements: int) -> tuple[int, int]:
    """``(parentheses, syntax elements)`` of ``text`` outside Python string literals, the elements counting
    words, numbers, openers, ``=`` and signs in the code and one per string literal -- about one per node
    ``ast.parse`` builds. The scan stops once either count is over its maximum. Linear: without escapes
    and triple quotes one regular-expression substitution; otherwise one left-to-right pass that jumps
    from quote to quote with ``str.find``. An unterminated string is a syntax error anyway: its rest counts
    as code."""
    if "\\" not in text and "'''" not in text and '"""' not in text:
        # No escapes, no triple quotes: every string literal is a quote, characters other than it and a
        # newline, and the same quote, so one C-speed substitution finds them all.
        code = _SIMPLE_LITERAL.sub(" 0 ", text)
        return code.count("("), len(_ATOM.findall(code))
    parens = elements = i = 0
    while parens <= max_parens and elements <= max_elements:
        found = _QUOTE.search(text, i)
        j = found.start() if found else len(text)
        code = text[i:j]
        parens += code.count("(")
        elements += len(_ATOM.findall(code))
        if found is None:
            break
        quote = text[j] * 3 if text.startswith(text[j] * 3, j) else text[j]
        end = _string_end(text, j + len(quote), quote)
        if end < 0:
            rest = text[j:]
            return parens + rest.count("("), elements + len(_ATOM.findall(rest))
        elements += 1
        i = end
    return parens, elements


def _string_end(text: str, start: int, quote: str) -> int:
    """The index after the closing ``quote`` of a literal whose body starts at ``start`` (-1: none)."""
    pos = start
    while True:
        k = text.find(quote, pos)
        if k < 0:
            return -1
        if len(quote) == 1 and text.find("\n", pos, k) >= 0 and not _escaped_newlines_only(text, pos, k):
            return -1  # a one-line string runs into a newline: a syntax error
        slashes = 0
        while k - slashes - 1 >= start and text[k - slashes - 1] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            return k + len(quote)
        pos = k + 1


def _escaped_newlines_only(text: str, start: int, end: int) -> bool:
    """Whether every newline in text[start:end] is escaped (a backslash continuation inside a string)."""
    k = text.find("\n", start, end)
    while k >= 0:
        slashes = 0
        while k - slashes - 1 >= start and text[k - slashes - 1] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            return False
        k = text.find("\n", k + 1, end)
    return True


def from_arguments(name: Any, arguments: Any) -> ParsedCall:
    """A call from structured (JSON) form, e.g. a ``{"name": ..., "arguments": {...}}`` tool call."""
    if not isinstance(name, str) or not name:
        return ParsedCall(name="", error="the tool name must be a non-empty string")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParsedCall(name=name, error=f"arguments must be an object, got {type(arguments).__name__}")
    bad = [key for key in arguments if not isinstance(key, str)]
    if bad:
        return ParsedCall(name=name, error="argument names must be strings")
    if name.startswith("__"):
        return ParsedCall(name=name, error=f"name '{name}' is not defined")
    return ParsedCall(name=name, kwargs=dict(arguments))


def _render_value(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        # repr gives inf/nan, which are not literals; float('inf') is not either, so keep a string form
        # that at least parses and says what it was.
        return json.dumps(str(value))
    if isinstance(value, list):
        return "[" + ", ".join(_render_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_render_value(v) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_render_value(k)}: {_render_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def render_call(name: str, kwargs: dict[str, Any] | None = None, args: tuple[Any, ...] | list[Any] = ()) -> str:
    """Render a call in BFCL syntax: ``name(pos, key=value, ...)`` with Python literal values.

    ``parse_call(render_call(n, kw))`` gives back ``n`` and ``kw`` for every literal value (finite numbers,
    strings, booleans, None, lists, tuples, dicts, sets).
    """
    parts = [_render_value(v) for v in args]
    parts += [f"{key}={_render_value(value)}" for key, value in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"
