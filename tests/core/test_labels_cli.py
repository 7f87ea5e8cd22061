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


def _listed(rows, width: int) -> str:
    import io

    from rich.console import Console

    from seal_platform.present.listings import labels_listing

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    console.print(labels_listing(console, rows, "labels"), soft_wrap=False)
    return out.getvalue()


def test_a_label_that_maps_to_nothing_is_not_called_a_reference_label():
    """Only the SEAL reference labels (docs/labels.md), and labels other labels map to, are reference labels;
    a third-party diagnoser's unmapped `ok` maps to none (it has no reference base weight)."""
    from types import SimpleNamespace

    rows = [SimpleNamespace(diagnoser="coarse", plugin="p", label="ok", reference=(), meaning="fine"),
            SimpleNamespace(diagnoser="repetition", plugin="p", label="repetition", reference=(), meaning="loops"),
            SimpleNamespace(diagnoser="bfcl", plugin="bfcl", label="pass", reference=(), meaning="passed"),
            SimpleNamespace(diagnoser="own", plugin="p", label="slow", reference=("late",), meaning="too slow"),
            SimpleNamespace(diagnoser="own", plugin="p", label="late", reference=(), meaning="late")]
    blocks = " ".join(_listed(rows, 30).split())  # one block per label
    assert "coarse: ok fine (maps to no reference label)" in blocks, blocks
    assert "repetition: repetition loops (maps to no reference label)" in blocks, blocks
    assert "bfcl: pass passed (a reference label)" in blocks and "own: late late (a reference label)" in blocks
    assert "own: slow too slow maps to: late" in blocks
    narrow = _listed(rows, 45)  # the reference under the meaning
    assert narrow.count("(maps to no") == 2 and narrow.count("(a reference") == 2, narrow
    wide = _listed(rows, 200)
    lines = {
        line.split("│")[2].strip(): line.split("│")[3].strip() for line in wide.splitlines() if line.count("│") == 5
    }
    assert lines == {"ok": "(none)", "repetition": "(none)", "pass": "(itself)", "slow": "late", "late": "(itself)"}, (
        wide
    )


def test_the_reference_labels_are_those_docs_labels_md_lists():
    import re
    from pathlib import Path

    from seal_platform.labels import REFERENCE_LABELS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "labels.md").read_text()
    table = doc.split("## Reference labels", 1)[1].split("## ", 1)[0]
    # The table lists them in the order the reference's rules fire: the order of the one definition.
    assert re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M) == list(REFERENCE_LABELS)


def test_the_shipped_diagnosers_unmapped_finer_labels_map_to_no_reference_label(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    rows = [r for r in label_rows(make_plugin_manager()) if r.diagnoser == "smarthome"]
    if not rows:
        import pytest

        pytest.skip("the smarthome plugin is not installed")
    blocks = " ".join(_listed(rows, 30).split())
    assert "smarthome: pass (a reference label)" in blocks, blocks
    assert "smarthome: argument_mismatch (maps to no reference label)" in blocks, blocks
