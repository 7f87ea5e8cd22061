"""Schema regexes against model-produced arguments (``schemadocs.validate_arguments``): a tool schema's
``pattern`` / ``patternProperties`` comes from an untrusted server and the argument from the model, so a
catastrophic-backtracking pattern such as ``(a+)+$`` must give a refusal quickly, never a hang of the stage
(jsonschema's own keywords run them on Python's ``re``; schemadocs runs them on RE2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jsonschema")
pytest.importorskip("re2")

from seal_platform_libs.toolenv.schemadocs import _validator, validate_arguments  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "a" * 40 + "!"  # (a+)+$ against this: about 2**40 steps of backtracking on Python's re


def _doc(schema: dict) -> dict:
    return {"name": "t", "description": "d", "input_schema": schema}


def _prop(prop: dict) -> dict:
    return _doc({"type": "object", "properties": {"code": prop}})


def _validate_in_a_subprocess(doc: dict, arguments: dict, guard_s: float = 60.0) -> tuple[str | None, float]:
    """validate_arguments(doc, arguments) in a child process that is killed after ``guard_s`` (a regression
    then fails this test instead of hanging the suite): the reason and the seconds validation took."""
    code = textwrap.dedent("""
        import json, sys, time
        from seal_platform_libs.toolenv.schemadocs import validate_arguments
        doc, arguments = json.loads(sys.stdin.read())
        validate_arguments({"name": "warm-up", "input_schema": {"type": "object"}}, {})  # the imports
        start = time.monotonic()
        reason = validate_arguments(doc, arguments)
        print(json.dumps([reason, time.monotonic() - start]))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], input=json.dumps([doc, arguments]), capture_output=True,
                             text=True, cwd=ROOT, timeout=guard_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"validate_arguments did not return within {guard_s:.0f} s (catastrophic backtracking)")
    assert out.returncode == 0, out.stderr
    reason, seconds = json.loads(out.stdout.strip().splitlines()[-1])
    return reason, seconds


@pytest.mark.parametrize(("doc", "arguments", "expected"), [
    pytest.param(_prop({"type": "string", "pattern": "(a+)+$"}), {"code": HOSTILE},
                 "code: 'aaaa", id="pattern"),
    pytest.param(_prop({"type": "string", "pattern": "^(a|a)*$"}), {"code": HOSTILE},
                 "code: 'aaaa", id="pattern-alternation"),
    pytest.param(_prop({"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "(x+x+)+y"}]}),
                 {"code": "x" * 5000}, "code: ", id="pattern-in-anyOf"),
    pytest.param(_doc({"type": "object", "$defs": {"s": {"type": "string", "pattern": "(a+)+$"}},
                       "properties": {"code": {"$ref": "#/$defs/s"}}}), {"code": HOSTILE},
                 "code: 'aaaa", id="pattern-behind-ref"),
    pytest.param(_doc({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                       "properties": {"code": {"type": "string", "pattern": "(a+)+$"}}}), {"code": HOSTILE},
                 "code: 'aaaa", id="pattern-draft-04"),
    pytest.param(_doc({"type": "object", "patternProperties": {"(a+)+$": {"type": "integer"}},
                       "additionalProperties": False}), {HOSTILE: 1},
                 f"'{HOSTILE}' does not match any of the regexes: '(a+)+$'", id="patternProperties+additional"),
    pytest.param(_doc({"type": "object", "patternProperties": {"(a+)+$": {"type": "integer"}}}),
                 {HOSTILE: "x", "b": 1}, None, id="patternProperties"),
    pytest.param(_doc({"type": "object", "patternProperties": {"(a+)+$": {}}, "unevaluatedProperties": False}),
                 {HOSTILE: 1}, "arguments: cannot be checked", id="patternProperties+unevaluated"),
    pytest.param(_doc({"type": "object", "propertyNames": {"pattern": "(a+)+$"}}), {HOSTILE: 1},
                 f"arguments: '{HOSTILE}' does not match", id="propertyNames"),
])
def test_a_catastrophic_pattern_gives_a_refusal_in_bounded_time(doc, arguments, expected):
    reason, seconds = _validate_in_a_subprocess(doc, arguments)
    assert seconds < 5, f"validation took {seconds:.1f} s"
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith(expected), reason


@pytest.mark.parametrize(("pattern", "value", "accepted"), [
    ("^[a-z]+$", "abc", True),
    ("^[a-z]+$", "ab1", False),
    (r"^\d{3}-\d{4}$", "555-1234", True),
    (r"^\d{3}-\d{4}$", "5555-1234", False),
    ("^(?:get|set)_[A-Za-z_]+$", "get_item", True),
    ("^(?:get|set)_[A-Za-z_]+$", "put_item", False),
    ("item", "an item here", True),  # unanchored: a match anywhere, as re.search
    (r"^[\w.+-]+@[\w-]+\.[\w.]+$", "a.b@c.org", True),
    (r"^[\w.+-]+@[\w-]+\.[\w.]+$", "not an address", False),
    (r"^\p{L}+$", "héllo", True),  # Unicode classes (ECMA-262 with the u flag); Python's re rejects \p
    (r"^[\u4e00-\u9fa5]+$", "中文", True),  # ECMA-262's \uXXXX escape, rewritten for RE2
    (r"^[\u4e00-\u9fa5]+$", "abc", False),
    (r"^\\u0041$", "\\u0041", True),  # an escaped backslash before u: a literal \u0041, not an escape
    ("^(?<word>[a-z]+)$", "abc", True),  # ECMA-262 named group; Python's re wants (?P<word>...)
    ("^[a-z]+$", "abc\n", False),  # as in ECMA-262, $ is the very end (Python's re let it match before a \n)
    (r"^\w+$", "héllo", False),  # as in ECMA-262, \w is ASCII
    (r"^a\/b$", "a/b", True),  # ECMA-262 allows an escaped slash
])
def test_ordinary_patterns_accept_and_refuse_as_before(pattern, value, accepted):
    reason = validate_arguments(_prop({"type": "string", "pattern": pattern}), {"code": value})
    if accepted:
        assert reason is None
    else:
        assert reason == f"code: {value!r} does not match {pattern!r}"


def test_a_pattern_only_applies_to_strings():
    assert validate_arguments(_prop({"pattern": "^[a-z]+$"}), {"code": 5}) is None


@pytest.mark.parametrize("pattern", [
    "^(?=.*[A-Z]).+$",  # lookahead: backtracking only
    r"^(a)\1$",  # backreference
    "^(?:(?:(?:a{100}){100}){100})$",  # repeats past RE2's limit (the regex package would unroll them)
])
def test_a_pattern_re2_cannot_compile_refuses_the_call_naming_the_argument(pattern):
    doc = _doc({"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}, "n": {}}})
    reason = validate_arguments(doc, {"code": "Abc", "n": 1})
    assert reason is not None and reason.startswith(f"code: cannot be checked against the tool's schema pattern "
                                                    f"{pattern!r} (RE2 cannot compile it: "), reason
    assert validate_arguments(doc, {"n": 1}) is None  # the pattern never runs when the argument is left out


def test_an_unchecked_argument_is_the_reason_given_before_other_errors():
    doc = _doc({"type": "object", "properties": {"a": {"type": "integer"},
                                                 "b": {"type": "string", "pattern": "^(?=x)"}}})
    assert validate_arguments(doc, {"a": "not a number", "b": "x"}).startswith("b: cannot be checked")


def test_a_lone_surrogate_in_an_argument_is_refused_not_raised():
    """json.loads accepts "\\ud800", which has no UTF-8 (RE2 matches UTF-8)."""
    reason = validate_arguments(_prop({"type": "string", "pattern": "^a"}), {"code": "a\ud800"})
    assert reason is not None and reason.startswith("code: cannot be checked"), reason


def test_pattern_properties_validate_keys_and_their_values():
    doc = _doc({"type": "object", "properties": {"name": {"type": "string"}},
                "patternProperties": {"^x_[a-z]+$": {"type": "integer"}, "^tag_": {"type": "string"}},
                "additionalProperties": False})
    assert validate_arguments(doc, {"name": "n", "x_a": 1, "tag_1": "t"}) is None
    assert validate_arguments(doc, {"x_a": "s"}) == "x_a: 's' is not of type 'integer'"
    assert validate_arguments(doc, {"tag_": 3}) == "tag_: 3 is not of type 'string'"
    assert validate_arguments(doc, {"y": 1}) == "'y' does not match any of the regexes: '^tag_', '^x_[a-z]+$'"
    # additionalProperties as a schema applies to the keys no pattern matches
    doc = _doc({"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
                "additionalProperties": {"type": "string"}})
    assert validate_arguments(doc, {"x_a": 1, "other": "s"}) is None
    assert validate_arguments(doc, {"other": 1}) == "other: 1 is not of type 'string'"
    # without patternProperties, jsonschema's own message
    doc = _doc({"type": "object", "properties": {"a": {}}, "additionalProperties": False})
    assert validate_arguments(doc, {"a": 1, "b": 2}) == "Additional properties are not allowed ('b' was unexpected)"


def test_a_pattern_property_re2_cannot_compile_refuses_the_key():
    doc = _doc({"type": "object", "patternProperties": {"^(?!internal)": {"type": "integer"}}})
    assert validate_arguments(doc, {}) is None
    reason = validate_arguments(doc, {"key": 1})
    assert reason is not None and reason.startswith("key: cannot be checked against the tool's schema pattern"), reason
    # patternProperties applies to every key (those under properties too), and additionalProperties needs the
    # same patterns to know which keys are additional
    doc = _doc({"type": "object", "properties": {"a": {}}, "patternProperties": {"^(?!internal)": {}},
                "additionalProperties": False})
    assert validate_arguments(doc, {}) is None
    assert validate_arguments(doc, {"a": 1}).startswith("a: cannot be checked")
    assert validate_arguments(doc, {"key": 1}).startswith("key: cannot be checked")


def test_unevaluated_properties_without_pattern_properties_are_unchanged():
    doc = _doc({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False})
    assert validate_arguments(doc, {"a": 1}) is None
    assert validate_arguments(doc, {"b": 1}) == "arguments: Unevaluated properties are not allowed ('b' was unexpected)"


def test_a_pattern_invalid_for_pythons_re_still_makes_the_schema_invalid():
    reason = validate_arguments(_prop({"type": "string", "pattern": "("}), {"code": "x"})
    assert reason is not None and reason.startswith("the tool's input schema is invalid")


def test_the_validator_of_a_schema_is_built_once():
    doc = _prop({"type": "string", "pattern": "^cached-[0-9]+$"})
    validate_arguments(doc, {"code": "cached-1"})
    before = _validator.cache_info()
    assert validate_arguments(doc, {"code": "cached-2"}) is None
    after = _validator.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
