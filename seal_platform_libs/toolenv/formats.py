"""Tool-call formats: how tools are presented to the agent and how its replies are read back.

A format owns both directions so that switching it (e.g. ``settings.bfcl.tool_call_format``) changes the system
prompt, the parsing of assistant messages, the rendering of observations and of the miss_func reveal together.

* ``hermes`` (default, the reference's): tool docs as JSON inside ``<tools></tools>``, calls as
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, results as ``<tool_response>`` blocks.
* ``python``: BFCL's own prompting format, a Python-style list ``[f(a=1), g(b='x')]`` parsed with the
  safe call parser of :mod:`.calls` (an AST walk over literals only; never ``eval``).

Model output is untrusted: parsing never executes it and a malformed reply becomes a :class:`ParseResult`
with ``error`` set (the episode turns it into an error observation), never an exception.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

# The BFCL docs use Python-ish type names; JSON-schema readers (and chat templates trained on OpenAI-style
# tools) expect these.
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}

REVEAL_TEXT = "I have updated some more functions you can choose from. What about now?"


@dataclass
class ParsedCall:
    """One call read from an assistant message: a tool name and its keyword arguments.

    ``args`` holds positional arguments (only the python format has them); the episode binds them to
    parameter names by the tool doc's parameter order before anything runs.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()


@dataclass
class ParseResult:
    """What a format read from one assistant message.

    ``error`` set means the message is malformed as a whole (the reference rejects it entirely and the turn
    does not advance); ``calls`` may then hold the calls that did parse, for the record.
    """

    calls: list[ParsedCall] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ToolCallFormat(Protocol):
    """A tool-call format: both the instructions the agent reads and the parser of what it writes."""

    name: str

    def system_prompt(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        """The tool block of the system prompt (docs plus calling instructions)."""
        ...

    def parse(self, text: str) -> ParseResult:
        """Read the calls of one assistant message."""
        ...

    def render_calls(self, calls: list[ParsedCall]) -> str:
        """An assistant message that makes ``calls`` (what a well-behaved model writes)."""
        ...

    def render_result(self, name: str, content: str) -> str:
        """The content of the tool message carrying one call's result."""
        ...

    def render_error(self, error: str) -> str:
        """The content of the tool message answering a rejected message."""
        ...

    def reveal_message(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        """The user message of a miss_func reveal turn, presenting the newly available tools."""
        ...


# --- tool docs --------------------------------------------------------------------------------------------


def _schema(node: Any) -> Any:
    """A copy of a BFCL parameter schema with JSON-schema type names."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "type" and isinstance(value, str):
                out[key] = _JSON_SCHEMA_TYPES.get(value, value)
            else:
                out[key] = _schema(value)
        return out
    if isinstance(node, list):
        return [_schema(v) for v in node]
    return node


def openai_tool(doc: dict[str, Any], *, include_response: bool = False) -> dict[str, Any]:
    """One BFCL tool doc as an OpenAI/Qwen-style ``{"type": "function", "function": {...}}`` entry.

    Keeps the doc's own key order (and so its parameter order); the ``response`` schema is dropped unless
    asked for because it adds prompt tokens the agent rarely needs.
    """
    function: dict[str, Any] = {"name": doc["name"], "description": doc.get("description", "")}
    function["parameters"] = _schema(copy.deepcopy(doc.get("parameters") or {"type": "dict", "properties": {}}))
    if include_response and "response" in doc:
        function["response"] = _schema(copy.deepcopy(doc["response"]))
    return {"type": "function", "function": function}


def _dumps(value: Any, compact: bool) -> str:
    if compact:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False)


# --- hermes -------------------------------------------------------------------------------------------------

_HERMES_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_HERMES_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
# Arguments nested deeper than this are refused (the same bound as python-format literals): deeper values
# only exhaust the stack of whatever compares, copies or serialises them later.
MAX_JSON_DEPTH = 32


def _hermes_blocks(text: str) -> tuple[list[str], str | None]:
    """The bodies of the ``<tool_call>...</tool_call>`` blocks, in one left-to-right scan (linear time: a
    lazy regex rescans to the end of the text from every unclosed opening tag)."""
    blocks: list[str] = []
    pos = 0
    while True:
        start = text.find(_OPEN, pos)
        orphan = text.find(_CLOSE, pos, start if start != -1 else len(text))
        if orphan != -1:
            return blocks, "A </tool_call> tag has no opening <tool_call>."
        if start == -1:
            return blocks, None
        end = text.find(_CLOSE, start + len(_OPEN))
        if end == -1:
            return blocks, "A <tool_call> block is not closed with </tool_call>."
        blocks.append(text[start + len(_OPEN) : end])
        pos = end + len(_CLOSE)


def _json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative; stops counting past the limit)."""
    best, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            best = max(best, depth)
            if best > MAX_JSON_DEPTH:
                return best
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return best


class HermesFormat:
    """Qwen/Hermes tool calling, the text the Qwen2.5 chat template produces for ``tools=``."""

    name = "hermes"

    def __init__(self, include_response: bool = False, wrap_results: bool = True):
        self.include_response = include_response
        # Chat templates with tool support (Qwen2.5) wrap tool messages in <tool_response> themselves;
        # plain ChatML templates (SmolLM2) do not, so by default the content carries the tags.
        self.wrap_results = wrap_results

    def _tool_lines(self, tool_docs: list[dict[str, Any]], compact: bool) -> str:
        return "".join(
            "\n" + _dumps(openai_tool(doc, include_response=self.include_response), compact) for doc in tool_docs
        )

    def system_prompt(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        return _HERMES_HEADER + self._tool_lines(tool_docs, compact) + _HERMES_FOOTER

    def parse(self, text: str) -> ParseResult:
        if not isinstance(text, str):
            return ParseResult(error="The message is not text.")
        blocks, error = _hermes_blocks(text)
        if error:
            return ParseResult(error=error)
        calls: list[ParsedCall] = []
        for index, block in enumerate(blocks, 1):
            where = f"tool call {index}" if len(blocks) > 1 else "the tool call"
            body = block.strip()
            try:
                data = json.loads(body)
            except json.JSONDecodeError as exc:
                return ParseResult(calls, error=f"Could not parse {where} as JSON: {exc.msg} at position {exc.pos}.")
            except RecursionError:
                return ParseResult(calls, error=f"Could not parse {where}: JSON nested too deeply.")
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                return ParseResult(calls, error=f"Could not parse {where} as JSON: {exc}.")
            if _json_depth(data) > MAX_JSON_DEPTH:
                return ParseResult(
                    calls, error=f"{where[0].upper()}{where[1:]} nests deeper than {MAX_JSON_DEPTH} levels."
                )
            items = data if isinstance(data, list) else [data]
            for item in items:
                call, error = _hermes_call(item, where)
                if error:
                    return ParseResult(calls, error=error)
                calls.append(call)  # type: ignore[arg-type]
        return ParseResult(calls)

    def render_calls(self, calls: list[ParsedCall]) -> str:
        return "\n".join(
            "<tool_call>\n"
            + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
            + "\n</tool_call>"
            for c in calls
        )

    def render_result(self, name: str, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>" if self.wrap_results else content

    def render_error(self, error: str) -> str:
        return self.render_result("", f"Error: {error}")

    def reveal_message(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        return "<tools>" + self._tool_lines(tool_docs, compact) + "\n</tools>\n" + REVEAL_TEXT


def _hermes_call(item: Any, where: str) -> tuple[ParsedCall | None, str | None]:
    if not isinstance(item, dict):
        return None, f"{where} must be a JSON object with \"name\" and \"arguments\"."
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return None, f"{where} has no \"name\" string."
    arguments = item.get("arguments", {})
    if isinstance(arguments, str):
        # Some models double-encode the arguments object as a JSON string: decoded under the same guards as
        # the call itself (nesting, number size), never deeper than MAX_JSON_DEPTH.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None, f"The \"arguments\" of {where} ({name}) is a string that is not a JSON object."
        except RecursionError:
            return None, f"The \"arguments\" of {where} ({name}): JSON nested too deeply."
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            return None, f"The \"arguments\" of {where} ({name}) could not be parsed: {exc}."
        if _json_depth(arguments) > MAX_JSON_DEPTH:
            return None, f"The \"arguments\" of {where} ({name}) nest deeper than {MAX_JSON_DEPTH} levels."
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"The \"arguments\" of {where} ({name}) must be a JSON object."
    return ParsedCall(name, arguments), None


# --- python (BFCL prompting) ------------------------------------------------------------------------------

# More opening parentheses than this in a call-list message is refused before parsing (see PythonFormat.parse).
MAX_PYTHON_CALLS = 512
# More syntax elements than this (outside string literals; see calls.code_counts) is refused likewise.
MAX_PYTHON_ELEMENTS = 12_000
_FENCE_OPEN = re.compile(r"```[a-zA-Z]*")


def _strip_fence(text: str) -> str:
    """The text without a Markdown code fence around it. Linear in the text (a regex with ``\\s*```$``
    backtracks over every run of whitespace: 80k spaces took seconds)."""
    body = text.strip()
    opening = _FENCE_OPEN.match(body)
    if opening:
        body = body[opening.end():]
    if body.endswith("```"):
        body = body[:-3]
    return body.strip()


class PythonFormat:
    """BFCL's prompting format: the reply is a Python-style list of calls, ``[f(a=1), g(b='x')]``."""

    name = "python"

    def system_prompt(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        functions = _dumps(list(tool_docs), compact)
        return (
            "You are an expert in composing functions. You are given a question and a set of possible "
            "functions. Based on the question, you will need to make one or more function/tool calls to achieve "
            "the purpose. If none of the functions can be used, point it out. If the given question lacks the "
            "parameters required by the function, also point it out.\n\n"
            "You should only return the function calls in your response.\n\n"
            "If you decide to invoke any of the function(s), you MUST put it in the format of "
            "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]  "
            "You SHOULD NOT include any other text in the response.\n\n"
            "At each turn, you should try your best to complete the tasks requested by the user within the "
            "current turn. Continue to output functions to call until you have fulfilled the user's request to "
            "the best of your ability. Once you have no more functions to call, the system will consider the "
            "current turn complete and proceed to the next turn or task.\n\n"
            f"Here is a list of functions in JSON format that you can invoke.\n{functions}\n"
        )

    def parse(self, text: str) -> ParseResult:
        from .calls import CallSyntaxError, code_counts, parse_calls  # the safe AST-literal parser

        body = _strip_fence(text)
        if body.startswith("python\n"):
            body = body[len("python\n"):].strip()
        if not body or body == "[]":
            return ParseResult()
        looks_like_calls = body.startswith(("[", "(")) or bool(re.match(r"^[A-Za-z_]\w*\s*\(", body))
        if looks_like_calls and (body.count("(") > MAX_PYTHON_CALLS or len(body) > MAX_PYTHON_ELEMENTS):
            # Bounded work per message: Python's parser costs ~20 us per call and ~3 us per other node, so
            # thousands of tiny calls or tens of thousands of tiny literals would take longer than a long
            # message should; no turn needs that many. What is inside string arguments (code, prose) does
            # not count. (A body of at most MAX_PYTHON_ELEMENTS characters cannot have more elements.)
            parens, elements = code_counts(body, MAX_PYTHON_CALLS, MAX_PYTHON_ELEMENTS)
            if parens > MAX_PYTHON_CALLS:
                return ParseResult(error=f"Too many function calls in one message (at most {MAX_PYTHON_CALLS}).")
            if elements > MAX_PYTHON_ELEMENTS:
                return ParseResult(error=f"Too many values in one message's calls (at most {MAX_PYTHON_ELEMENTS:,} "
                                         f"names, numbers, strings and brackets).")
        try:
            parsed = parse_calls(body)
        except CallSyntaxError as exc:
            if looks_like_calls:
                return ParseResult(error=f"Could not parse the function calls: {exc}.")
            # Plain prose: the agent is answering the user, which ends the turn (as in BFCL).
            return ParseResult()
        calls: list[ParsedCall] = []
        for index, call in enumerate(parsed, 1):
            if not call.ok:
                where = f"call {index}" + (f" ({call.name})" if call.name else "")
                return ParseResult(calls, error=f"Could not parse {where}: {call.error}.")
            calls.append(ParsedCall(call.name, dict(call.kwargs), tuple(call.args)))
        return ParseResult(calls)

    def render_calls(self, calls: list[ParsedCall]) -> str:
        from .calls import render_call

        return "[" + ", ".join(render_call(c.name, c.arguments, c.args) for c in calls) + "]"

    def render_result(self, name: str, content: str) -> str:
        return content

    def render_error(self, error: str) -> str:
        return f"Error: {error}"

    def reveal_message(self, tool_docs: list[dict[str, Any]], *, compact: bool = False) -> str:
        return _dumps(list(tool_docs), compact) + "\n" + REVEAL_TEXT


FORMATS: dict[str, type] = {"hermes": HermesFormat, "python": PythonFormat}


def get_format(name: str, **options: Any) -> ToolCallFormat:
    """The format registered as ``name``; a clear error names the known ones."""
    try:
        cls = FORMATS[name]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise ValueError(f"unknown tool-call format {name!r}; known formats: {known}") from None
    if cls is HermesFormat:
        return cls(**options)
    return cls()
