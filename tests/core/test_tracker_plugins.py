"""The W&B and MLflow tracker plugins, end to end and offline: a toy run through ``seal-platform run`` with the
tracker switched on by the recipe; what reaches W&B's offline run files and an MLflow SQLite store is read back
(metrics, evaluations, label rates, A-Patch weights, interface revisions, the report, the status) and no secret
given on the command line or in the environment is in any file either tracker wrote."""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli

SECRET = "s3cr3t-token-do-not-log-42"


def _run(toy_recipe: Path, *overrides: str) -> tuple[str, Path]:
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=3", "--quiet", *overrides],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    found = re.search(r"^run (\S+) \(.*?\) in (.+)$", result.output, re.M)
    assert found, result.output
    assert "warning" not in result.output, result.output  # no tracker failed
    return found.group(1), Path(found.group(2).strip())


def _files_containing(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


# --- Weights & Biases (offline mode) --------------------------------------------------------------------------


def _wandb_records(path: Path):
    """The protobuf records of a W&B run file (a LevelDB-style log: 32 KiB blocks of chunks, each with a 7-byte
    header: crc32, length, type 1 full / 2 first / 3 middle / 4 last), after its 7-byte file header."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_gets_the_runs_metrics_revisions_and_report_and_no_secret(toy_site, toy_recipe, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("SEAL_TEST_TOKEN", SECRET)  # W&B records neither the environment nor the command line
    monkeypatch.setattr(sys, "argv", ["seal-platform", "run", f"--header=Authorization: Bearer {SECRET}"])
    run_id, run_dir = _run(toy_recipe, "plugins.allow=[toy,wandb]", "settings.wandb.enabled=true",
                           "settings.wandb.mode=offline")
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 2  # the run, then the report (written after the run's end) in the same W&B run
    rows, config, artifacts = [], None, []
    for folder in folders:
        for record in _wandb_records(next(folder.glob("run-*.wandb"))):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append({item.nested_key[0] if item.nested_key else item.key: json.loads(item.value_json)
                             for item in record.history.item})
            elif kind in ("run", "config"):
                updates = record.run.config.update if kind == "run" else record.config.update
                config = {**(config or {}), **{item.key or ".".join(item.nested_key): json.loads(item.value_json)
                                               for item in updates}}
            elif kind == "artifact":
                artifacts.append(record.artifact)
    steps = [r["seal/step"] for r in rows]
    assert steps == sorted(steps) and max(steps) == 3
    keys = set().union(*rows)
    assert {"reward/mean", "loss", "eval/average", "interface/revision"} <= keys
    assert any(k.startswith("label_rate/toy/") for k in keys) and any(k.startswith("apatch/") for k in keys)
    rates = [v for r in rows for k, v in r.items() if k.startswith("label_rate/")]
    assert rates and all(0 < v <= 1 for v in rates)
    assert config is not None and config["seed"] == 7
    assert [a.type for a in artifacts] == ["report"] and artifacts[0].name == f"report-{run_id}"
    revisions = sorted(p.name for p in folders[0].glob("files/interfaces/*.md"))
    assert revisions[0] == "revision-000.md" and len(revisions) >= 2
    assert not _files_containing(run_dir / "wandb", SECRET)


# --- MLflow (a SQLite store, artifacts in a folder) -----------------------------------------------------------


def test_mlflow_file_store_gets_the_runs_metrics_revisions_report_and_status(toy_site, toy_recipe, tmp_path,
                                                                               monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("SEAL_TEST_TOKEN", SECRET)
    monkeypatch.setattr(sys, "argv", ["seal-platform", "run", f"--header=Authorization: Bearer {SECRET}"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id, _ = _run(toy_recipe, "plugins.allow=[toy,mlflow]", "settings.mlflow.enabled=true",
                     f"settings.mlflow.tracking_uri={uri}", "settings.mlflow.experiment=toys",
                     f"settings.mlflow.artifact_location={tmp_path / 'artifacts'}")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("toys")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["seal_platform.run_id"] == run_id and run.info.status == "FINISHED"
    assert run.data.params["seed"] == "7" and run.data.params["training.steps"] == "3"
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [m.step for m in history] == [0, 1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/average")] == [0, 2, 3]
    metrics = set(run.data.metrics)
    assert any(k.startswith("label_rate/toy/") for k in metrics) and any(k.startswith("apatch/") for k in metrics)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "interfaces", "report"} <= artifacts
    reports = client.list_artifacts(run.info.run_id, "report")
    assert [a.path for a in reports] == ["report/report.html"]
    assert not _files_containing(tmp_path / "artifacts", SECRET) and not _files_containing(tmp_path, SECRET)


def test_mlflow_marks_an_interrupted_or_failed_run(toy_site, toy_recipe, tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "training.steps=3", "--quiet",
                                      "plugins.allow=[toy,mlflow]", "settings.mlflow.enabled=true",
                                      f"settings.mlflow.tracking_uri={uri}", "settings.toy.fail_in=optimize",
                                      f"settings.mlflow.artifact_location={tmp_path / 'artifacts'}"])
    assert result.exit_code != 0
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("seal-platform").experiment_id])
    assert run.info.status == "FAILED"


def test_trackers_log_the_config_with_its_secrets_redacted(tmp_path):
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.tracking import shareable_config

    config = RunConfig(environment="mcp", store=f"postgresql+psycopg://seal:{SECRET}@db.example/runs",
                       settings={"mcp": {"servers": [{"name": "s", "headers": {"Authorization": f"Bearer {SECRET}"},
                                                      "env": {"API_KEY": SECRET}}]}})
    shared = shareable_config(RunContext(config=config, run_id="r", run_dir=tmp_path))
    assert SECRET not in json.dumps(shared)
    assert shared["settings"]["mcp"]["servers"][0]["name"] == "s"  # what is not secret stays
