"""The BFCL verification core: pure functions that replay one transcript and check it against the ground truth.

It mirrors ``bfcl_eval``'s ``multi_turn_checker`` + ``execute_multi_turn_func_call`` exactly (same turn loop,
same result stringification, same state and response checks) but with separate fresh instance sets per check
instead of module globals keyed by names. No process or IPC code: it runs in whatever process calls it (the
tool-worker server :mod:`._worker` calls :func:`verify_texts` for untrusted transcripts under its limits;
:func:`.verifier.verify` calls :func:`verify_payload` in-process for trusted input).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from seal_platform.types import TurnVerdict

from .backend import Backend, copy_data
from .calls import ParsedCall, parse_call
from .trace import (
    CHECKER_ERROR,
    EMPTY_TURN,
    ERROR_PREFIX,
    FORCE_TERMINATED,
    RESPONSE_MISMATCH,
    STATE_MISMATCH,
    VerifyOutcome,
    clip,
    empty_checks,
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


@lru_cache(maxsize=16384)
def _parsed_ground_truth(text: str) -> ParsedCall:
    return parse_call(text)


def _ground_truth_call(text: str) -> ParsedCall:
    """A ground-truth call parsed once per text (they recur in every verification of a task); each use gets
    its own copy of the arguments, which a backend method may modify."""
    call = _parsed_ground_truth(text)
    return dataclasses.replace(call, kwargs=copy_data(call.kwargs), args=copy_data(call.args))


def verify_payload(payload: dict[str, Any], model_turns: list[list[ParsedCall]]) -> VerifyOutcome:
    """Score a transcript against a task's ground truth with the official multi-turn semantics.

    ``payload`` is a BFCL entry with ``ground_truth``; ``model_turns`` has, per turn, the model's calls.
    Executes in this process on fresh instances (use the executor for untrusted input that must be
    time-limited).
    """
    gt_turns: list[list[str]] = payload["ground_truth"]
    n_gt, n_model = len(gt_turns), len(model_turns)
    outcome = VerifyOutcome(success=False, n_gt_turns=n_gt, n_model_turns=n_model)
    build_error = None
    try:
        shared: dict[tuple[Any, ...], Any] = {}
        model_backend = Backend.for_payload(payload, shared)
        gt_backend = Backend.for_payload(payload, shared)
    except Exception as exc:  # a broken task, not the model's fault
        build_error = f"{type(exc).__name__}: {exc}"
    all_model_results: list[str] = []
    for index, gt_calls in enumerate(gt_turns):
        if index >= n_model or build_error is not None:
            checks = empty_checks(gt_calls)
            if build_error is not None:
                checks.update(instance_ok=False, checker_error=build_error, error_type=CHECKER_ERROR)
            outcome.turns.append(TurnVerdict(turn=index, passed=False, reached=build_error is not None and index < n_model, checks=checks))
            continue
        calls = model_turns[index]
        # Model calls first, then the ground truth: the official order (it matters only for process-wide
        # state such as the decimal context, but costs nothing to keep).
        model_results, rejected = [], []
        for position, call in enumerate(calls):
            result, was_rejected = model_backend.execute(call)
            model_results.append(result)
            if was_rejected:
                rejected.append(position)
        gt_results = [gt_backend.execute(_ground_truth_call(text))[0] for text in gt_calls]
        all_model_results.extend(model_results)
        checks: dict[str, Any] = {
            "gt_calls": list(gt_calls),
            "model_calls": [call.render() for call in calls],
            "gt_results": [clip(r) for r in gt_results],
            "model_results": [clip(r) for r in model_results],
            "gt_error": next((clip(r) for r in gt_results if r.startswith(ERROR_PREFIX)), None),
            "model_errors": [clip(r) for r in model_results if is_error_result(r)],
            "model_error_calls": [i for i, r in enumerate(model_results) if is_error_result(r)],
            "rejected_calls": rejected,
            "empty_gt": not gt_calls,
            "empty_model": not calls,
            "instance_ok": set(model_backend.instances) == set(gt_backend.instances),
            "state_ok": True,
            "state_diff": {},
            "response_ok": True,
            "missing_results": [],
            "checker_error": None,
            "error_type": None,
        }
        try:
            diff = _compare(model_backend.instances, gt_backend.instances)
            checks["state_ok"] = not diff
            checks["state_diff"] = diff
        except Exception as exc:
            checks["state_ok"] = False
            checks["checker_error"] = f"{type(exc).__name__}: {exc}"
        missing = _missing(gt_results, all_model_results)
        checks["response_ok"] = not missing
        checks["missing_results"] = [clip(m) for m in missing]
        if not gt_calls:
            passed = True
        elif not calls:
            checks["error_type"] = EMPTY_TURN
            passed = False
        elif checks["checker_error"] is not None:
            checks["error_type"] = CHECKER_ERROR
            passed = False
        elif not checks["state_ok"]:
            checks["error_type"] = STATE_MISMATCH
            passed = False
        elif not checks["response_ok"]:
            checks["error_type"] = RESPONSE_MISMATCH
            passed = False
        else:
            passed = True
        outcome.turns.append(TurnVerdict(turn=index, passed=passed, reached=True, checks=checks))
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
        for verdict in outcome.turns:
            if not verdict.passed:
                outcome.error_type = verdict.checks["error_type"]
                outcome.error_message = _message(verdict)
                break
    outcome.success = outcome.error_type is None
    return outcome


def _message(verdict: TurnVerdict) -> str:
    checks, turn = verdict.checks, verdict.turn
    kind = checks["error_type"]
    if kind == EMPTY_TURN:
        return f"Model response list is empty for turn {turn}"
    if kind == STATE_MISMATCH:
        classes = ", ".join(sorted(checks["state_diff"]))
        return f"Model instance for {classes} does not match the state with ground truth instance."
    if kind == RESPONSE_MISMATCH:
        return (
            f"Model response execution results so far does not contain all the ground truth response "
            f"execution results for turn {turn}."
        )
    return f"checker error at turn {turn}: {checks['checker_error']}"


def verify_texts(payload: dict[str, Any], turns: list[list[str]]) -> dict[str, Any]:
    """Parse each turn's call strings and verify them against the task's ground truth; the outcome as JSON."""
    return verify_payload(payload, [[parse_call(text) for text in turn] for turn in turns]).to_json()
