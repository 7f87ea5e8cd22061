"""Safe parsing of BFCL call syntax into (name, literal arguments), and rendering back."""

from __future__ import annotations

import pytest

from seal_platform_libs.toolenv.calls import (
    CallSyntaxError,
    ParsedCall,
    from_arguments,
    parse_call,
    parse_call_shared,
    parse_calls,
    render_call,
)


def test_keyword_and_positional_literals():
    call = parse_call("mv(source='final_report.pdf', destination=\"temp\")")
    assert call.ok and call.name == "mv" and call.kwargs == {"source": "final_report.pdf", "destination": "temp"}
    call = parse_call("sort('final_report.pdf')")
    assert call.ok and call.args == ("final_report.pdf",) and call.kwargs == {}
    call = parse_call("f(a=-1.5, b=[1, {'x': None}], c=(True, False), d={1, 2}, e=0xff)")
    assert call.kwargs == {"a": -1.5, "b": [1, {"x": None}], "c": (True, False), "d": {1, 2}, "e": 255}
    assert parse_call("  ls()  ").name == "ls"


def test_every_ground_truth_call_parses(all_tasks):
    count = 0
    for task in all_tasks:
        for turn in task.payload["ground_truth"]:
            for text in turn:
                call = parse_call(text)
                assert call.ok, (text, call.error)
                count += 1
    assert count > 3000


@pytest.mark.parametrize(
    "text, reason",
    [
        ("os.system('ls')", "plain tool name"),
        ("ls()()", "plain tool name"),
        ("x[0](1)", "plain tool name"),
        ("cd(folder=x)", "name 'x' is not defined"),
        ("cd(folder=true)", "name 'true' is not defined"),
        ("cd(folder='a' + 'b')", "not a literal"),
        ("cd(folder=open('/etc/passwd').read())", "not a literal"),
        ("cd(*['a'])", "unpacking"),
        ("cd(**{'folder': 'a'})", "unpacking"),
        ("cd(folder=(lambda: 1)())", "not a literal"),
        ("cd(folder=[i for i in range(9)])", "not a literal"),
        ("cd(folder='a', folder='b')", "repeated"),
        ("__import__('os')", "not defined"),
        ("cd(folder='a'", "invalid call syntax"),
        ("1 + 2", "not a function call"),
        ("cd(folder='x' * 10**9)", "not a literal"),
    ],
)
def test_anything_but_literals_is_refused(text, reason):
    call = parse_call(text)
    assert not call.ok
    assert reason in call.error


@pytest.mark.parametrize(
    "text, reason",
    [
        ("x(a=...)", "not ..."),
        ("cd(folder=b'\\xff')", "not bytes"),
        ("f(a=[{'k': (1, {...: 2})}])", "not ..."),  # anywhere in nested arguments, dict keys too
        ("f([1, {2, b'x'}])", "not bytes"),
        ("cd(folder=0x" + "f" * 3600 + ")", "more than 4300 digits"),  # short in hex, too long in decimal
        ("cd(folder=-0b1" + "0" * 14_300 + ")", "more than 4300 digits"),
    ],
)
def test_literals_without_a_json_form_are_refused(text, reason):
    """Ellipsis and bytes have no JSON form (the store write of the trajectory would fail), and an integer
    over the int-to-text digit limit breaks render_call's repr: each is refused like any other bad argument."""
    call = parse_call(text)
    assert not call.ok and "arguments must be JSON values" in call.error and reason in call.error
    assert parse_call("cd(folder=0x" + "f" * 3500 + ")").ok  # within the limit: accepted and renderable
    render_call("cd", parse_call("cd(folder=0x" + "f" * 3500 + ")").kwargs)


def test_limits_on_size_and_depth():
    assert "longer than" in parse_call("f(a='" + "x" * 30_000 + "')").error
    assert "nesting" in parse_call("f(a=" + "[" * 40 + "]" * 40 + ")").error
    # Pathological nesting that would blow the parser's stack is an error, not a crash.
    assert not parse_call("f(a=" + "(" * 5000 + ")" * 5000 + ")").ok
    assert not parse_call(12).ok


def test_call_lists():
    calls = parse_calls("[cd(folder='a'), ls(a=True), bad(x=y)]")
    assert [c.name for c in calls] == ["cd", "ls", "bad"]
    assert calls[0].ok and calls[1].ok and not calls[2].ok
    assert calls[0].text == "cd(folder='a')"
    assert [c.name for c in parse_calls("pwd()")] == ["pwd"]
    for text in ["", "hello there", "[1, 2", "{'a': 1}"]:
        with pytest.raises(CallSyntaxError):
            parse_calls(text)


@pytest.mark.parametrize(
    "kwargs, args",
    [
        ({"a": 1, "b": "it's \"quoted\"\n", "c": [1.5, None, True], "d": {"k": (1,)}}, ()),
        ({}, ("x", 2, [3])),
        ({"s": set(), "t": (), "u": {1, 2}, "v": -0.25, "w": "\x00"}, ()),
    ],
)
def test_render_round_trips(kwargs, args):
    text = render_call("tool", kwargs, args)
    call = parse_call(text)
    assert call.ok and call.name == "tool" and call.kwargs == kwargs and call.args == args


def test_structured_calls():
    call = from_arguments("cd", {"folder": "docs"})
    assert call.ok and call.kwargs == {"folder": "docs"} and call.render() == "cd(folder='docs')"
    assert from_arguments("cd", None).kwargs == {}
    assert not from_arguments("cd", ["docs"]).ok
    assert not from_arguments("", {}).ok
    assert not from_arguments(None, {}).ok
    assert not from_arguments("__class__", {}).ok
    assert isinstance(from_arguments("cd", {}), ParsedCall)


def test_shared_parses_equal_fresh_ones_and_long_texts_are_not_kept():
    text = "post_tweet(content='hi', tags=['#a', '#b'])"
    assert parse_call_shared(text) is parse_call_shared(text)  # parsed once
    assert parse_call_shared(text) == parse_call(text)
    long_text = "echo(content='" + "x" * 5000 + "')"
    assert parse_call_shared(long_text) == parse_call(long_text)
    assert parse_call_shared(long_text) is not parse_call_shared(long_text)  # too long to keep
    assert parse_call_shared("rm(") == parse_call("rm(") and not parse_call_shared("rm(").ok
