"""BFCL V4 Memory data, read from the installed ``bfcl-eval`` package (located without importing it):

* ``BFCL_v4_memory.json``: 155 questions, each with a ``scenario`` (customer, finance, healthcare,
  notetaker, student) and one user turn; ``possible_answer/BFCL_v4_memory.json`` holds the accepted answers;
* ``memory_prereq_conversation/memory_<scenario>.json``: the prerequisite conversations that fill the memory
  before the questions are asked (played in file order, the memory carried from one to the next);
* ``multi_turn_func_doc/memory_<backend>.json``: the memory tools of each backend.

BFCL runs every question under each memory backend (categories ``memory_kv``, ``memory_rec_sum``,
``memory_vector``); so do we, for the backends in the settings.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from seal_platform.types import Task
from seal_platform_libs.toolenv.bfcl_data import DataError, data_dir

BACKENDS = ("kv", "rec_sum", "vector")
SPLITS = ("all", "train", "eval")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except FileNotFoundError:
        raise DataError(f"BFCL memory data file missing: {path}; reinstall bfcl-eval==2026.3.23") from None


@lru_cache(maxsize=1)
def questions() -> tuple[dict[str, Any], ...]:
    """Every memory question with its ``ground_truth`` (list of accepted answers) attached."""
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(data_dir() / "possible_answer" / "BFCL_v4_memory.json")}
    out = []
    for entry in _jsonl(data_dir() / "BFCL_v4_memory.json"):
        if entry["id"] not in answers:
            raise DataError(f"no ground truth for {entry['id']} in possible_answer/BFCL_v4_memory.json")
        out.append({**entry, "ground_truth": answers[entry["id"]]})
    return tuple(out)


@cache
def prereq_conversations(scenario: str) -> tuple[dict[str, Any], ...]:
    """The prerequisite conversations of a scenario, in the order BFCL plays them."""
    return tuple(_jsonl(data_dir() / "memory_prereq_conversation" / f"memory_{scenario}.json"))


@cache
def tool_docs(backend: str) -> tuple[dict[str, Any], ...]:
    if backend not in BACKENDS:
        raise DataError(f"unknown memory backend {backend!r}; available: {', '.join(BACKENDS)}")
    return tuple(_jsonl(data_dir() / "multi_turn_func_doc" / f"memory_{backend}.json"))


def in_train_half(question_id: str) -> bool:
    """A fixed half of the questions (by hash of the id) for training; the rest is ``eval``."""
    return hashlib.sha256(question_id.encode()).digest()[0] % 2 == 0


def make_tasks(split: str, backends: list[str], scenarios: list[str] | None, limit: int | None) -> list[Task]:
    """Tasks of ``split`` (``all``: the 155 questions BFCL scores; ``train`` / ``eval``: two fixed halves),
    one per question and backend; category ``memory_<backend>`` as in BFCL."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} for bfcl_memory; choose from {', '.join(SPLITS)}")
    chosen = [q for q in questions() if scenarios is None or q["scenario"] in scenarios]
    if split != "all":
        chosen = [q for q in chosen if in_train_half(q["id"]) == (split == "train")]
    if limit is not None:
        chosen = chosen[:limit]
    return [Task(id=f"{backend}:{q['id']}", category=f"memory_{backend}", split=split,
                 payload={"backend": backend, "question_id": q["id"], "scenario": q["scenario"],
                          "question": q["question"], "ground_truth": q["ground_truth"]})
            for backend in backends for q in chosen]
