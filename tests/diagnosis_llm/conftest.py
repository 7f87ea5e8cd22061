"""Fixtures for the LLM-judge tests (helpers live in judge_helpers.py)."""

from __future__ import annotations

import pytest

from seal_platform.store import RunStore


@pytest.fixture
def store(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run(
        "run-1", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[]
    )
    yield store
    store.close()
