"""seal_platform_libs.toolenv under untrusted input: model text read by ``jsoncalls.parse_calls`` and tool schemas
from MCP / OpenEnv servers read by ``schemadocs``. Neither may raise: a bad call is a parse error, a bad schema
a refused call with a reason the agent sees (the mcp and openenv episodes show it as "invalid arguments")."""

from __future__ import annotations

import socket
import threading

import pytest

from seal_platform_libs.toolenv.jsoncalls import parse_calls
from seal_platform_libs.toolenv.schemadocs import enum_of, recovery_hint, render_docs, type_of, unknown_arguments


def test_an_integer_over_the_digit_limit_is_a_parse_error():
    """json.loads raises a plain ValueError (not JSONDecodeError) for an int of more than 4300 digits."""
    calls, error = parse_calls('<tool_call>{"name": "get_item", "arguments": {"name": ' + "9" * 4400 + "}}</tool_call>")
    assert calls == [] and error is not None and "Could not parse the tool call as JSON" in error


def _doc(prop) -> dict:
    return {"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {"a": prop}}}


@pytest.mark.parametrize("prop", [
    {"$ref": "#/nope"},  # PointerToNowhere while validating
    {"type": "string", "pattern": "("},  # re.error
    {"type": "nosuch"},  # UnknownType
    {"anyOf": 5},  # TypeError
    {"items": 5},
    {"oneOf": [{"enum": [1]}, 5]},  # AttributeError
    {"$ref": "#/properties/a"},  # refers to itself: RecursionError
    {"$ref": "#/type"},  # resolves to a string, which is no schema
])
def test_a_call_to_a_tool_with_an_invalid_schema_is_refused_with_a_reason(prop):
    pytest.importorskip("jsonschema")
    from seal_platform_libs.toolenv.schemadocs import validate_arguments

    problem = validate_arguments(_doc(prop), {"a": "x"})
    assert problem is not None and problem.startswith("the tool's input schema ")


@pytest.mark.parametrize("schema", ["not a schema", [1, 2], {"$schema": {"x": 1}}, {"properties": {"a": float("nan")}}])
def test_schemas_of_any_json_shape_are_refused_not_raised(schema):
    pytest.importorskip("jsonschema")
    from seal_platform_libs.toolenv.schemadocs import validate_arguments

    assert "invalid" in validate_arguments({"name": "t", "input_schema": schema}, {"a": 1})


def test_a_remote_ref_is_never_fetched():
    """A "$ref" to a URL would make jsonschema open it with no timeout (a request to any host the server
    names, and a hang): it is refused without a connection."""
    pytest.importorskip("jsonschema")
    from seal_platform_libs.toolenv.schemadocs import validate_arguments

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(30)
    connected: list[bytes] = []  # the first bytes of every connection but the test's own "done"

    def accept() -> None:
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    first = conn.recv(4)
                except OSError:
                    first = b"?"
            if first == b"done":  # the test's own connection, made after validation: nothing came before it
                return
            connected.append(first)

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    try:
        url = f"http://127.0.0.1:{server.getsockname()[1]}/x.json"
        problem = validate_arguments(_doc({"$ref": url}), {"a": 1})
        assert problem is not None and problem.startswith("the tool's input schema ") and url in problem
        # Connections are accepted in order: a fetch during validation would be recorded before this one.
        with socket.create_connection(server.getsockname(), timeout=5) as done:
            done.sendall(b"done")
        listener.join(10)
        assert not listener.is_alive()
    finally:
        server.close()
        listener.join(10)
    assert not connected


def test_valid_schemas_still_validate():
    pytest.importorskip("jsonschema")
    from seal_platform_libs.toolenv.schemadocs import validate_arguments

    doc = _doc({"type": "string", "enum": ["x", "y"]})
    assert validate_arguments(doc, {"a": "x"}) is None
    assert "is not one of" in validate_arguments(doc, {"a": "z"})
    local_ref = {"name": "t", "input_schema": {"type": "object", "$defs": {"s": {"type": "string"}},
                                               "properties": {"a": {"$ref": "#/$defs/s"}}}}
    assert validate_arguments(local_ref, {"a": "x"}) is None and "is not of type" in validate_arguments(
        local_ref, {"a": 1}
    )


def test_docs_of_any_json_shape_render():
    """Rendering and hints skip what has the wrong shape instead of raising."""
    docs = [
        _doc({"anyOf": 5}), _doc({"oneOf": [{"enum": [1]}, 5, {"anyOf": "x"}]}), _doc(5),
        {"name": "u", "description": None, "input_schema": {"properties": [1], "required": [{}, "a"]}},
        {"name": "v", "input_schema": "not a schema"},
    ]
    text = render_docs(docs, ["allowed_values", "required_markers"])
    assert "- t(a): d" in text and "Allowed values: 1." in text and "- u(): " in text
    deep: dict = {"enum": ["deep"]}
    for _ in range(5000):
        deep = {"anyOf": [deep]}
    assert enum_of(deep) is None and type_of({"anyOf": [5, {"type": 3}, {"type": "string"}]}) == "string"
    assert recovery_hint(docs[3], "a", ["u"]).startswith("Hint: u requires a")
    assert unknown_arguments(docs[4], {"a": 1}) == ["a"]
