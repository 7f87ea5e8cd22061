"""Strategies and checks for untrusted input: model output, tool-call arguments, verify input lines.

Shared by the property tests (``test_untrusted_input.py``, a few hundred cases each inside ``make test``)
and the time-boxed fuzzer (``benchmarks/fuzz_untrusted.py``, run by hand). Each ``check_*`` function takes
one generated input and asserts the contract: no exception leaves the parser / executor check / diagnoser /
verify path, and what comes back is a parse-error verdict or a label.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from seal_platform.types import Message, ToolCall, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.calls import CallSyntaxError, ParsedCall, parse_call, parse_calls, render_call
from seal_platform_libs.toolenv.formats import HermesFormat, ParseResult, PythonFormat
from seal_platform_plugins.bfcl.diagnoser import ALL_LABELS, diagnose_trajectory, label_turns

KNOWN_LABELS = set(ALL_LABELS)

# --- strategies ---------------------------------------------------------------------------------------------

# Pieces that matter to the parsers: tags, brackets, quotes, escapes, digits, names the backends define.
_PIECES = [
    "<tool_call>", "</tool_call>", "<tool_response>", "{", "}", "[", "]", "(", ")", ",", ":", "=", '"', "'",
    "\\", "\\u0000", "\n", " ", "name", "arguments", '"name"', '"arguments"', "cd", "ls", "mv", "folder",
    "__import__", "os.system", "lambda", "*", "**", "1e999", "-0", "NaN", "Infinity", "true", "null", "None",
    "9" * 50, "\ud800", "\x00", "é", "```", "python\n", "...", "#", "0x1F", "1_000", "b'x'", "{1, 2}",
]
fragments = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=40).map("".join)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


hostile_values = st.one_of(
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),  # numbers of thousands of digits
    st.integers(min_value=1, max_value=3000).map(_nested),  # deep nesting
    st.integers(min_value=1, max_value=3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(min_value=1, max_value=400).map(lambda n: "1e" + "9" * n),
)


@st.composite
def hermes_messages(draw: Any) -> str:
    """Assistant messages in (and around) the hermes format."""
    kind = draw(st.sampled_from(["json", "hostile", "fragments", "text"]))
    if kind == "json":
        call = {
            "name": draw(st.text(max_size=10) | st.sampled_from(["cd", "ls", "mv"])),
            "arguments": draw(json_values),
        }
        body = json.dumps(draw(st.sampled_from([call, [call, call], call["arguments"]])))
    elif kind == "hostile":
        body = '{"name": "cd", "arguments": {"folder": ' + draw(hostile_values) + "}}"
    elif kind == "fragments":
        body = draw(fragments)
    else:
        return draw(st.text())
    prefix, suffix = draw(fragments), draw(fragments)
    closing = draw(st.sampled_from(["</tool_call>", "", "</tool_call></tool_call>"]))
    return f"{prefix}<tool_call>{body}{closing}{suffix}"


_call_names = st.sampled_from(["cd", "ls", "mv", "echo", "touch", "f", "__import__", "os.system", "eval", "kill"])
_literal_texts = st.one_of(
    json_values.map(repr),
    hostile_values,
    st.sampled_from(["x", "x.y", "f()", "lambda: 1", "*a", "[i for i in x]", "1+1"]),
    st.sampled_from(["...", "b'\\xff'", "[{'k': ...}]", "0x" + "f" * 3600, "-0o" + "7" * 4800]),  # no JSON form
)


@st.composite
def python_calls(draw: Any) -> str:
    name = draw(_call_names)
    args = draw(
        st.lists(st.tuples(st.sampled_from(["", "folder=", "a=", "b=", "**", "*"]), _literal_texts), max_size=4)
    )
    return f"{name}({', '.join(k + v for k, v in args)})"


@st.composite
def python_messages(draw: Any) -> str:
    kind = draw(st.sampled_from(["list", "one", "fragments", "text"]))
    if kind == "list":
        body = "[" + ", ".join(draw(st.lists(python_calls(), max_size=5))) + "]"
    elif kind == "one":
        body = draw(python_calls())
    elif kind == "fragments":
        body = draw(fragments)
    else:
        return draw(st.text())
    return draw(st.sampled_from(["", "```python\n", "```"])) + body + draw(st.sampled_from(["", "```", "\n"]))


# --- checks ---------------------------------------------------------------------------------------------------


def check_format_parse(fmt: HermesFormat | PythonFormat, text: str) -> ParseResult:
    result = fmt.parse(text)
    assert isinstance(result, ParseResult)
    assert result.error is None or isinstance(result.error, str)
    for call in result.calls:
        assert isinstance(call.name, str) and isinstance(call.arguments, dict)
        render_call(call.name, call.arguments, call.args)  # what the episode records for every executed call
        ToolCall(turn=0, name=call.name, arguments=call.arguments).model_dump_json()  # what the store writes
    return result


def check_parse_call(text: str) -> None:
    call = parse_call(text)
    assert isinstance(call, ParsedCall) and (call.ok or isinstance(call.error, str))
    try:
        calls = parse_calls(text)
    except CallSyntaxError:
        return
    assert all(isinstance(c, ParsedCall) for c in calls)


def check_backend_execute(backend: Any, call: ParsedCall) -> None:
    """The executor's argument checks (in the worker): any call gives a result text, never an exception."""
    result, rejected = backend.execute(call, None)
    assert isinstance(result, str) and isinstance(rejected, bool)


@st.composite
def parsed_calls(draw: Any, names: list[str]) -> ParsedCall:
    name = draw(st.sampled_from(names) | st.text(max_size=8))
    kwargs = draw(
        st.dictionaries(st.sampled_from(["folder", "file_name", "content", "a", "self", "x"]), json_values, max_size=3)
    )
    args = tuple(draw(st.lists(json_values, max_size=3)))
    return ParsedCall(name=name, kwargs=kwargs, args=args)


_checks = st.fixed_dictionaries(
    {},
    optional={
        "gt_calls": st.lists(python_calls() | json_values, max_size=3) | json_values,
        "model_calls": st.lists(python_calls() | json_values, max_size=3)
        | json_values
        | st.integers(0, 400).map(lambda n: _deep_list(n)),
        "gt_error": json_values,
        "model_results": json_values,
        "model_error_calls": st.lists(st.integers(-3, 5), max_size=3) | json_values,
        "rejected_calls": st.lists(st.integers(-3, 5), max_size=3) | json_values,
        "empty_gt": json_values,
        "empty_model": json_values,
        "instance_ok": json_values,
        "state_ok": json_values,
        "response_ok": json_values,
        "checker_error": json_values,
    },
)


def _deep_list(depth: int) -> Any:
    value: Any = "cd(folder='x')"
    for _ in range(depth):
        value = [value]
    return value


verdict_mappings = st.fixed_dictionaries(
    {"checks": _checks}, optional={"turn": json_values, "passed": json_values, "reached": json_values}
)


@st.composite
def trajectories(draw: Any) -> Trajectory:
    n_turns = draw(st.integers(0, 3))
    verdicts = [
        TurnVerdict(turn=i, passed=draw(st.booleans()), reached=draw(st.booleans()), checks=draw(_checks))
        for i in range(n_turns)
    ]
    calls = [
        ToolCall(
            turn=draw(st.integers(-1, 3)),
            name=draw(_call_names | st.text(max_size=6)),
            arguments=draw(
                st.dictionaries(st.text(max_size=5), json_values | st.integers(0, 300).map(_deep_list), max_size=3)
            ),
            result=draw(st.none() | st.text(max_size=30) | st.just('{"error": "no such file"}')),
            error=draw(st.none() | st.text(max_size=10)),
            rejected=draw(st.none() | st.text(max_size=10)),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    return Trajectory(task_id="t", category="multi_turn_base", group="g", turn_verdicts=verdicts, tool_calls=calls,
                      messages=[Message(role="assistant", content=draw(st.text(max_size=20)))])


def check_diagnose(trajectory: Trajectory) -> None:
    labels = diagnose_trajectory(trajectory)
    assert len(labels) == len(trajectory.turn_verdicts)
    assert all(label.label in KNOWN_LABELS for label in labels)


def check_label_turns(verdicts: list[dict[str, Any]]) -> None:
    labels = label_turns(verdicts)
    assert len(labels) == len(verdicts) and all(label in KNOWN_LABELS for label in labels)


# The verify input: lines of bytes as a user's file may hold them (any encoding, any JSON, any shape).
verify_lines_strategy = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.text(max_size=40).map(str.encode),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.builds(lambda tid, turns: json.dumps({"task_id": tid, "turns": turns}).encode(),
                  st.sampled_from(["multi_turn_base_0", "multi_turn_base_1", "nope", ""]) | json_values,
                  st.lists(st.lists(python_calls(), max_size=2), max_size=2) | json_values),
        hostile_values.map(str.encode),
        st.just(b'{"task_id": "multi_turn_base_0", "turns": [["cd(folder=\'\xff\')"]]}'),
    ),
    min_size=1, max_size=6,
)
