"""The BFCL multi-turn verifier: the official binary verdict, computed safely, with a per-turn trace.

Semantics are those of ``bfcl_eval``'s ``multi_turn_checker`` (as run by its eval runner): the model must
have as many turns as the ground truth; per turn the model's calls and the ground-truth calls run on two
separate instance sets built from the task's ``initial_config`` (state carries across turns on each side);
a non-empty GT turn with no model call fails; then every public attribute of every involved instance must
be equal (state check) and every GT result of the turn must be among the model's results of all turns so
far, as a multiset (response check). An empty GT turn passes whatever the model did. Success = every turn
passes. ``tests/bfcl/test_agreement.py`` holds us to the official verdict on the 800 ground-truth answers and
thousands of perturbations of them.

Differences from the official code, all deliberate:
- calls are parsed with ``ast`` into literal arguments and dispatched by name (see
  ``seal_platform_libs.toolenv.calls``); a call the official ``eval`` would run but we refuse (nested calls,
  expressions, builtins, ``**`` unpacking) is a tool error here. Its ``eval`` would also rewrite text inside string
  arguments that looks like a method call (``"... mean (x)"``) with an instance name derived from the checker's model
  name -- a flaw we do not copy.
- instances are fresh per check and private to it (the official code caches them in module globals by
  name, so one name reused gives wrong verdicts).
- turns after the first failure are still checked (for diagnosis); they do not change the verdict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from seal_platform.types import Task, TurnVerdict
from seal_platform_libs.toolenv.calls import ParsedCall, parse_call, parse_call_shared

from .trace import VerifyOutcome

if TYPE_CHECKING:
    from .executor import ToolExecutor

# label_turns(task, outcome) -> one label per GT turn (B's diagnoser plugs in here).
LabelFn = Callable[[Task, VerifyOutcome], Sequence[str]]


def _as_calls(turn: Sequence[ParsedCall | str]) -> list[ParsedCall]:
    return [call if isinstance(call, ParsedCall) else parse_call(call) for call in turn]


def verify(
    task: Task,
    model_turns: Sequence[Sequence[ParsedCall | str]],
    executor: ToolExecutor | None = None,
) -> VerifyOutcome:
    """Verify one transcript: per GT turn, the model's calls (``ParsedCall`` s or BFCL call strings).

    With ``executor`` the replay runs in one of its worker processes under its time limit (use this for
    model output during training: a call like ``power(base=10, exponent=10**12)`` written as a literal can
    run for ages); without, it runs in this process (fast; for tests, benchmarks and trusted input).
    """
    turns = [_as_calls(turn) for turn in model_turns]
    if executor is not None:
        return executor.verify(task, turns)
    from .checker import verify_payload

    return verify_payload(task.payload, turns)


def reference_labels(outcome: VerifyOutcome) -> list[str]:
    """The reference (SEAL release) label of each GT turn, derived from the trace; the fallback when no
    diagnoser is given. Turns the model never reached get ``unreached_turn`` (the reference's
    ``correct_abstention`` for them is a bug)."""
    return [reference_label(verdict) for verdict in outcome.turns]


def reference_label(verdict: TurnVerdict) -> str:
    """First rule that fires, in the reference order (see seal-method.md, "Diagnosis"): the diagnoser's
    :func:`~.diagnoser.reference_label`, with ``unreached_turn`` for a turn the model never reached."""
    from .diagnoser import UNREACHED
    from .diagnoser import reference_label as diagnoser_reference_label

    if not verdict.reached:
        return UNREACHED
    return diagnoser_reference_label(verdict)


def _load_task(task_id: str) -> Task:
    from .data import DataError, get_task

    try:
        return get_task(task_id, shared=True)  # read only: the replay copies what it changes
    except DataError as exc:
        raise ValueError(str(exc)) from None


def check_record(record: Any) -> tuple[str, list[list[str]]]:
    """Validate one ``verify`` input record, ``{"task_id": str, "turns": [[call string, ...], ...]}``;
    return its task id and call strings (ValueError naming what is wrong)."""
    if not isinstance(record, dict):
        raise ValueError(f"each line must be a JSON object, got {type(record).__name__}")
    task_id = record.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError('missing "task_id": each line needs {"task_id": "...", "turns": [[...], ...]}')
    turns = record.get("turns")
    if not isinstance(turns, list) or not all(isinstance(turn, list) for turn in turns):
        raise ValueError(
            '"turns" must be a list with, per ground-truth turn, a list of call strings like "cd(folder=\'x\')"'
        )
    for index, turn in enumerate(turns):
        for call in turn:
            if not isinstance(call, str):
                raise ValueError(f'turn {index}: calls must be strings in BFCL call syntax, got {type(call).__name__}')
    return task_id, turns


def parse_turns(turns: list[list[str]]) -> list[list[ParsedCall]]:
    """The call strings of a checked record, parsed (shared parses: read-only). Unparseable call strings are
    the model's mistake, not a bad record: they replay as tool errors."""
    return [[parse_call_shared(call) for call in turn] for turn in turns]


def parse_record(record: Any) -> tuple[str, list[list[ParsedCall]]]:
    """Validate one ``verify`` input record and parse its calls (:func:`check_record`, :func:`parse_turns`)."""
    task_id, turns = check_record(record)
    return task_id, parse_turns(turns)


def _warm_up(records: list[Any], lookup: Callable[[str], Task]) -> None:
    """Look up the task each record names (``lookup`` caches it) and import the backend classes they involve,
    in this process, before it forks (:mod:`.fork_verify`). The children would each do all of it again, at
    their first items: it is not divided between them. Checking the records is: each child checks its own.
    Bad records and unknown ids are left to the children, who report them in their places."""
    from .backend import warm_up

    involved, long_context = set(), False
    for record in records:
        task_id = record.get("task_id") if isinstance(record, dict) else None
        if not isinstance(task_id, str):
            continue
        try:
            task = lookup(task_id)
            involved.add(tuple(task.payload.get("involved_classes") or ()))
            long_context = long_context or "long_context" in task_id or "composite" in task_id
        except Exception:  # an unknown id: its child answers for it, in its place
            continue
    with contextlib.suppress(Exception):  # a backend that does not import: each replay reports it
        warm_up(involved, long_context)


def verify_records(
    records: list[Any],
    *,
    executor: Callable[[], ToolExecutor],
    label_turns: LabelFn | None = None,
    task_lookup: Callable[[str], Task] | None = None,
    timeout_s: float = 600.0,
    memory_bytes: int | None = 4096 * 1024 * 1024,
    call_timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`verify_record` for many records, each transcript with its own fresh instances and its own
    ``timeout_s`` limit: in children forked from this process when that is safe (:mod:`.fork_verify`; the
    records of one task together, their ground truth replayed once, see :func:`_verify_forked_in_groups`),
    else as one stream in the worker pool ``executor()``. A malformed record or unknown task id gets
    ``{"error": ...}``."""
    from .executor import _failed_outcome
    from .fork_verify import can_fork

    tasks: dict[str, Task] = {}  # looked up once per process; records of one task share its (read-only) Task

    def lookup(task_id: str) -> Task:
        task = tasks.get(task_id)
        if task is None:
            task = tasks[task_id] = (task_lookup or _load_task)(task_id)
        return task

    def prepare(record: Any) -> tuple[str, Task, list[list[str]]]:
        """The record's task id, task and call strings (ValueError, KeyError, TypeError: a bad record)."""
        task_id, turns = check_record(record)
        return task_id, lookup(task_id), turns

    def output(task_id: str, task: Task, outcome: Any) -> dict[str, Any]:
        labels = list(label_turns(task, outcome)) if label_turns is not None else reference_labels(outcome)
        out = {"task_id": task_id, "success": outcome.success, "labels": labels}
        if outcome.unfinished:  # overran its limit, its worker or child died: says why, on either path
            out["checker_error"] = outcome.unfinished
        return out

    def answer(record: Any, outcome_of: Callable[[Task, list[list[ParsedCall]]], Any]) -> dict[str, Any]:
        """The output of one record, its outcome from ``outcome_of(task, parsed turns)``; a bad record's error."""
        try:
            task_id, task, turns = prepare(record)
        except (ValueError, KeyError, TypeError) as exc:
            return {"error": str(exc)}
        return output(task_id, task, outcome_of(task, parse_turns(turns)))

    def failed(record: Any, reason: str) -> dict[str, Any]:
        """A transcript the verifier could not finish (it overran its time limit, crashed its child): failed,
        with every turn a checker error, and ``checker_error`` saying why -- not the model's verdict."""
        return answer(record, lambda task, turns: _failed_outcome(task, turns, reason))

    if can_fork():
        # Each child checks, parses and verifies its own records, so none of that waits on this process. What
        # every child would otherwise do again for itself -- read the tasks' data, import their backends --
        # is done here once first, for the tasks these records name, and every child starts with it.
        _warm_up(records, lookup)

        def limit(record: Any) -> float:
            if call_timeout_s is None:
                return timeout_s
            # Each call of the transcript (and of its ground truth, about as many) gets call_timeout_s, so
            # one runaway call costs seconds, not the whole transcript's limit.
            try:
                calls = sum(len(turn) for turn in record["turns"])
            except (TypeError, KeyError):
                calls = 0
            return min(timeout_s, call_timeout_s * (2 * calls + 2))

        return _verify_forked_in_groups(records, prepare, output, failed, limit, memory_bytes, call_timeout_s)
    out: list[dict[str, Any] | None] = [None] * len(records)
    todo: list[tuple[int, str, Task, list[list[ParsedCall]]]] = []
    for index, record in enumerate(records):
        try:
            task_id, task, turns = prepare(record)
            todo.append((index, task_id, task, parse_turns(turns)))
        except (ValueError, KeyError, TypeError) as exc:
            out[index] = {"error": str(exc)}
    outcomes = executor().verify_many([(task, turns) for _, _, task, turns in todo])
    for (index, task_id, task, _), outcome in zip(todo, outcomes):
        out[index] = output(task_id, task, outcome)
    return [r if r is not None else {"error": "not verified"} for r in out]


# Records of one task are verified together, with one ground-truth replay for them all
# (:func:`.checker.verify_group`), at most this many at a time: a group stays a small share of a lane's work.
GROUP_MAX = 16


def task_groups(records: Sequence[Any], size: int = GROUP_MAX) -> list[list[int]]:
    """The records' positions grouped by task id, groups in order of their first record, at most ``size``
    records each; a record without a string task id is a group of its own (its check reports it)."""
    groups: list[list[int]] = []
    filling: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        task_id = record.get("task_id") if isinstance(record, dict) else None
        if not isinstance(task_id, str):
            groups.append([index])
            continue
        group = filling.get(task_id)
        if group is None or len(group) >= size:
            group = filling[task_id] = []
            groups.append(group)
        group.append(index)
    return groups


_RETRY = "__retry__"


def _verify_forked_in_groups(
    records: list[Any],
    prepare: Callable[[Any], tuple[str, Task, list[list[str]]]],
    output: Callable[[str, Task, Any], dict[str, Any]],
    failed: Callable[[Any, str], dict[str, Any]],
    limit: Callable[[Any], float],
    memory_bytes: int | None,
    call_timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`verify_records`' forked path. Each group of records of one task (:func:`task_groups`) is scored
    in one child with one ground-truth replay, identical transcripts once; the group's time limit is that of
    its slowest record. A group its child could not finish (a record overran the limit, crashed the child or
    ran out of memory) is scored again record by record, each under its own limit, so only the record at
    fault fails -- a runaway call costs its limit twice, once in its group and once alone."""
    from .checker import verify_group
    from .fork_verify import default_lanes, verify_forked

    def score(group: list[int]) -> dict[str, Any]:
        results: list[dict[str, Any] | None] = [None] * len(group)
        # Each distinct transcript once: its call strings, and its positions in the group.
        distinct: dict[tuple[tuple[str, ...], ...], tuple[list[list[str]], list[int]]] = {}
        task: tuple[str, Task] | None = None
        for position, index in enumerate(group):
            try:
                task_id, task_, turns = prepare(records[index])
            except (ValueError, KeyError, TypeError) as exc:
                results[position] = {"error": str(exc)}
                continue
            task = (task_id, task_)
            distinct.setdefault(tuple(tuple(turn) for turn in turns), (turns, []))[1].append(position)
        if task is not None:
            transcripts = list(distinct.values())
            outcomes = verify_group(task[1].payload, [parse_turns(turns) for turns, _ in transcripts])
            for (_, positions), outcome in zip(transcripts, outcomes):
                answer = output(task[0], task[1], outcome)
                for position in positions:
                    results[position] = answer
        return {"results": results}

    def on_failure(group: list[int], reason: str) -> dict[str, Any]:
        if len(group) > 1:
            return {_RETRY: reason}
        return {"results": [failed(records[group[0]], reason)]}

    def run(groups: list[list[int]]) -> list[dict[str, Any]]:
        return verify_forked(
            groups, score, on_failure, timeout_s=lambda group: max(limit(records[i]) for i in group),
            memory_bytes=memory_bytes, lanes=max(1, min(default_lanes(), len(records) // 64)), min_per_lane=1,
            call_timeout_s=call_timeout_s,
        )

    groups = task_groups(records)
    out: list[dict[str, Any] | None] = [None] * len(records)
    retry: list[list[int]] = []
    for group, result in zip(groups, run(groups)):
        if _RETRY in result:
            retry.extend([index] for index in group)
            continue
        for index, answer in zip(group, result["results"]):
            out[index] = answer
    for group, result in zip(retry, run(retry) if retry else []):
        out[group[0]] = result["results"][0]
    return [answer if answer is not None else {"error": "not verified"} for answer in out]


def verify_record(
    record: Any,
    *,
    executor: ToolExecutor | None = None,
    label_turns: LabelFn | None = None,
    task_lookup: Callable[[str], Task] | None = None,
) -> dict[str, Any]:
    """Score one ``seal-platform verify --benchmark bfcl`` input record.

    Returns ``{"task_id": ..., "success": bool, "labels": [one label per GT turn]}``. Raises ValueError for a
    malformed record or an unknown task id (the CLI prints an error line for it and goes on).
    ``label_turns(task, outcome)`` supplies the labels (the environment passes its diagnoser); without it
    the reference labels are derived from the trace. ``executor`` runs the replay in a worker process.
    """
    task_id, turns = parse_record(record)
    task = (task_lookup or _load_task)(task_id)
    outcome = verify(task, turns, executor=executor)
    labels = list(label_turns(task, outcome)) if label_turns is not None else reference_labels(outcome)
    return {"task_id": task_id, "success": outcome.success, "labels": labels}
