"""Tool-call formats: presentation and safe parsing of assistant messages."""

from __future__ import annotations

import json

import pytest

from seal_platform_libs.toolenv.formats import (
    REVEAL_TEXT,
    HermesFormat,
    ParsedCall,
    PythonFormat,
    get_format,
    openai_tool,
)

DOC = {
    "name": "mv",
    "description": "Move a file.",
    "parameters": {
        "type": "dict",
        "properties": {
            "source": {"type": "string", "description": "From."},
            "destination": {"type": "string", "description": "To."},
            "ratio": {"type": "float", "description": "A float."},
        },
        "required": ["source", "destination"],
    },
    "response": {"type": "dict", "properties": {"result": {"type": "string"}}},
}


# --- presentation -----------------------------------------------------------------------------------------


def test_hermes_system_prompt_lists_tools_as_json_inside_tools_tags():
    text = HermesFormat().system_prompt([DOC])
    assert text.startswith("# Tools\n")
    inner = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    entry = json.loads(inner)
    assert entry["type"] == "function"
    assert entry["function"]["name"] == "mv"
    # BFCL's python-ish types become JSON-schema types; parameter order is kept.
    assert entry["function"]["parameters"]["type"] == "object"
    assert entry["function"]["parameters"]["properties"]["ratio"]["type"] == "number"
    assert list(entry["function"]["parameters"]["properties"]) == ["source", "destination", "ratio"]
    assert "response" not in entry["function"]
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in text


def test_compact_rendering_is_shorter_and_equivalent():
    fmt = HermesFormat()
    loose, compact = fmt.system_prompt([DOC, DOC]), fmt.system_prompt([DOC, DOC], compact=True)
    assert len(compact) < len(loose)
    lines = lambda t: [json.loads(x) for x in t.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert lines(compact) == lines(loose)


def test_response_schema_on_request_and_docs_not_modified():
    original = json.dumps(DOC, sort_keys=True)
    assert "response" in openai_tool(DOC, include_response=True)["function"]
    HermesFormat(include_response=True).system_prompt([DOC])
    assert json.dumps(DOC, sort_keys=True) == original


def test_reveal_message_carries_docs_and_the_official_sentence():
    for fmt in (HermesFormat(), PythonFormat()):
        text = fmt.reveal_message([DOC])
        assert text.endswith(REVEAL_TEXT)
        assert '"mv"' in text


# --- hermes parsing ---------------------------------------------------------------------------------------


def test_hermes_parses_several_calls_and_ignores_prose():
    text = (
        "Sure, let me do it.\n<tool_call>\n{\"name\": \"cd\", \"arguments\": {\"folder\": \"docs\"}}\n</tool_call>\n"
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    )
    result = HermesFormat().parse(text)
    assert result.ok
    assert [(c.name, c.arguments) for c in result.calls] == [("cd", {"folder": "docs"}), ("ls", {})]


def test_hermes_no_call_is_an_empty_ok_result():
    result = HermesFormat().parse("The file has been moved.")
    assert result.ok and result.calls == []


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('<tool_call>{"name": "cd", "arguments": {"folder": }}</tool_call>', "JSON"),
        ('<tool_call>{"name": "cd", "arguments": {"folder": "x"}}', "not closed"),
        ('{"name": "cd"}</tool_call>', "no opening"),
        ('<tool_call>["cd"]</tool_call>', "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "name"),
        ('<tool_call>{"name": "cd", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "cd", "arguments": "not json"}</tool_call>', "not a JSON object"),
    ],
)
def test_hermes_malformed_blocks_are_errors_not_exceptions(text, fragment):
    result = HermesFormat().parse(text)
    assert not result.ok
    assert fragment in result.error


def test_hermes_one_bad_block_rejects_the_whole_message():
    text = '<tool_call>{"name": "ls", "arguments": {}}</tool_call><tool_call>{oops}</tool_call>'
    result = HermesFormat().parse(text)
    assert not result.ok and "tool call 2" in result.error


def test_hermes_accepts_string_encoded_arguments_and_missing_arguments():
    result = HermesFormat().parse('<tool_call>{"name": "cd", "arguments": "{\\"folder\\": \\"a\\"}"}</tool_call>'
                                  '<tool_call>{"name": "pwd"}</tool_call>')
    assert result.ok
    assert [(c.name, c.arguments) for c in result.calls] == [("cd", {"folder": "a"}), ("pwd", {})]


def test_hermes_round_trip():
    fmt = HermesFormat()
    calls = [ParsedCall("mv", {"source": "a b.txt", "destination": "ü/x"}), ParsedCall("ls", {"a": True})]
    parsed = fmt.parse(fmt.render_calls(calls))
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]


def test_hermes_observation_wrapping():
    fmt = HermesFormat()
    assert fmt.render_result("ls", '{"a": 1}') == '<tool_response>\n{"a": 1}\n</tool_response>'
    assert "Error: bad" in fmt.render_error("bad")
    bare = HermesFormat(wrap_results=False)
    assert bare.render_result("ls", '{"a": 1}') == '{"a": 1}' and bare.render_error("bad") == "Error: bad"


# --- python parsing ---------------------------------------------------------------------------------------


def test_python_parses_a_call_list_with_positional_arguments():
    result = PythonFormat().parse("[cd(folder='docs'), sort('report.txt'), mean(numbers=[1, 2.5])]")
    assert result.ok
    assert [(c.name, c.arguments, c.args) for c in result.calls] == [
        ("cd", {"folder": "docs"}, ()),
        ("sort", {}, ("report.txt",)),
        ("mean", {"numbers": [1, 2.5]}, ()),
    ]


def test_python_accepts_code_fences_and_a_bare_call():
    assert [c.name for c in PythonFormat().parse("```python\n[ls(a=True)]\n```").calls] == ["ls"]
    assert [c.name for c in PythonFormat().parse("pwd()").calls] == ["pwd"]


def test_python_prose_ends_the_turn_and_broken_lists_are_errors():
    assert PythonFormat().parse("I moved the file for you.").calls == []
    assert PythonFormat().parse("I moved the file for you.").ok
    assert PythonFormat().parse("[]").ok
    broken = PythonFormat().parse("[cd(folder='docs'")
    assert not broken.ok and "Could not parse" in broken.error


@pytest.mark.parametrize(
    "text",
    [
        "[__import__('os').system('echo pwned')]",
        "[cd(folder=open('/etc/passwd').read())]",
        "[os.system('ls')]",
        "[cd(**{'folder': 'x'})]",
        "[cd(folder=1 + 2)]",
    ],
)
def test_python_never_evaluates_model_text(text, tmp_path):
    result = PythonFormat().parse(text)
    assert not result.ok


def test_python_round_trip():
    fmt = PythonFormat()
    calls = [ParsedCall("mv", {"source": "it's.txt", "destination": "d"}), ParsedCall("ls", {"a": True})]
    parsed = fmt.parse(fmt.render_calls(calls))
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in calls]


def test_python_system_prompt_is_bfcl_style():
    text = PythonFormat().system_prompt([DOC])
    assert "[func_name1(params_name1=params_value1" in text
    assert json.loads(text.split("that you can invoke.\n", 1)[1].strip())[0]["name"] == "mv"


def test_get_format_names_the_known_ones():
    assert get_format("hermes").name == "hermes"
    assert get_format("python").name == "python"
    with pytest.raises(ValueError, match="hermes, python"):
        get_format("xml")
