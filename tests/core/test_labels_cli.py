"""`seal-platform labels [ENV]`: the label taxonomy of the registered diagnosers with the reference mapping."""

from __future__ import annotations

from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.labels import label_rows
from seal_platform.plugins import make_plugin_manager


def test_labels_of_the_bfcl_environment_with_their_reference_labels(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    rows = {(r.diagnoser, r.label): r for r in label_rows(make_plugin_manager(allow=["bfcl", "diagnosis_llm"]), "bfcl")}
    assert rows[("bfcl", "recovery_failure")].reference == ("state_mismatch", "response_mismatch")
    assert rows[("bfcl", "pass")].reference == () and "passed" in rows[("bfcl", "pass")].meaning
    assert rows[("llm_judge", "invalid_tool_call")].reference == ("empty_turn_model_response",)
    # A diagnoser that labels only another environment is left out.
    assert not any(d == "arithmetic" for d, _ in rows)


def test_the_command_prints_the_table_and_names_unknown_environments(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    runner = CliRunner()
    result = runner.invoke(cli, ["labels", "bfcl"], terminal_width=240)
    assert result.exit_code == 0, result.output
    assert "missing_tool_call" in result.output and "unreached_turn" in result.output
    bad = runner.invoke(cli, ["labels", "no-such-env"])
    assert bad.exit_code == 2 and "no loaded plugin registers environment 'no-such-env'" in bad.output
