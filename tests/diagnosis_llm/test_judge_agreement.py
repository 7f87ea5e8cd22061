"""``seal-platform diagnose-agreement``: the confusion matrix of judge vs heuristic labels of a stored run."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from seal_platform.capability import CapabilityState
from seal_platform.cli import build_cli
from seal_platform.types import TurnLabel
from seal_platform_plugins.diagnosis_llm.agreement import confusion


def lab(
    traj: str, turn: int, label: str, source: str, confidence: float | None = None, reference: str | None = None
) -> TurnLabel:
    return TurnLabel(trajectory_id=traj, turn=turn, label=label, source=source, confidence=confidence,
                     reference_label=reference or label)


LABELS = [
    # heuristic                                  judge
    lab("a", 0, "state_mismatch", "bfcl"), lab("a", 0, "state_mismatch", "llm_judge", 0.9),
    lab("a", 1, "state_mismatch", "bfcl"), lab("a", 1, "argument_mismatch", "llm_judge", 0.6, "state_mismatch"),
    lab("b", 0, "state_mismatch", "bfcl"), lab("b", 0, "argument_mismatch", "llm_judge", 0.8, "state_mismatch"),
    lab("b", 1, "response_mismatch", "bfcl"), lab("b", 1, "spurious_tool_call", "llm_judge", 0.3),
    lab("b", 2, "response_mismatch", "bfcl"), lab("b", 2, "response_mismatch", "llm_judge", None),  # a fallback
    lab("c", 0, "pass", "bfcl"),                                                                   # not judged
    lab("d", 0, "recovery_failure", "llm_judge", 0.5),                                             # judge only
]


def test_confusion_matrix_with_mean_confidence_per_cell():
    result = confusion("r", LABELS, "llm_judge", "bfcl")
    cells = {(c.heuristic, c.judge): (c.count, c.mean_confidence) for c in result.cells}
    assert cells == {
        ("state_mismatch", "state_mismatch"): (1, 0.9),
        ("state_mismatch", "argument_mismatch"): (2, 0.7),
        ("response_mismatch", "spurious_tool_call"): (1, 0.3),
    }
    assert (result.pairs, result.agree, result.agree_reference, result.fallbacks, result.judge_only) == (4, 1, 3, 1, 1)
    assert result.agreement == 0.25
    assert result.heuristic_labels == ["response_mismatch", "state_mismatch"]
    assert result.judge_labels == ["argument_mismatch", "spurious_tool_call", "state_mismatch"]


def _store_with_run(tmp_path):
    from seal_platform.store import RunStore

    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = RunStore(url)
    store.create_run("20260101-000000-abcdef", name="n", recipe="", config={"environment": "bfcl"}, config_hash="h",
                     seed=0, run_dir=str(tmp_path), plugins=[])
    store.record_step("20260101-000000-abcdef", step=0, epoch=0, trajectories=[], labels=LABELS, label_weights={},
                      state=CapabilityState(), interface_revision=0, metrics={}, timings={})
    store.close()
    return url


def test_command_table_and_json(tmp_path):
    url = _store_with_run(tmp_path)
    runner = CliRunner()
    cli = build_cli()  # plugin commands arrive through register_commands
    result = runner.invoke(cli, ["diagnose-agreement", "20260101", "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["run_id"] == "20260101-000000-abcdef" and (data["judge"], data["heuristic"]) == ("llm_judge", "bfcl")
    assert data["pairs"] == 4 and data["agreement"] == 0.25 and data["fallbacks"] == 1
    assert {"heuristic": "state_mismatch", "judge": "argument_mismatch", "count": 2, "mean_confidence": 0.7} in data[
        "cells"
    ]
    table = runner.invoke(cli, ["diagnose-agreement", "20260101", "--store", url])
    assert table.exit_code == 0, table.output
    assert "2 (0.70)" in table.output and "4 pair(s): same label 1 (25.0%)" in table.output
    # Other sources can be compared; an unknown run is a one-line error, not a traceback.
    none = runner.invoke(cli, ["diagnose-agreement", "20260101", "--store", url, "--heuristic", "other"])
    assert none.exit_code == 0 and "no turn labelled by both" in none.output
    missing = runner.invoke(cli, ["diagnose-agreement", "nope", "--store", url])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output and "Traceback" not in missing.output
    # --store takes a plain file path as every core command does, not only a URL.
    by_path = runner.invoke(
        cli, ["diagnose-agreement", "20260101", "--store", url.removeprefix("sqlite:///"), "--json"]
    )
    assert by_path.exit_code == 0 and by_path.output == result.output, by_path.output


def test_installed_console_script_has_the_command(tmp_path):
    url = _store_with_run(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "seal_platform", "diagnose-agreement", "20260101", "--store", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["pairs"] == 4
