"""Rendering of BFCL interface revisions: each change on the real BFCL tool docs, and revision 0 untouched."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from seal_platform.types import Interface
from seal_platform_libs.toolenv.interface import (
    GUIDELINES_HEADER,
    NO_INVENT_NOTE,
    classify_observation,
    describe_system,
    enum_values,
    recovery_hint,
    render_tools,
    system_addendum,
)


def _func_doc_dir() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.submodule_search_locations, "bfcl-eval is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "multi_turn_func_doc"


@pytest.fixture(scope="module")
def all_docs() -> dict[str, list[dict]]:
    out = {}
    for path in sorted(_func_doc_dir().glob("*.json")):
        out[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(out) >= 8
    return out


def by_name(docs: list[dict], name: str) -> dict:
    return next(d for d in docs if d["name"] == name)


def revision(changes: list[str], scope: str = "*", guidelines: list[str] | None = None) -> Interface:
    body: dict = {"changes": sorted(changes)}
    if guidelines:
        body["guidelines"] = [{"label": f"l{i}", "text": t} for i, t in enumerate(guidelines)]
    return Interface(revision=1, parent=0, spec={"version": 1, "scopes": {scope: body}})


CATEGORY = "multi_turn_base"


def test_revision_zero_returns_the_docs_untouched(all_docs: dict[str, list[dict]]) -> None:
    pristine = Interface()
    for docs in all_docs.values():
        before = json.dumps(docs, sort_keys=False)
        out = render_tools(docs, pristine, CATEGORY)
        assert out is docs
        assert json.dumps(out, sort_keys=False) == before
    assert system_addendum(pristine, CATEGORY) == ""
    assert recovery_hint(pristine, CATEGORY, '{"error": "No user is currently logged in."}') is None
    assert recovery_hint(pristine, CATEGORY, "Error during execution: missing 1 required positional argument") is None
    assert describe_system({}) == ""


def test_revision_without_schema_changes_returns_docs_untouched(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["gorilla_file_system"]
    assert render_tools(docs, revision(["recovery", "no_invent_note"]), CATEGORY) is docs


def test_required_markers(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["travel_booking"]
    original = copy.deepcopy(docs)
    out = render_tools(docs, revision(["required_markers"]), CATEGORY)
    assert docs == original, "the caller's docs must not be modified"
    n_marked = 0
    for doc_in, doc_out in zip(docs, out):
        required = set(doc_in["parameters"].get("required", []))
        for name, schema in doc_out["parameters"]["properties"].items():
            old = doc_in["parameters"]["properties"][name].get("description", "")
            if name in required:
                assert schema["description"] == f"[required] {old}".rstrip()
                n_marked += 1
            else:
                assert schema["description"] == old
        assert doc_out["name"] == doc_in["name"]
        assert doc_out["description"] == doc_in["description"]
    assert n_marked > 10


def test_required_markers_reach_nested_objects() -> None:
    docs = [
        {
            "name": "send_batch",
            "description": "Send messages.",
            "parameters": {
                "type": "dict",
                "properties": {
                    "messages": {
                        "type": "array",
                        "description": "The messages.",
                        "items": {
                            "type": "dict",
                            "properties": {
                                "to": {"type": "string", "description": "Receiver."},
                                "cc": {"type": "string", "description": "Copy."},
                            },
                            "required": ["to"],
                        },
                    },
                    "options": {
                        "type": "dict",
                        "description": "Options.",
                        "properties": {"urgent": {"type": "boolean", "description": "Flag."}},
                        "required": ["urgent"],
                    },
                },
                "required": ["messages"],
            },
        }
    ]
    out = render_tools(docs, revision(["required_markers"]), CATEGORY)
    props = out[0]["parameters"]["properties"]
    assert props["messages"]["description"] == "[required] The messages."
    assert props["messages"]["items"]["properties"]["to"]["description"] == "[required] Receiver."
    assert props["messages"]["items"]["properties"]["cc"]["description"] == "Copy."
    assert props["options"]["description"] == "Options."
    assert props["options"]["properties"]["urgent"]["description"] == "[required] Flag."
    # hide_optional only drops top-level optional parameters: a nested optional field stays visible.
    hidden = render_tools(docs, revision(["hide_optional"]), CATEGORY)[0]["parameters"]["properties"]
    assert set(hidden) == {"messages"}
    assert set(hidden["messages"]["items"]["properties"]) == {"to", "cc"}


@pytest.mark.parametrize(
    ("file", "tool", "param", "expected"),
    [
        ("vehicle_control", "setHeadlights", "mode", ["on", "off", "auto"]),  # [Enum]: ["on", ...]
        ("vehicle_control", "lockDoors", "door", ["driver", "passenger", "rear_left", "rear_right"]),
        ("travel_booking", "compute_exchange_rate", "base_currency",
         ["USD", "RMB", "EUR", "JPY", "GBP", "CAD", "AUD", "INR", "RUB", "BRL", "MXN"]),  # [Enum]: USD, RMB
        ("travel_booking", "get_flight_cost", "travel_class", ["economy", "business", "first"]),  # Options are:
        ("travel_booking", "authenticate_travel", "grant_type", ["read_write", "read", "write"]),  # Here are..
        ("web_search", "fetch_url_content", "mode", ["raw", "markdown", "truncate"]),  # JSON-schema enum field
    ],
)
def test_enum_values_from_every_bfcl_spelling(
    all_docs: dict[str, list[dict]], file: str, tool: str, param: str, expected: list[str]
) -> None:
    schema = by_name(all_docs[file], tool)["parameters"]["properties"][param]
    assert enum_values(schema) == expected
    out = render_tools(all_docs[file], revision(["enum_values"]), CATEGORY)
    desc = by_name(out, tool)["parameters"]["properties"][param]["description"]
    assert desc.endswith("Allowed values: " + ", ".join(expected) + ".")
    assert desc.startswith(schema["description"].rstrip())


def test_enum_values_leave_open_parameters_alone(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["gorilla_file_system"]
    assert all(enum_values(s) == [] for d in docs for s in d["parameters"]["properties"].values())
    assert render_tools(docs, revision(["enum_values"]), CATEGORY) == docs


def test_type_hints(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["vehicle_control"]
    out = render_tools(docs, revision(["type_hints"]), CATEGORY)
    assert by_name(out, "lockDoors")["parameters"]["properties"]["door"]["description"].endswith(
        "Type: array of string."
    )
    assert by_name(out, "setHeadlights")["parameters"]["properties"]["mode"]["description"].endswith("Type: string.")
    # Without the change there is no type hint.
    out = render_tools(docs, revision(["required_markers"]), CATEGORY)
    assert "Type:" not in json.dumps(out)


def test_hide_optional_parameters(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["vehicle_control"]
    out = render_tools(docs, revision(["hide_optional"]), CATEGORY)
    climate_in = by_name(docs, "adjustClimateControl")["parameters"]
    climate_out = by_name(out, "adjustClimateControl")["parameters"]
    assert set(climate_in["properties"]) > set(climate_in["required"])
    assert set(climate_out["properties"]) == set(climate_in["required"])
    assert climate_out["required"] == climate_in["required"]


def test_changes_combine_in_a_fixed_order(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["vehicle_control"]
    out = render_tools(docs, revision(["type_hints", "enum_values", "required_markers"]), CATEGORY)
    desc = by_name(out, "setHeadlights")["parameters"]["properties"]["mode"]["description"]
    assert desc.startswith("[required] The mode of the headlights.")
    assert desc.endswith("Allowed values: on, off, auto. Type: string.")
    # Rendering is deterministic: the same revision gives the same bytes.
    again = render_tools(docs, revision(["required_markers", "enum_values", "type_hints"]), CATEGORY)
    assert json.dumps(out) == json.dumps(again)


def test_scopes_apply_per_category(all_docs: dict[str, list[dict]]) -> None:
    docs = all_docs["vehicle_control"]
    rev = revision(["required_markers", "no_invent_note", "recovery"], scope="multi_turn_miss_func")
    assert render_tools(docs, rev, "multi_turn_base") is docs
    assert render_tools(docs, rev, "multi_turn_miss_func") != docs
    assert system_addendum(rev, "multi_turn_base") == ""
    assert system_addendum(rev, "multi_turn_miss_func") == NO_INVENT_NOTE
    assert recovery_hint(rev, "multi_turn_base", '{"error": "Token expired"}') is None
    assert recovery_hint(rev, "multi_turn_miss_func", '{"error": "Token expired"}') is not None


def test_system_addendum_note_and_guidelines() -> None:
    rev = revision(["no_invent_note"], guidelines=["First line.", "Second line."])
    text = system_addendum(rev, CATEGORY)
    assert text == f"{NO_INVENT_NOTE}\n\n{GUIDELINES_HEADER}\n- First line.\n- Second line."
    assert describe_system(rev.spec) == f"[*]\n{text}"
    only_guidelines = revision([], guidelines=["Only."])
    assert system_addendum(only_guidelines, CATEGORY) == f"{GUIDELINES_HEADER}\n- Only."


@pytest.mark.parametrize(
    ("observation", "kind", "named"),
    [
        ('{"error": "cd: \'docs\': No such file or directory"}', "unknown_path", "docs"),
        ('{"error": "cp: path not allowed in destination. Provide only a file or directory name."}',
         "unknown_path", "path not allowed"),
        ("Error during execution: GorillaFileSystem.cd() missing 1 required positional argument: 'folder'",
         "missing_argument", "folder"),
        ("Error during execution: TravelAPI.book_flight() got an unexpected keyword argument 'seat'",
         "unexpected_argument", "seat"),
        ("Error during execution: MathAPI.add() takes 3 positional arguments but 4 were given",
         "unexpected_argument", "takes 3"),
        ('{"error": "User not authenticated. Please log in to view tickets."}', "not_authenticated", "log in"),
        ('{"error": "Token expired"}', "not_authenticated", "Token"),
        ("Error during execution: 'TicketAPI' object has no attribute 'close'", "unknown_tool", "close"),
        ("Error during execution: '<' not supported between instances of 'str' and 'int'", "type_mismatch", "str"),
        ('{"error": "Both inputs must be numbers"}', "type_mismatch", "numbers"),
        ("{'error': 'Value must be a number'}", "type_mismatch", "number"),  # a Python-repr'd dict
        ('{"error": "Booking not found"}', "tool_error", "Booking not found"),
        ("Error during execution: list index out of range", "tool_error", "index"),
        ("Parse error: the tool call is not valid JSON", "parse_error", "JSON"),
        ("Tool 'fly_to_moon' is not available; choose one of the listed tools.", "unknown_tool", "fly_to_moon"),
        # As the Hermes format wraps observations and reports its own parse errors.
        ('<tool_response>\n{"error": "Token expired"}\n</tool_response>', "not_authenticated", "Token"),
        ("<tool_response>\nError: during execution: x\n</tool_response>", "tool_error", "x"),
        ("<tool_response>\nError: A <tool_call> block is not closed with </tool_call>.\n</tool_response>",
         "parse_error", "not closed"),
        ("Error: Could not parse block 1 as JSON: Expecting value at position 0.", "parse_error", "JSON"),
        ("Error: Could not parse the function calls: invalid call syntax: '(' was never closed",
         "parse_error", "syntax"),
        ("Error: name 'fly_to_moon' is not defined", "unknown_tool", "fly_to_moon"),
        # The episode's and the tool executor's own wording (plugins/bfcl/episode.py, _worker.py).
        ("unknown tool 'fly': not in the current tool list. No call of this message was run; call only the "
         "listed tools.", "unknown_tool", "fly"),
        ("Error during execution: tool 'mv' is not available in the current tool list", "unknown_tool", "mv"),
        ("Error during execution: GorillaFileSystem.cd() got multiple values for argument 'folder'",
         "unexpected_argument", "folder"),
        ("cd takes 1 argument(s) but 2 positional argument(s) were given.", "unexpected_argument", "takes 1"),
        ("Error during execution: arguments must be JSON values: Object of type set", "type_mismatch", "JSON"),
    ],
)
def test_classify_observation(observation: str, kind: str, named: str) -> None:
    found = classify_observation(observation)
    assert found is not None and found[0] == kind
    assert named in found[1]


@pytest.mark.parametrize(
    "observation",
    [
        '{"current_working_directory": "/workspace/docs"}',
        '{"result": "Error handling guide written"}',
        "ok",
        "",
        '{"errors_found": 0}',
        '<tool_response>\n{"balance": 10.5}\n</tool_response>',
        "Please log in first, then ask again.",  # ordinary text that happens to mention logging in
    ],
)
def test_successful_observations_get_no_hint(observation: str) -> None:
    assert classify_observation(observation) is None
    assert recovery_hint(revision(["recovery"]), CATEGORY, observation) is None


def test_observations_with_long_whitespace_runs_are_classified_in_linear_time() -> None:
    """Tool results are untrusted: a 200,000-space run inside an error, a wrapper or an unclosed object took
    the old regular expressions (whitespace on both sides of a lazy group) minutes; now they are classified
    as short ones are."""
    spaces = " " * 200_000
    found = classify_observation('{"error": "cd: \'' + spaces + 'x\'"}')
    assert found is not None and found[0] == "tool_error" and found[1].endswith("x'")
    found = classify_observation(
        "<tool_response>" + spaces + '{"error": "Token expired"}' + spaces + "</tool_response>"
    )
    assert found == ("not_authenticated", "Token expired")
    found = classify_observation("{'error': 'Value must be a number" + spaces + "'}")
    assert found is not None and found[0] == "type_mismatch"
    assert classify_observation("<tool_response>" + spaces + "x") is None
    assert classify_observation('{"error": 1' + spaces) is None


def test_recovery_hints_name_the_problem() -> None:
    rev = revision(["recovery"])
    missing = recovery_hint(
        rev, CATEGORY, "Error during execution: cd() missing 1 required positional argument: 'folder'"
    )
    assert missing is not None and "missing a required argument" in missing and "'folder'" in missing
    unexpected = recovery_hint(rev, CATEGORY, "Error during execution: f() got an unexpected keyword argument 'x'")
    assert unexpected is not None and "does not accept" in unexpected and "x" in unexpected
    path = recovery_hint(rev, CATEGORY, '{"error": "cat: \'a.txt\': No such file or directory"}')
    assert path is not None and "directory" in path
    auth = recovery_hint(rev, CATEGORY, '{"error": "No user is currently logged in."}')
    assert auth is not None and "not logged in" in auth
    tool = recovery_hint(rev, CATEGORY, "Error during execution: 'X' object has no attribute 'y'")
    assert tool is not None and "not in the current tool list" in tool
    kind = recovery_hint(rev, CATEGORY, '{"error": "All elements in the list must be numbers"}')
    assert kind is not None and "wrong type" in kind
    parse = recovery_hint(rev, CATEGORY, "Parse error: malformed <tool_call> block")
    assert parse is not None and "could not be parsed" in parse
    hints = {missing, unexpected, path, auth, tool, kind, parse}
    assert len(hints) == 7, "each problem gets its own hint"
