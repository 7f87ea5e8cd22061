"""`seal-platform verify` checks what a plugin's verifier returns, contains its failures, says what an environment
lacks to verify, and gives the plugin a run folder of its own (audit findings 5, 8 and 16)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from seal_platform import hookimpl
from seal_platform.errors import SealError
from seal_platform.plugins import make_plugin_manager
from seal_platform.registry import EnvironmentSpec
from seal_platform.types import Interface
from seal_platform.verify import VerifyCounts, score_line, verify_lines

RESULTS: dict[str, Any] = {
    "list": ["not", "a", "dict"],
    "none": None,
    "nan": {"task_id": "t", "score": math.nan},
    "inf": {"task_id": "t", "score": [1.0, -math.inf]},
    "set": {"task_id": "t", "x": {1, 2}},
    "object": {"task_id": "t", "x": object()},
    "ok": {"task_id": "t", "success": True},
}
WRONG = {
    "list": "returned ['not', 'a', 'dict'] (type list) from verify_record, not a dict (a JSON object)",
    "none": "returned None (type NoneType) from verify_record, not a dict",
    "nan": "returned a result from verify_record that is not valid JSON (a NaN or an infinity, which JSON cannot hold)",
    "inf": "returned a result from verify_record that is not valid JSON (a NaN or an infinity, which JSON cannot hold)",
    "set": "returned a result from verify_record that is not valid JSON (TypeError: Object of type set is not JSON "
           "serializable)",
    "object": "returned a result from verify_record that is not valid JSON (TypeError: Object of type object",
    "exit": "failed on this record: SystemExit: 3",
}


class Verifier:
    name = "judged"

    def tasks(self, split: str) -> list:
        return []

    def pristine_interface(self) -> Interface:
        return Interface()

    def verify_record(self, record: dict[str, Any]) -> Any:
        if record["kind"] == "exit":
            raise SystemExit(3)
        return RESULTS[record["kind"]]


class BatchVerifier(Verifier):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def verify_records(self, records: list[dict[str, Any]]) -> Any:
        if self.answer == "exit":
            raise SystemExit("the batch verifier gave up")
        return [self.answer(record) for record in records]


class Plugin:
    def __init__(self, env: Any) -> None:
        self.env = env
        self.run_dirs: list[Path] = []

    @hookimpl
    def register_environments(self):
        return [EnvironmentSpec("judged", lambda ctx: self.env)]

    @hookimpl
    def start_run(self, ctx):
        self.run_dirs.append(ctx.run_dir)
        (Path(ctx.run_dir) / "tracker.log").write_text("a tracker's file\n")


def _strict(line: str) -> dict[str, Any]:
    """The JSON object of an output line, read as strict JSON (no NaN, no Infinity)."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant} in {line}")

    record = json.loads(line, parse_constant=refuse)
    assert isinstance(record, dict), line
    return record


def _verify(env: Any, kinds: list[str], counts: VerifyCounts | None = None) -> list[dict[str, Any]]:
    host = make_plugin_manager(entry_points=[], extra=[("judged-plugin", Plugin(env))])
    lines = [json.dumps({"kind": kind}) for kind in kinds]
    return [_strict(line) for line in verify_lines("judged", lines, [], host=host, counts=counts)]


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_a_result_that_is_not_a_json_object_is_an_error_naming_the_plugin(kind):
    counts = VerifyCounts()
    out = _verify(Verifier(), ["ok", kind, "ok"], counts)
    assert out[0] == out[2] == {"task_id": "t", "success": True}  # the others are scored
    assert list(out[1]) == ["error"], out[1]
    assert out[1]["error"].startswith("line 2: plugin 'judged-plugin' ") and WRONG[kind] in out[1]["error"], out[1]
    assert counts == VerifyCounts(lines=3, errors=1)


def test_score_line_checks_the_result_too():
    assert score_line(Verifier(), 4, '{"kind": "nan"}', "judged-plugin")["error"].startswith(
        "line 4: plugin 'judged-plugin' returned a result from verify_record that is not valid JSON")
    assert score_line(Verifier(), 1, '{"kind": "list"}')["error"].startswith("line 1: the environment returned")


@pytest.mark.parametrize(("answer", "said"), [
    (lambda record: 7, "returned 7 (type int) from verify_records, not a dict"),
    (lambda record: "error", "returned 'error' (type str) from verify_records, not a dict"),
    (lambda record: ["error"], "returned ['error'] (type list) from verify_records, not a dict"),
    (lambda record: {"score": math.nan}, "returned a result from verify_records that is not valid JSON (a NaN"),
])
def test_a_batch_verifiers_wrong_results_are_errors_in_their_place(answer, said):
    counts = VerifyCounts()
    out = _verify(BatchVerifier(answer), ["ok", "ok"], counts)
    assert len(out) == 2 and counts == VerifyCounts(lines=2, errors=2)
    for number, record in enumerate(out, start=1):
        assert list(record) == ["error"] and record["error"].startswith(f"line {number}: plugin 'judged-plugin' ")
        assert said in record["error"], record


def test_a_batch_verifier_that_exits_has_its_records_scored_one_by_one():
    counts = VerifyCounts()
    out = _verify(BatchVerifier("exit"), ["ok", "exit", "nan"], counts)
    assert out[0] == {"task_id": "t", "success": True}
    assert out[1] == {"error": "line 2: plugin 'judged-plugin' failed on this record: SystemExit: 3"}
    assert "(a NaN or an infinity" in out[2]["error"]
    assert counts == VerifyCounts(lines=3, errors=2)
    # A batch verifier's own error records get their line numbers, and count as errors.
    counts = VerifyCounts()
    out = _verify(BatchVerifier(lambda record: {"error": "unknown task"}), ["ok"], counts)
    assert out == [{"error": "line 1: unknown task"}] and counts.errors == 1


def test_a_keyboard_interrupt_in_the_verifier_still_stops_verify():
    class Interrupted(Verifier):
        def verify_record(self, record):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _verify(Interrupted(), ["ok"])


def test_an_environment_without_name_is_told_what_it_lacks():
    class Nameless:  # as the README described an environment: tasks, pristine_interface and verify_record
        def tasks(self, split):
            return []

        def pristine_interface(self):
            return Interface()

        def verify_record(self, record):
            return {"ok": True}

    class Unverifying(Verifier):
        verify_record = None  # type: ignore[assignment]

    with pytest.raises(SealError) as info:
        _verify(Nameless(), ["ok"])
    assert "benchmark 'judged' (plugin 'judged-plugin') cannot verify transcripts offline: its environment object " \
        f"({__name__}.{Nameless.__qualname__}) has verify_record but no `name` attribute" in str(info.value)
    with pytest.raises(SealError) as info:
        _verify(Unverifying(), ["ok"])
    assert str(info.value).endswith(f"({__name__}.{Unverifying.__qualname__}) has no verify_record method.")


def test_the_plugins_run_dir_is_a_temporary_folder_not_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plugin = Plugin(Verifier())
    host = make_plugin_manager(entry_points=[], extra=[("judged-plugin", plugin)])
    out = list(verify_lines("judged", ['{"kind": "ok"}'], [], host=host))
    assert out == ['{"task_id": "t", "success": true}']
    assert list(tmp_path.iterdir()) == []  # nothing written into the user's directory
    [run_dir] = plugin.run_dirs
    assert run_dir.resolve() != tmp_path.resolve() and not run_dir.exists()  # and nothing left behind


def test_the_verify_command_exits_1_when_a_line_could_not_be_scored(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seal_platform import cli as cli_module
    from seal_platform import verify as verify_module

    plugin = Plugin(Verifier())
    monkeypatch.setattr(
        verify_module,
        "benchmark_host",
        lambda benchmark, overrides: make_plugin_manager(entry_points=[], extra=[("judged-plugin", plugin)]),
    )
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "in.jsonl"
    data.write_text('{"kind": "ok"}\n{"kind": "exit"}\n{"kind": "nan"}\n')
    result = CliRunner().invoke(cli_module.cli, ["verify", "--benchmark", "judged", str(data)])
    # Every line is written, each a JSON object; the status and stderr say that two could not be scored.
    assert result.exit_code == 1, result.output
    assert [list(_strict(line)) for line in result.stdout.splitlines()] == [
        ["task_id", "success"],
        ["error"],
        ["error"],
    ]
    assert result.stderr.strip() == 'verify: 2 of 3 line(s) could not be scored (each has {"error": ...} in its place)'
    data.write_text('{"kind": "ok"}\n')
    result = CliRunner().invoke(cli_module.cli, ["verify", "--benchmark", "judged", str(data)])
    assert result.exit_code == 0 and result.stderr == "", result.output
