"""The run store's generic cache table and label confidences (migration 0003)."""

from __future__ import annotations

import pytest
from alembic import command
from pydantic import ValidationError

from seal_platform.capability import CapabilityState
from seal_platform.store import RunStore, alembic_config
from seal_platform.types import TurnLabel


def _url(tmp_path):
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


def test_cache_round_trip_namespaces_and_replacement(tmp_path):
    store = RunStore(_url(tmp_path))
    assert store.cache_get("judge", ["k1"]) == {}
    store.cache_put("judge", "k1", {"label": "state_mismatch", "confidence": 0.5}, run_id="r1")
    store.cache_put("other", "k1", [1, 2])
    store.cache_put("judge", "k1", {"label": "argument_mismatch"})  # replaces
    assert store.cache_get("judge", ["k1", "k2"]) == {"k1": {"label": "argument_mismatch"}}
    assert store.cache_get("other", ["k1"]) == {"k1": [1, 2]}
    store.close()
    # Persistent: a new store on the same file (a resumed run's) sees it; many keys at once work.
    reopened = RunStore(_url(tmp_path))
    for i in range(1200):
        reopened.cache_put("bulk", f"key-{i}", i)
    got = reopened.cache_get("bulk", [f"key-{i}" for i in range(1300)])
    assert len(got) == 1200 and got["key-1199"] == 1199
    assert reopened.cache_get("judge", ["k1"])["k1"]["label"] == "argument_mismatch"


def test_label_confidence_is_stored_and_validated(tmp_path):
    store = RunStore(_url(tmp_path))
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    labels = [
        TurnLabel(trajectory_id="t", turn=0, label="state_mismatch", source="bfcl"),
        TurnLabel(trajectory_id="t", turn=0, label="argument_mismatch", source="llm_judge", confidence=0.75),
    ]
    store.record_step("r", step=0, epoch=0, trajectories=[], labels=labels, label_weights={}, state=CapabilityState(),
                      interface_revision=0, metrics={}, timings={})
    assert [(row.source, row.confidence) for row in store.labels("r")] == [("bfcl", None), ("llm_judge", 0.75)]
    with pytest.raises(ValidationError):
        TurnLabel(trajectory_id="t", turn=0, label="x", source="s", confidence=1.5)


def test_0002_store_with_labels_upgrades_and_downgrades(tmp_path):
    store = RunStore(_url(tmp_path), migrate=False)
    store.migrate("0002")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (id, name, recipe, config, config_hash, seed, status, started_at, host, run_dir) "
            "VALUES ('r1', 'old', '', '{}', 'h', 1, 'completed', '2026-01-01 00:00:00', 'h', '')")
        conn.exec_driver_sql(
            "INSERT INTO turn_labels (run_id, step, trajectory_id, turn, label, source, rationale) "
            "VALUES ('r1', 0, 't1', 0, 'pass', 'bfcl', '')")
    reopened = RunStore(_url(tmp_path))
    [row] = reopened.labels("r1")
    assert (row.label, row.confidence) == ("pass", None)
    reopened.cache_put("ns", "k", {"v": 1})
    with reopened.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0002")
    with reopened.engine.connect() as conn:
        tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(turn_labels)")]
    assert "cache_entries" not in tables and "confidence" not in columns
