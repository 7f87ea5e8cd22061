"""The BFCL verification core: pure functions that replay one transcript and check it against the ground truth.

It mirrors ``bfcl_eval``'s ``multi_turn_checker`` + ``execute_multi_turn_func_call`` exactly (same turn loop,
same result stringification, same state and response checks) but with separate fresh instance sets per check
instead of module globals keyed by names. No process or IPC code: it runs in whatever process calls it (the
tool-worker server :mod:`._worker` calls :func:`verify_texts` for untrusted transcripts under its limits;
:func:`.verifier.verify` calls :func:`verify_payload` in-process for trusted input).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

from seal_platform.types import TurnVerdict
from seal_platform_libs.toolenv.calls import ParsedCall, parse_call, parse_call_shared

from .backend import Backend
from .trace import (
    CHECKER_ERROR,
    EMPTY_TURN,
    ERROR_PREFIX,
    FORCE_TERMINATED,
    RESPONSE_MISMATCH,
    STATE_MISMATCH,
    TurnChecks,
    VerifyOutcome,
    clip,
    is_error_result,
)


def _compare(model_instances: dict[str, Any], gt_instances: dict[str, Any]) -> dict[str, list[str]]:
    """class -> public attributes that differ: the official state check.

    Classes are checked in order and, as in the official checker, the first class that differs ends the
    check (so an error a later class would raise cannot turn a state mismatch into a checker error).
    Attribute names come from our own ground-truth instance, never from model text.
    """
    for class_name, gt_instance in gt_instances.items():
        model_instance = model_instances[class_name]
        if type(model_instance) is not type(gt_instance):
            raise AssertionError("Objects are not of the same type.")
        if _no_data_descriptors(gt_instance.__class__):
            # getattr(instance, attr) is the instance's own value (its __dict__'s) for every attribute it has:
            # read the two dicts directly. An attribute the model's instance lacks is still read by getattr
            # (a class attribute, or the AttributeError the official check raises).
            gt_vars, model_vars = vars(gt_instance), vars(model_instance)
            differing = [
                attr
                for attr, gt_value in gt_vars.items()
                if not attr.startswith("_")
                and (model_vars[attr] if attr in model_vars else getattr(model_instance, attr)) != gt_value
            ]
        else:
            differing = [
                attr
                for attr in vars(gt_instance)
                if not attr.startswith("_") and getattr(model_instance, attr) != getattr(gt_instance, attr)
            ]
        if differing:
            return {class_name: differing}
    return {}


@cache
def _no_data_descriptors(cls: type) -> bool:
    """Whether no public attribute of ``cls`` (or of its bases) is a data descriptor (a property, a slot, ...),
    which ``getattr`` would prefer to an instance's own value (no BFCL backend class has one). Names with a
    leading underscore (``__dict__``'s own descriptor among them) are not compared, so not counted."""
    return not any(hasattr(type(value), "__set__") or hasattr(type(value), "__delete__")
                   for klass in cls.__mro__ for name, value in vars(klass).items() if not name.startswith("_"))


def _missing(expected: list[str], got: list[str]) -> list[str]:
    """GT results not found in the model's results, counting duplicates (official unordered subsequence)."""
    pool = list(got)
    missing = []
    for item in expected:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing


def verify_payload(payload: dict[str, Any], model_turns: list[list[ParsedCall]]) -> VerifyOutcome:
    """Score a transcript against a task's ground truth with the official multi-turn semantics.

    ``payload`` is a BFCL entry with ``ground_truth``; ``model_turns`` has, per turn, the model's calls.
    Executes in this process on fresh instances (use the executor for untrusted input that must be
    time-limited).
    """
    gt_turns: list[list[str]] = payload["ground_truth"]
    n_model = len(model_turns)
    built = _build_backends(payload)
    build_error = built if isinstance(built, str) else None
    checked: list[tuple[TurnVerdict, TurnChecks]] = []
    all_model_results: list[str] = []  # the model's results of every turn so far (the response check's pool)
    for index, gt_calls in enumerate(gt_turns):
        if isinstance(built, str):
            checks = _unbuilt_turn(gt_calls, built)
            verdict = TurnVerdict(turn=index, passed=False, reached=index < n_model)
        elif index >= n_model:
            checks = TurnChecks.unreached(gt_calls)
            verdict = TurnVerdict(turn=index, passed=False, reached=False)
        else:
            checks = _check_turn(gt_calls, model_turns[index], *built, all_model_results)
            verdict = TurnVerdict(turn=index, passed=checks.error_type is None, reached=True)
        verdict.checks = checks.stored()
        checked.append((verdict, checks))
    return _outcome(checked, len(gt_turns), n_model, build_error)


def verify_group(payload: dict[str, Any], transcripts: Sequence[list[list[ParsedCall]]]) -> list[VerifyOutcome]:
    """:func:`verify_payload` of each of several transcripts of one task (or of one), the ground truth replayed
    once for all.

    A transcript's checks read the ground truth's results and state after each turn, and those do not depend on
    the transcript: the ground truth runs on its own instance set, from the task's initial config, and the one
    process-wide state a backend touches (the decimal context) is set by the only call that reads it
    (``square_root``). So one ground-truth replay serves them all, turn by turn in lockstep: each transcript's
    calls of the turn on its own instance set, then the ground truth's, then each transcript's checks against
    it. Every outcome equals :func:`verify_payload`'s for that transcript alone (tests compare the two field by
    field on the agreement cases), at about the cost of the transcripts' own replays: a GRPO group's rollouts,
    or several models' answers to one task, no longer replay the ground truth once each.

    A transcript that makes exactly the ground truth's calls (the same call texts, in order) for its first
    turns does not replay them: run on an instance set in the same state, the same calls give the same results
    and leave the same state -- the backends are deterministic: their randomness is seeded per instance by the
    scenario, and no result or compared attribute reads the clock (TravelAPI's ``verify_traveler_information``
    reads today's date, as in the check alone) -- so until its first turn that differs it *is* the ground truth:
    its results are the ground truth's and its state check compares the ground truth's instances with
    themselves (which also finds what an attribute that is not equal to itself, a NaN, finds on two sets). The
    checks of those turns are the same for every such transcript and are made once. At its first different
    turn it gets its own instance set, brought to the ground truth's state by running its own (identical)
    calls of the turns before, and goes on like the others. A transcript that is the ground truth throughout
    never builds an instance set; the states it shares are exactly the ground truth's after each of its turns,
    which the tests reach on every task (each task's ground truth is one of the agreement cases).

    Long-context tasks whose instances hold module-level objects that the official checker shares between a
    check's two sides (:func:`.backend._long_context_objects`; 50 of the 800 tasks, TravelAPI's extra bookings)
    link the two: a model call that changed one would change the ground truth's state. Here every instance
    set has its own copies, and the ground truth's and each transcript's copies are compared with their
    pristine state (byte for byte, pickled) after each side's calls of every turn: while none has changed,
    sharing them or not gives the same results and the same checks (an unchanged object equals its pristine
    copy, values equal to themselves checked once), so the outcome is the official one. A transcript whose
    calls change one is verified alone (:func:`verify_payload`, linked as officially); if the ground truth's
    calls change one (no task's do), every transcript is. So is every transcript where the instances cannot be
    built.
    """
    if not transcripts:
        return []
    configs: dict[str, bytes] = {}  # the task's initial configs, pickled once for every instance set below
    gt = _independent_set(payload, configs)
    pristine = _pristine(gt.shared) if gt is not None else None
    if gt is None or pristine is None:
        return [verify_payload(payload, turns) for turns in transcripts]
    gt_backend = gt.backend
    gt_turns: list[list[str]] = payload["ground_truth"]
    gt_parsed = [[parse_call_shared(text) for text in turn] for turn in gt_turns]
    # Each transcript's own instance set, None while it still follows the ground truth (see above).
    own: list[_Set | None] = [None] * len(transcripts)
    alone: set[int] = set()  # transcripts verified alone below (see above)
    checked: list[list[tuple[TurnVerdict, TurnChecks]]] = [[] for _ in transcripts]
    pools: list[list[str]] = [[] for _ in transcripts]  # each transcript's results so far, once on its own
    gt_pool: list[str] = []  # the ground truth's results so far: the pool of the transcripts that follow it
    for index, gt_calls in enumerate(gt_turns):
        reaching = [i for i, turns in enumerate(transcripts) if index < len(turns) and i not in alone]
        for i in reaching:
            if own[i] is None and transcripts[i][index] != gt_parsed[index]:
                own[i] = _caught_up(payload, transcripts[i][:index], pristine, configs)
                if own[i] is None:
                    alone.add(i)
                pools[i] = list(gt_pool)
        # The official order within a turn: the model's calls, then the ground truth's.
        runs: dict[int, tuple[list[str], list[int]]] = {}
        for i in reaching:
            mine = own[i]
            if mine is None or i in alone:
                continue
            runs[i] = _run_model_calls(mine.backend, transcripts[i][index])
            if not _untouched(mine, pristine):
                alone.add(i)
        reaching = [i for i in reaching if i not in alone]
        gt_run = _run_model_calls(gt_backend, gt_parsed[index]) if reaching else ([], [])
        if not _untouched(gt, pristine):
            return [verify_payload(payload, turns) for turns in transcripts]
        following: TurnChecks | None = None
        if any(own[i] is None for i in reaching):  # someone still follows the ground truth
            following = _turn_checks(gt_calls, gt_parsed[index], gt_run, gt_run[0], gt_backend, gt_backend, gt_pool)
        for i, turns in enumerate(transcripts):
            if i in alone:
                continue
            mine = own[i]
            if mine is not None and index < len(turns):
                checks = _turn_checks(gt_calls, turns[index], runs[i], gt_run[0], mine.backend, gt_backend, pools[i])
            elif index < len(turns):
                assert following is not None
                checks = following
            else:
                checks = TurnChecks.unreached(gt_calls)
            verdict = TurnVerdict(turn=index, passed=checks.error_type is None, reached=index < len(turns))
            verdict.checks = checks.stored()
            checked[i].append((verdict, checks))
    return [
        verify_payload(payload, turns) if i in alone else _outcome(checked[i], len(gt_turns), len(turns), None)
        for i, turns in enumerate(transcripts)
    ]


class _Set(NamedTuple):
    """An instance set of a task in :func:`verify_group`, and its own copies of the long-context objects its
    instances hold (``{}`` for most tasks)."""

    backend: Backend
    shared: dict[tuple[Any, ...], Any]


def _independent_set(payload: dict[str, Any], configs: dict[str, bytes]) -> _Set | None:
    """A new instance set of the task that shares no object with any other; None if it cannot be built.
    ``configs``: :meth:`.Backend.for_payload`'s pickled configs of the task."""
    try:
        shared: dict[tuple[Any, ...], Any] = {}
        return _Set(Backend.for_payload(payload, shared, configs), shared)
    except Exception:  # each transcript, verified alone, reports it
        return None


def _pristine(shared: dict[tuple[Any, ...], Any]) -> bytes | None:
    """The pickled pristine copies of a new instance set's long-context objects (``b""``: none), to compare
    later states with; None if they cannot be compared so (not picklable, or holding a value not equal to
    itself, with which two equal copies would not compare equal)."""
    if not shared:
        return b""
    try:
        blob = pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)
        return blob if pickle.loads(blob) == shared else None
    except Exception:
        return None


def _untouched(instances: _Set, pristine: bytes) -> bool:
    """Whether an instance set's long-context copies are still exactly as built (see :func:`verify_group`)."""
    if not instances.shared:
        return True
    try:
        return pickle.dumps(instances.shared, protocol=pickle.HIGHEST_PROTOCOL) == pristine
    except Exception:
        return False


def _caught_up(payload: dict[str, Any], turns: list[list[ParsedCall]], pristine: bytes,
               configs: dict[str, bytes]) -> _Set | None:
    """A new instance set of the task with ``turns``' calls run on it (their results unused: they are the ground
    truth's calls, see :func:`verify_group`); None if it cannot be built, or its long-context copies changed."""
    instances = _independent_set(payload, configs)
    if instances is not None:
        for calls in turns:
            _run_model_calls(instances.backend, calls)
        if not _untouched(instances, pristine):
            return None
    return instances


def _build_backends(payload: dict[str, Any]) -> tuple[Backend, Backend] | str:
    """The model's and the ground truth's instance sets (sharing long-context objects as the official
    checker's do), or the reason they cannot be built: a broken task, not the model's fault."""
    try:
        shared: dict[tuple[Any, ...], Any] = {}
        configs: dict[str, bytes] = {}
        return Backend.for_payload(payload, shared, configs), Backend.for_payload(payload, shared, configs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _unbuilt_turn(gt_calls: list[str], build_error: str) -> TurnChecks:
    """The checks of every turn of a task whose instances could not be built."""
    return TurnChecks.unreached(gt_calls, instance_ok=False, checker_error=build_error, error_type=CHECKER_ERROR)


def _check_turn(
    gt_calls: list[str],
    calls: list[ParsedCall],
    model_backend: Backend,
    gt_backend: Backend,
    all_model_results: list[str],
) -> TurnChecks:
    """Run one turn on both instance sets (state carries over from the turns before) and check it."""
    model_run = _run_model_calls(model_backend, calls)
    gt_results = _run_gt_calls(gt_backend, gt_calls)
    return _turn_checks(gt_calls, calls, model_run, gt_results, model_backend, gt_backend, all_model_results)


def _run_gt_calls(gt_backend: Backend, gt_calls: list[str]) -> list[str]:
    """The ground truth's calls of a turn, run in order: their results."""
    return [gt_backend.execute(parse_call_shared(text))[0] for text in gt_calls]


def _turn_checks(
    gt_calls: list[str],
    calls: list[ParsedCall],
    model_run: tuple[list[str], list[int]],
    gt_results: list[str],
    model_backend: Backend,
    gt_backend: Backend,
    all_model_results: list[str],
) -> TurnChecks:
    """The checks of one turn whose calls have run on both sides (``model_run``: the model's results and
    refused positions; ``gt_results``: the ground truth's), with the instance sets in their state after it."""
    model_results, rejected = model_run
    all_model_results.extend(model_results)
    state_diff, checker_error = _check_state(model_backend, gt_backend)
    state_ok = checker_error is None and not state_diff
    # The official response check: every GT result of the turn among the model's results so far.
    missing = _missing(gt_results, all_model_results)
    failed = [i for i, r in enumerate(model_results) if is_error_result(r)]
    # Every value below is the verifier's own, of its field's type (tests hold every stored trace to the
    # schema), so this per-turn hot path skips pydantic's validation.
    return TurnChecks.construct_full(dict(
        gt_calls=list(gt_calls),
        model_calls=[call.render() for call in calls],
        gt_results=[clip(r) for r in gt_results],
        model_results=[clip(r) for r in model_results],
        gt_error=next((clip(r) for r in gt_results if r.startswith(ERROR_PREFIX)), None),
        model_errors=[clip(model_results[i]) for i in failed],
        model_error_calls=failed,
        rejected_calls=rejected,
        empty_gt=not gt_calls,
        empty_model=not calls,
        instance_ok=model_backend.instances.keys() == gt_backend.instances.keys(),
        state_ok=state_ok,
        state_diff=state_diff,
        response_ok=not missing,
        missing_results=[clip(m) for m in missing],
        checker_error=checker_error,
        error_type=_turn_error_type(gt_calls, calls, checker_error, state_ok, not missing),
    ))


def _run_model_calls(backend: Backend, calls: list[ParsedCall]) -> tuple[list[str], list[int]]:
    """The model's calls of a turn, run in order: their results and the positions of those refused.

    They run before the ground truth's: the official order (it matters only for process-wide state such as
    the decimal context, but costs nothing to keep)."""
    results, rejected = [], []
    for position, call in enumerate(calls):
        result, was_rejected = backend.execute(call)
        results.append(result)
        if was_rejected:
            rejected.append(position)
    return results, rejected


def _check_state(model_backend: Backend, gt_backend: Backend) -> tuple[dict[str, list[str]], str | None]:
    """The official state check: (class -> differing attributes, None), or ({}, the error it raised)."""
    try:
        return _compare(model_backend.instances, gt_backend.instances), None
    except Exception as exc:
        return {}, f"{type(exc).__name__}: {exc}"


def _turn_error_type(
    gt_calls: list[str], calls: list[ParsedCall], checker_error: str | None, state_ok: bool, response_ok: bool
) -> str | None:
    """The official error type of a checked turn (None: it passed). An empty GT turn passes whatever the
    model did."""
    if not gt_calls:
        return None
    if not calls:
        return EMPTY_TURN
    if checker_error is not None:
        return CHECKER_ERROR
    if not state_ok:
        return STATE_MISMATCH
    if not response_ok:
        return RESPONSE_MISMATCH
    return None


def _outcome(
    checked: list[tuple[TurnVerdict, TurnChecks]], n_gt: int, n_model: int, build_error: str | None
) -> VerifyOutcome:
    """The transcript's verdict: the official error type and message of its first failure."""
    outcome = VerifyOutcome(
        success=False, turns=[verdict for verdict, _ in checked], n_gt_turns=n_gt, n_model_turns=n_model
    )
    if n_model != n_gt:
        outcome.error_type = FORCE_TERMINATED
        outcome.error_message = (
            f"The length of the model result turns ({n_model}) does not match the length of the ground truth "
            f"turns ({n_gt})."
        )
    elif build_error is not None:
        outcome.error_type = CHECKER_ERROR
        outcome.error_message = f"could not build the task's backend instances: {build_error}"
    else:
        failed = next(((verdict, checks) for verdict, checks in checked if not verdict.passed), None)
        if failed is not None:
            outcome.error_type = failed[1].error_type
            outcome.error_message = _message(failed[0].turn, failed[1])
    outcome.success = outcome.error_type is None
    return outcome


def _message(turn: int, checks: TurnChecks) -> str:
    """The official checker's message for a failed turn."""
    kind = checks.error_type
    if kind == EMPTY_TURN:
        return f"Model response list is empty for turn {turn}"
    if kind == STATE_MISMATCH:
        classes = ", ".join(sorted(checks.state_diff))
        return f"Model instance for {classes} does not match the state with ground truth instance."
    if kind == RESPONSE_MISMATCH:
        return (
            f"Model response execution results so far does not contain all the ground truth response "
            f"execution results for turn {turn}."
        )
    return f"checker error at turn {turn}: {checks.checker_error}"


def verify_texts(payload: dict[str, Any], turns: list[list[str]]) -> dict[str, Any]:
    """Parse each turn's call strings and verify them against the task's ground truth; the outcome as JSON."""
    return verify_payload(payload, [[parse_call(text) for text in turn] for turn in turns]).to_json()
