"""Untrusted input never raises out of a stage (property tests; the long fuzz run is
benchmarks/fuzz_untrusted.py). Every crash the fuzzer found is a regression case at the bottom."""

from __future__ import annotations

import json

import pytest
import untrusted as u
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seal_platform_libs.toolenv.calls import ParsedCall
from seal_platform_libs.toolenv.formats import HermesFormat, PythonFormat

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FAST
@given(u.hermes_messages())
def test_hermes_parse_never_raises(text):
    u.check_format_parse(HermesFormat(), text)


@FAST
@given(u.python_messages())
def test_python_parse_never_raises(text):
    u.check_format_parse(PythonFormat(), text)


@FAST
@given(st.one_of(u.python_calls(), u.fragments, st.text()))
def test_call_parser_never_raises(text):
    u.check_parse_call(text)


@pytest.fixture(scope="module")
def backend(request):
    from seal_platform_plugins.bfcl.backend import Backend
    from seal_platform_plugins.bfcl.data import load_tasks
    from seal_platform_plugins.bfcl.executor import _payload_for_worker

    task = next(t for t in load_tasks(split="all") if "GorillaFileSystem" in t.payload["involved_classes"])
    return Backend.for_payload(_payload_for_worker(task))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_executor_argument_checks_never_raise(backend, data):
    u.check_backend_execute(backend, data.draw(u.parsed_calls(sorted(backend.method_names))))


@FAST
@given(u.trajectories())
def test_diagnoser_labels_any_trajectory(trajectory):
    u.check_diagnose(trajectory)


@FAST
@given(st.lists(u.verdict_mappings, max_size=3))
def test_diagnoser_labels_any_verify_trace(verdicts):
    u.check_label_turns(verdicts)


@pytest.fixture(scope="module")
def bfcl_env():
    from seal_platform_plugins.bfcl.environment import BfclEnvironment
    from seal_platform_plugins.bfcl.settings import BfclSettings

    env = BfclEnvironment(BfclSettings(executor_workers=1))
    yield env
    env.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(u.verify_lines_strategy)
def test_verify_gives_one_record_per_line(bfcl_env, lines):
    from seal_platform.verify import score_line

    for number, line in enumerate(lines, 1):
        record = score_line(bfcl_env, number, line)
        assert isinstance(record, dict) and ("error" in record or "success" in record)
        json.dumps(record)


# --- regressions: crashes found by the fuzzer and the issue ----------------------------------------------------


@pytest.mark.parametrize("text", [
    "<tool_call>" + "[" * 3000 + "]" * 3000 + "</tool_call>",  # RecursionError out of json.loads
    '<tool_call>{"name":"cd","arguments":{"folder":' + "9" * 5000 + "}}</tool_call>",  # int digit limit
    '<tool_call>{"name":"cd","arguments":{"a":' + "[" * 900 + "]" * 900 + "}}</tool_call>",  # deep but parseable
])
def test_hostile_hermes_messages_are_parse_errors(text):
    result = HermesFormat().parse(text)
    assert not result.ok and not result.calls


@pytest.mark.parametrize("text", ["[f(a=" + "9" * 5000 + ")]", "[" * 5000, "[f(a=" + "[" * 3000 + "]" * 3000 + ")]",
                                  "[cd(folder=0x" + "f" * 3600 + ")]",  # over the digit limit only in decimal
                                  "[x(a=...)]", "[cd(folder=b'\\xff')]"])  # no JSON form: the store write failed
def test_hostile_python_messages_are_parse_errors(text):
    assert not PythonFormat().parse(text).ok


def test_deep_arguments_do_not_break_the_diagnoser():
    deep = u._deep_list(5000)
    traj = u.Trajectory(
        task_id="t",
        category="c",
        group="g",
        turn_verdicts=[
            u.TurnVerdict(
                turn=0, passed=False, checks={"gt_calls": ["cd(folder='a')"], "state_ok": False, "model_calls": deep}
            )
        ],
        tool_calls=[u.ToolCall(turn=0, name="cd", arguments={"folder": deep})],
    )
    u.check_diagnose(traj)
    u.check_label_turns([{"checks": {"gt_calls": ["cd(folder='a')"], "model_calls": deep, "state_ok": False}}])


def test_backend_refuses_deep_arguments_without_raising(backend):
    u.check_backend_execute(backend, ParsedCall(name="cd", kwargs={"folder": u._deep_list(20000)}))


@pytest.mark.parametrize("checks", [
    {"gt_calls": False},
    {"model_results": True},
    {"rejected_calls": [[]]},
    {"model_error_calls": [[]]},
    {"model_calls": ["cd()"], "model_error_calls": [0], "model_results": False, "gt_calls": []},
])
def test_malformed_traces_get_labels(checks):
    u.check_label_turns([{"checks": checks}, {"turn": [1], "checks": checks}])


def test_verify_lines_bad_bytes_and_nesting_lose_no_other_line(bfcl_env):
    from seal_platform.verify import score_line

    lines = [b'{"task_id": "multi_turn_base_0", "turns": [["cd(folder=\'\xff\')"]]}', b"[" * 5000 + b"]" * 5000,
             b'{"task_id": "multi_turn_base_0", "turns": []}']
    out = [score_line(bfcl_env, n, line) for n, line in enumerate(lines, 1)]
    assert "UTF-8" in out[0]["error"] and "line 1" in out[0]["error"]
    assert "line 2" in out[1]["error"]
    assert out[2]["task_id"] == "multi_turn_base_0" and "success" in out[2]


def test_thousands_of_calls_in_one_message_are_refused_up_front():
    from seal_platform_libs.toolenv.formats import MAX_PYTHON_CALLS

    many = "[" + ", ".join(["f(a=1)"] * (MAX_PYTHON_CALLS + 1)) + "]"
    result = PythonFormat().parse(many)
    assert not result.ok and "Too many function calls" in result.error
    assert len(PythonFormat().parse("[" + ", ".join(["f(a=1)"] * MAX_PYTHON_CALLS) + "]").calls) == MAX_PYTHON_CALLS


def _tokenizer_counts(source: str) -> tuple[int, int]:
    """Parentheses and string literals as Python's own tokenizer sees them."""
    import io
    import tokenize

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    return (sum(1 for t in tokens if t.type == tokenize.OP and t.string == "("),
            sum(1 for t in tokens if t.type == tokenize.STRING))


_text_values = st.text(alphabet=st.sampled_from(list("ab (')\"\\\n[]{}=,:#")), max_size=12)
_values = st.recursive(st.one_of(_text_values, st.integers(), st.none(), st.booleans()),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text_values, inner, max_size=3),
                       max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["f", "mv", "echo"]), _values, st.booleans()), min_size=1, max_size=6))
def test_code_counts_see_parentheses_and_strings_as_python_does(calls):
    from seal_platform_libs.toolenv.calls import code_counts

    # Strings with quotes, backslashes, newlines and brackets inside, in single and triple quotes.
    parts = [f"{name}(a={value!r}, b='''{value}''')" if triple and "'" not in str(value) and "\\" not in str(value)
             else f"{name}(a={value!r})" for name, value, triple in calls]
    source = "[" + ", ".join(parts) + "]"
    parens, elements = code_counts(source, 10**6, 10**6)
    want_parens, strings = _tokenizer_counts(source)
    assert parens == want_parens
    assert elements >= strings + len(calls)  # every literal and every call name counts


def test_parentheses_inside_string_arguments_are_not_calls():
    # A legitimate call whose argument is code or prose with thousands of parentheses was refused as
    # "too many function calls" when every '(' in the message counted.
    code = "def area(r):\n    return math.pi * (r ** 2)  # (cm^2)\nprint(area(float(input('r? '))))\n" * 800
    for text in (f"[write_file(path='area.py', content={code!r})]",
                 "[write_file(path='a.py', content='''" + code.replace("\\", "") + "''')]"):
        assert text.count("(") > 2000
        result = PythonFormat().parse(text)
        assert result.ok and len(result.calls) == 1 and result.calls[0].arguments["content"].count("(") > 2000


def test_tens_of_thousands_of_values_in_one_message_are_refused_up_front():
    from seal_platform_libs.toolenv.formats import MAX_PYTHON_ELEMENTS

    for text in ("[f(" + ", ".join(["'('"] * (MAX_PYTHON_ELEMENTS + 1)) + ")]",
                 "[f(a=[" + ", ".join(["1"] * (MAX_PYTHON_ELEMENTS + 1)) + "])]",
                 "[f(a=" + repr([{"k": [1, 2]}] * 3000) + ")]"):
        result = PythonFormat().parse(text)
        assert not result.ok and "Too many values" in result.error, text[:80]
    fine = "[f(a=[" + ", ".join(["1"] * (MAX_PYTHON_ELEMENTS - 10)) + "])]"
    assert PythonFormat().parse(fine).calls[0].arguments["a"] == [1] * (MAX_PYTHON_ELEMENTS - 10)


def test_code_counts_of_hostile_quotes():
    from seal_platform_libs.toolenv.calls import code_counts

    # Unterminated strings (a syntax error anyway) count their rest as code; a run of an even number of
    # backslashes does not escape the quote after it, so every other '(' here is inside a string.
    hostile = {
        "'''" + "\\'''(" * 13_000: 13_000,
        "'\\" * 32_000: 0,
        '"' + "a(" * 32_000: 32_000,
        ("\\" * 100 + "'(") * 630: 315,
    }
    for text, parens in hostile.items():
        assert code_counts(text, 10**6, 10**6)[0] == parens


def test_every_decoding_path_has_the_same_guards():
    import json

    from seal_platform_libs.toolenv.formats import MAX_PYTHON_CALLS, get_format

    hermes, python = get_format("hermes"), get_format("python")
    # Arguments given as a JSON string are decoded under the call's own depth and size guards.
    for arguments, words in (("[" * 400 + "]" * 400, "nest deeper"), ("[" * 100_000, "nested too deeply"),
                             ('{"n": ' + "9" * 5000 + "}", "could not be parsed")):
        result = hermes.parse("<tool_call>" + json.dumps({"name": "f", "arguments": arguments}) + "</tool_call>")
        assert result.error and words in result.error and not result.calls, (words, result.error)
    # A call list opened with "(" has the same cap on calls as one opened with "[".
    for opening, closing in (("[", "]"), ("(", ")")):
        result = python.parse(opening + ",".join(["f()"] * (MAX_PYTHON_CALLS + 1)) + closing)
        assert result.error and "Too many function calls" in result.error
    # Whitespace runs parse (in linear time: benchmarks/bench_parsing.py), fenced or not.
    assert len(python.parse("[f(a=1" + " " * 80_000 + ")]").calls) == 1
    assert python.parse("```python\n[f(a=1)]\n```").calls == python.parse("[f(a=1)]").calls
