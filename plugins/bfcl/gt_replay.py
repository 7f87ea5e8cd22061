"""The ground truth's side of a check, run once per task and process and reused by the task's later checks.

Every check of a task runs the same ground-truth calls from the same initial config on the same backend
classes; where that run cannot depend on anything but those (see :func:`replayable`), its per-turn results
and the public state of its instances after each turn are the same every time. :func:`gt_replay` records
them the first time a process checks the task (on a fresh instance set of bfcl's own classes, as the
checker builds it) and hands the recording to later checks, which then build and run only the model's side
and compare the model's state with the recorded one (:mod:`.checker`).

A task is replayed from a recording only where that is provably the same as running it again:

- not a long-context or composite task: there bfcl's backends put module-level objects into their state,
  which the model's and the ground truth's instance sets share (the model's calls can change what the
  ground truth sees) and which the calls mutate process-wide;
- no ``MathAPI``: it sets the process-wide decimal precision, so the model's calls and the ground truth's
  affect each other's results;
- no ground-truth call of a method that reads the clock (:data:`CLOCK_METHODS`: TravelAPI's
  ``verify_traveler_information`` computes an age from today's date). The other clock read,
  ``GorillaFileSystem``'s ``File._last_modified``, is private state that no method returns and no state
  check reads;
- every other source of variation is seeded per instance (``random.Random(seed)`` from the initial config)
  and so part of the deterministic run.

The recorded state is a pickled copy of each instance's public attributes; it must compare equal to the live
state it was copied from (for every attribute, ``copy == live``), otherwise the task is not replayed: a
``nan`` or an object compared by identity could make ``model != copy`` differ from ``model != live``. For
value types (plain data and bfcl's ``File``/``Directory``, whose equality is their name and contents) equal
copies give the same comparisons. ``tests/bfcl/test_gt_replay.py`` holds replayed checks equal to fresh ones
(the whole outcome, trace included) on the agreement cases.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from seal_platform.toolenv.calls import parse_call_shared

from .backend import Backend

CLOCK_METHODS = frozenset({"verify_traveler_information"})
PROCESS_STATE_CLASSES = frozenset({"MathAPI"})

# One instance's recorded public state: (class name, type, [(attribute, value), ...] in ``vars`` order).
ClassState = tuple[str, type, list[tuple[str, Any]]]


@dataclass(frozen=True)
class GtReplay:
    """The ground truth's run of one task: per turn, its calls' results and its instances' public state
    after the turn (read-only: every check of the task shares it)."""

    results: list[list[str]]
    states: list[list[ClassState]]


_recorded: dict[tuple[str, tuple[tuple[str, ...], ...]], GtReplay | None] = {}


def replayable(payload: dict[str, Any]) -> bool:
    """Whether the task's ground-truth run can only depend on its initial config and calls (module doc)."""
    category = str(payload.get("id", "")).rsplit("_", 1)[0]
    if "long_context" in category or "composite" in category:
        return False
    if PROCESS_STATE_CLASSES.intersection(payload.get("involved_classes", ())):
        return False
    for turn in payload["ground_truth"]:
        for text in turn:
            if parse_call_shared(text).name in CLOCK_METHODS:
                return False
    return True


def gt_replay(payload: dict[str, Any]) -> GtReplay | None:
    """The task's recorded ground-truth run (recorded now if this process has none yet), or None where the
    task must be run afresh each time (not :func:`replayable`, or its instances cannot be built or copied
    faithfully: the caller's own run then reports what went wrong)."""
    key = (str(payload.get("id", "")), tuple(tuple(turn) for turn in payload["ground_truth"]))
    if key not in _recorded:
        _recorded[key] = _record(payload) if replayable(payload) else None
    return _recorded[key]


def _record(payload: dict[str, Any]) -> GtReplay | None:
    try:
        backend = Backend.for_payload(payload)
    except Exception:
        return None
    results: list[list[str]] = []
    states: list[list[ClassState]] = []
    for turn in payload["ground_truth"]:
        results.append([backend.execute(parse_call_shared(text))[0] for text in turn])
        state = _public_state(backend)
        try:
            copied: list[ClassState] = pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
            faithful = all(
                type(copy_value) is type(value) and copy_value == value
                for (_, _, copy_attrs), (_, _, attrs) in zip(copied, state)
                for (_, copy_value), (_, value) in zip(copy_attrs, attrs)
            )
        except Exception:
            return None
        if not faithful:
            return None
        states.append(copied)
    return GtReplay(results, states)


def _public_state(backend: Backend) -> list[ClassState]:
    return [
        (class_name, type(instance), [(attr, value) for attr, value in vars(instance).items() if not attr.startswith("_")])
        for class_name, instance in backend.instances.items()
    ]


def compare_recorded(model_instances: dict[str, Any], state: list[ClassState]) -> dict[str, list[str]]:
    """:func:`.checker._compare` against a recorded state: the same checks in the same order (the first class
    that differs ends it; a model instance of another type raises as the official check does)."""
    for class_name, gt_type, attrs in state:
        model_instance = model_instances[class_name]
        if type(model_instance) is not gt_type:
            raise AssertionError("Objects are not of the same type.")
        differing = [attr for attr, value in attrs if getattr(model_instance, attr) != value]
        if differing:
            return {class_name: differing}
    return {}


def clear() -> None:
    """Forget every recording (tests)."""
    _recorded.clear()
