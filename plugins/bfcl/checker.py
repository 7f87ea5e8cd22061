"""The BFCL verification core: pure functions that replay one transcript and check it against the ground truth.

It mirrors ``bfcl_eval``'s ``multi_turn_checker`` + ``execute_multi_turn_func_call`` exactly (same turn loop,
same result stringification, same state and response checks) but with separate fresh instance sets per check
instead of module globals keyed by names. No process or IPC code: it runs in whatever process calls it (the
tool-worker server :mod:`._worker` calls :func:`verify_texts` for untrusted transcripts under its limits;
:func:`.verifier.verify` calls :func:`verify_payload` in-process for trusted input).
"""

from __future__ import annotations

from typing import Any, Sequence

from seal_platform.toolenv.calls import ParsedCall, parse_call, parse_call_shared
from seal_platform.types import TurnVerdict

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
        differing = [
            attr
            for attr in vars(gt_instance)
            if not attr.startswith("_") and getattr(model_instance, attr) != getattr(gt_instance, attr)
        ]
        if differing:
            return {class_name: differing}
    return {}


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
    backends, build_error = _build_backends(payload)
    checked: list[tuple[TurnVerdict, TurnChecks]] = []
    all_model_results: list[str] = []  # the model's results of every turn so far (the response check's pool)
    for index, gt_calls in enumerate(gt_turns):
        if build_error is not None:
            checks = _unbuilt_turn(gt_calls, build_error)
            verdict = TurnVerdict(turn=index, passed=False, reached=index < n_model)
        elif index >= n_model:
            checks = TurnChecks.unreached(gt_calls)
            verdict = TurnVerdict(turn=index, passed=False, reached=False)
        else:
            checks = _check_turn(gt_calls, model_turns[index], *backends, all_model_results)
            verdict = TurnVerdict(turn=index, passed=checks.error_type is None, reached=True)
        verdict.checks = checks.stored()
        checked.append((verdict, checks))
    return _outcome(checked, len(gt_turns), n_model, build_error)


def verify_group(payload: dict[str, Any], transcripts: Sequence[list[list[ParsedCall]]]) -> list[VerifyOutcome]:
    """:func:`verify_payload` of each of several transcripts of one task, the ground truth replayed once for all.

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

    Where the two sides are linked -- long-context tasks whose instances hold the module-level objects the
    official checker shares between them (:func:`.backend._long_context_objects`), so a model call can change
    the ground truth's state -- or where the instances cannot be built, each transcript is verified alone.
    """
    if len(transcripts) < 2:
        return [verify_payload(payload, turns) for turns in transcripts]
    gt_backend = _independent_backend(payload)
    if gt_backend is None:
        return [verify_payload(payload, turns) for turns in transcripts]
    gt_turns: list[list[str]] = payload["ground_truth"]
    gt_parsed = [[parse_call_shared(text) for text in turn] for turn in gt_turns]
    # Each transcript's own instance set, None while it still follows the ground truth (see above).
    own: list[Backend | None] = [None] * len(transcripts)
    alone: set[int] = set()  # transcripts whose instance set could not be built here: verified alone below
    checked: list[list[tuple[TurnVerdict, TurnChecks]]] = [[] for _ in transcripts]
    pools: list[list[str]] = [[] for _ in transcripts]  # each transcript's results so far, once on its own
    gt_pool: list[str] = []  # the ground truth's results so far: the pool of the transcripts that follow it
    for index, gt_calls in enumerate(gt_turns):
        reaching = [i for i, turns in enumerate(transcripts) if index < len(turns) and i not in alone]
        for i in reaching:
            if own[i] is None and transcripts[i][index] != gt_parsed[index]:
                own[i] = _caught_up(payload, transcripts[i][:index])
                if own[i] is None:
                    alone.add(i)
                pools[i] = list(gt_pool)
        reaching = [i for i in reaching if i not in alone]
        # The official order within a turn: the model's calls, then the ground truth's.
        runs = {i: _run_model_calls(backend, transcripts[i][index]) for i in reaching if (backend := own[i]) is not None}
        gt_run = _run_model_calls(gt_backend, gt_parsed[index]) if reaching else ([], [])
        following: TurnChecks | None = None
        if len(runs) < len(reaching):  # someone still follows the ground truth
            following = _turn_checks(gt_calls, gt_parsed[index], gt_run, gt_run[0], gt_backend, gt_backend, gt_pool)
        for i, turns in enumerate(transcripts):
            if i in alone:
                continue
            if i in runs:
                checks = _turn_checks(
                    gt_calls, turns[index], runs[i], gt_run[0], own[i], gt_backend, pools[i])  # type: ignore[arg-type]
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


def _independent_backend(payload: dict[str, Any]) -> Backend | None:
    """An instance set of the task that shares no object with any other (the ground truth's in
    :func:`verify_group`); None where that cannot be (the task's instances hold shared long-context objects, or
    cannot be built)."""
    try:
        shared: dict[tuple[Any, ...], Any] = {}
        backend = Backend.for_payload(payload, shared)
    except Exception:  # each transcript, verified alone, reports it
        return None
    return None if shared else backend


def _caught_up(payload: dict[str, Any], turns: list[list[ParsedCall]]) -> Backend | None:
    """A new independent instance set of the task with ``turns``' calls run on it (their results unused: they
    are the ground truth's calls, see :func:`verify_group`); None if it cannot be built."""
    backend = _independent_backend(payload)
    if backend is not None:
        for calls in turns:
            _run_model_calls(backend, calls)
    return backend


def _build_backends(payload: dict[str, Any]) -> tuple[tuple[Backend, Backend] | tuple[()], str | None]:
    """The model's and the ground truth's instance sets (sharing long-context objects as the official
    checker's do), or the reason they cannot be built: a broken task, not the model's fault."""
    try:
        shared: dict[tuple[Any, ...], Any] = {}
        return (Backend.for_payload(payload, shared), Backend.for_payload(payload, shared)), None
    except Exception as exc:
        return (), f"{type(exc).__name__}: {exc}"


def _unbuilt_turn(gt_calls: list[str], build_error: str) -> TurnChecks:
    """The checks of every turn of a task whose instances could not be built."""
    return TurnChecks.unreached(gt_calls, instance_ok=False, checker_error=build_error, error_type=CHECKER_ERROR)


def _check_turn(
    gt_calls: list[str], calls: list[ParsedCall], model_backend: Backend, gt_backend: Backend, all_model_results: list[str]
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
        instance_ok=set(model_backend.instances) == set(gt_backend.instances),
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
