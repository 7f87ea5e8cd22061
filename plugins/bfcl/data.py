"""BFCL v3 multi-turn task data: the four categories, their ground truth, tool docs and the train/eval split.

Everything is read from the data files shipped in the ``bfcl-eval`` package (2026.3.23), located without
importing it (``bfcl_eval/data/BFCL_v4_multi_turn_<category>.json``, ``possible_answer/`` and
``multi_turn_func_doc/``); the split is this plugin's package data ``bfcl_multi_turn_split.json`` (the one
the SEAL reference training configs use).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from seal_platform.types import Task
from seal_platform_libs.toolenv.bfcl_data import DataError, data_dir

from .backend import copy_data  # a private deep copy of plain data
from .categories import CATEGORIES

SPLITS: tuple[str, ...] = ("train", "eval", "eval_val", "eval_test", "all")
SPLIT_FILE = Path(__file__).with_name("bfcl_multi_turn_split.json")

# Backend class -> its tool-doc file, as in bfcl_eval.constants.executable_backend_config (copied so that
# reading docs needs no bfcl_eval import; test_data checks the two agree).
FUNC_DOC_FILES: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except FileNotFoundError:
        raise DataError(f"BFCL data file missing: {path}; reinstall bfcl-eval==2026.3.23") from None


@cache
def _category_entries(category: str) -> tuple[dict[str, Any], ...]:
    """The raw entries of one category, each with its ``ground_truth`` attached (cached; do not mutate)."""
    entries = _read_jsonl(data_dir() / f"BFCL_v4_{category}.json")
    answers = {
        a["id"]: a["ground_truth"] for a in _read_jsonl(data_dir() / "possible_answer" / f"BFCL_v4_{category}.json")
    }
    out = []
    for entry in entries:
        if entry["id"] not in answers:
            raise DataError(f"no ground truth for {entry['id']} in possible_answer/BFCL_v4_{category}.json")
        entry = dict(entry)
        entry["ground_truth"] = answers[entry["id"]]
        if len(entry["ground_truth"]) != len(entry["question"]):
            raise DataError(
                f"{entry['id']}: {len(entry['question'])} user turns but "
                f"{len(entry['ground_truth'])} ground-truth turns"
            )
        out.append(entry)
    return tuple(out)


@lru_cache(maxsize=1)
def split_ids() -> dict[str, list[str]]:
    """The split: ``{"train": [...], "eval": [...], "eval_val": [...], "eval_test": [...]}`` of task ids."""
    raw = json.loads(SPLIT_FILE.read_text(encoding="utf-8"))
    return {name: list(raw[name]) for name in ("train", "eval", "eval_val", "eval_test")}


@cache
def _func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    if class_name not in FUNC_DOC_FILES:
        raise DataError(f"unknown BFCL backend class {class_name!r}; known: {', '.join(FUNC_DOC_FILES)}")
    return tuple(_read_jsonl(data_dir() / "multi_turn_func_doc" / FUNC_DOC_FILES[class_name]))


def category_of(task_id: str) -> str:
    """The category of a task id (``multi_turn_base_12`` -> ``multi_turn_base``)."""
    category = task_id.rsplit("_", 1)[0]
    if category not in CATEGORIES:
        raise DataError(f"task id {task_id!r} is not in a BFCL multi-turn category ({', '.join(CATEGORIES)})")
    return category


def _check_categories(categories: Iterable[str] | None) -> list[str]:
    if categories is None:
        return list(CATEGORIES)
    if isinstance(categories, str):
        categories = [categories]
    chosen = list(categories)
    unknown = [c for c in chosen if c not in CATEGORIES]
    if unknown:
        raise DataError(f"unknown BFCL categories {unknown}; choose from {', '.join(CATEGORIES)}")
    return chosen


def load_tasks(
    categories: Iterable[str] | None = None,
    split: str = "train",
    ids: Iterable[str] | None = None,
    limit_per_category: int | None = None,
) -> list[Task]:
    """The tasks of ``split`` in ``categories`` (all four by default), in data-file order.

    ``split`` is one of ``train``, ``eval``, ``eval_val``, ``eval_test`` (the SEAL split) or ``all`` (every
    task). ``ids`` restricts to those task ids (each must belong to the chosen categories and split);
    ``limit_per_category`` keeps the first N tasks of each category after the other filters.
    ``Task.payload`` is a private copy of the raw BFCL entry plus ``ground_truth`` (list of turns, each a list
    of Python call strings).
    """
    chosen = _check_categories(categories)
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    if limit_per_category is not None and (not isinstance(limit_per_category, int) or limit_per_category < 0):
        raise DataError(f"limit_per_category must be a non-negative integer, got {limit_per_category!r}")
    allowed = None if split == "all" else set(split_ids()[split])
    wanted: set[str] | None = None
    if ids is not None:
        asked = [ids] if isinstance(ids, str) else list(ids)
        known = {e["id"] for c in chosen for e in _category_entries(c)}
        missing = [i for i in asked if i not in known or (allowed is not None and i not in allowed)]
        if missing:
            raise DataError(
                f"task ids not in split {split!r} of categories {chosen}: {missing[:10]}"
                + (" ..." if len(missing) > 10 else "")
            )
        wanted = set(asked)
    tasks: list[Task] = []
    for category in chosen:
        count = 0
        for entry in _category_entries(category):
            if allowed is not None and entry["id"] not in allowed:
                continue
            if wanted is not None and entry["id"] not in wanted:
                continue
            if limit_per_category is not None and count >= limit_per_category:
                break
            tasks.append(Task(id=entry["id"], category=category, split=split, payload=copy_data(entry)))
            count += 1
    return tasks


def get_task(task_id: str, split: str = "all", *, shared: bool = False) -> Task:
    """One task by id (any split by default).

    ``shared``: the payload shares its values with the cached entry (a shallow copy, not a private deep one;
    any split only). For callers that only read it -- the verifier looks up every task of a file, and the deep
    copies were most of that time -- and never change what it holds."""
    if split == "all":
        found = _entries_by_id().get(task_id) if isinstance(task_id, str) else None
        if found is not None:
            category, entry = found
            return Task(id=task_id, category=category, split=split, payload=entry if shared else copy_data(entry))
    return load_tasks([category_of(task_id)], split=split, ids=[task_id])[0]  # or the error that says why not


@lru_cache(maxsize=1)
def _entries_by_id() -> dict[str, tuple[str, dict[str, Any]]]:
    """Task id -> (category, raw entry) over every category (cached; do not mutate)."""
    return {entry["id"]: (category, entry) for category in CATEGORIES for entry in _category_entries(category)}


def _missed_names(task: Task) -> dict[int, list[str]]:
    missed = task.payload.get("missed_function") or {}
    return {int(turn): list(names) for turn, names in missed.items()}


def tool_docs(task: Task) -> list[dict[str, Any]]:
    """The function docs the agent sees at the start of ``task``.

    The docs of the task's involved classes, in ``involved_classes`` order as in ``multi_turn_func_doc``,
    minus the task's ``excluded_function`` names and minus the functions held out until a later turn
    (miss_func). Fresh copies: callers may modify them.
    """
    excluded = set(task.payload.get("excluded_function") or [])
    held = {name for names in _missed_names(task).values() for name in names}
    docs = []
    for class_name in task.payload["involved_classes"]:
        for doc in _func_docs(class_name):
            if doc["name"] in excluded or doc["name"] in held:
                continue
            docs.append(copy.deepcopy(doc))
    return docs


def held_out_docs(task: Task) -> dict[int, list[dict[str, Any]]]:
    """miss_func: turn index -> the docs revealed at the start of that turn (empty for other categories)."""
    by_name: dict[str, dict[str, Any]] = {}
    for class_name in task.payload["involved_classes"]:
        for doc in _func_docs(class_name):
            by_name.setdefault(doc["name"], doc)
    out: dict[int, list[dict[str, Any]]] = {}
    for turn, names in sorted(_missed_names(task).items()):
        docs = []
        for name in names:
            if name not in by_name:
                raise DataError(f"{task.id}: held-out function {name!r} has no doc in the involved classes")
            docs.append(copy.deepcopy(by_name[name]))
        out[turn] = docs
    return out


def ground_truth(task: Task) -> list[list[str]]:
    """The ground-truth calls of ``task``: per turn, a list of Python call strings."""
    return [list(turn) for turn in task.payload["ground_truth"]]
