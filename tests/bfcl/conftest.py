"""Shared fixtures for the bfcl plugin tests (the agreement test's official-checker harness and case
generator are in ``official_cases.py``)."""

from __future__ import annotations

import pytest

# --- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def all_tasks():
    """All 800 tasks of the four categories (split "all")."""
    from seal_platform_plugins.bfcl.data import load_tasks

    return load_tasks(split="all")


@pytest.fixture(scope="session")
def task_by_id(all_tasks):
    return {task.id: task for task in all_tasks}


@pytest.fixture
def executor():
    """A small executor with short limits, stopped after the test."""
    from seal_platform_plugins.bfcl.executor import ToolExecutor

    with ToolExecutor(max_workers=2, call_timeout_s=3.0, episode_timeout_s=20.0, max_result_chars=2000) as ex:
        yield ex
