"""Backend execution and the verification core; runs inside worker processes (or in-process for trusted use).

This is the only module that touches the BFCL backend classes. It imports them from a fixed table by class
name (the task's ``involved_classes`` are checked against the table; model text never names a module or a
class), builds fresh instances per episode / per verification, and executes :class:`ParsedCall` s -- a
method looked up by exact name in a table of the instances' public methods, keyword names checked against
the method's declared parameters, literal values only. No ``eval``, no ``getattr`` on model-supplied names.

The verification core mirrors ``bfcl_eval``'s ``multi_turn_checker`` + ``execute_multi_turn_func_call``
exactly (same turn loop, same result stringification, same state and response checks) but with separate
fresh instance sets per check instead of module globals keyed by names.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import os
import pickle
import time
from functools import lru_cache
from typing import Any, Callable

from seal_platform.types import TurnVerdict

from .calls import OFFICIAL_BLOCKED_NAMES, ParsedCall, from_arguments, parse_call
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

_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
# Class name -> module, as bfcl_eval.constants.executable_backend_config.CLASS_FILE_PATH_MAPPING (the
# multi-turn classes only; test_executor checks the two agree).
BACKEND_MODULES: dict[str, str] = {
    "GorillaFileSystem": f"{_PREFIX}.gorilla_file_system",
    "MathAPI": f"{_PREFIX}.math_api",
    "MessageAPI": f"{_PREFIX}.message_api",
    "TwitterAPI": f"{_PREFIX}.posting_api",
    "TicketAPI": f"{_PREFIX}.ticket_api",
    "TradingBot": f"{_PREFIX}.trading_bot",
    "TravelAPI": f"{_PREFIX}.travel_booking",
    "VehicleControlAPI": f"{_PREFIX}.vehicle_control",
}
STATELESS_CLASSES = frozenset({"MathAPI"})


class BackendError(ValueError):
    """The task's backend cannot be built (unknown class, bad initial config)."""


@lru_cache(maxsize=None)
def backend_class(class_name: str) -> type:
    """The backend class for a name from :data:`BACKEND_MODULES` (import happens here, once)."""
    module_name = BACKEND_MODULES.get(class_name)
    if module_name is None:
        raise BackendError(f"unknown BFCL backend class {class_name!r}; known: {', '.join(BACKEND_MODULES)}")
    module = importlib.import_module(module_name)
    cls = module.__dict__.get(class_name)
    if not isinstance(cls, type):
        raise BackendError(f"{module_name} has no class {class_name}")
    return cls


@lru_cache(maxsize=None)
def _public_methods(cls: type) -> tuple[tuple[str, inspect.Signature, str], ...]:
    """(name, bound signature, name of the self parameter) of the public methods of a backend class."""
    out = []
    for name, function in inspect.getmembers(cls, predicate=inspect.isfunction):
        if name.startswith("_"):
            continue
        signature = inspect.signature(function)
        params = list(signature.parameters.values())
        self_name = params[0].name if params else "self"
        out.append((name, signature.replace(parameters=params[1:]), self_name))
    return tuple(out)


def stringify(result: Any) -> str:
    """A call's return value as the official executor turns it into text."""
    if type(result) == str:  # noqa: E721 - the official code tests exact types; subclasses go through str()
        return result
    if type(result) == dict:  # noqa: E721
        try:
            return json.dumps(result)
        except Exception:
            return str(result)
    return str(result)


@lru_cache(maxsize=1)
def _long_context_objects() -> tuple[dict[int, tuple[Any, ...]], dict[str, Any]]:
    """The mutable module-level objects of bfcl's ``long_context`` module: id -> path, and pristine copies.

    Long-context backends put some of these objects into instance state without copying them (TravelAPI's
    extra credit cards and bookings), so every instance in a process shares -- and mutates -- the same
    dicts. Within one official check that sharing links the model's and the GT's instances; across checks
    and episodes it leaks state. We reproduce the first (one private copy per check, shared by both sides)
    and not the second.
    """
    module = importlib.import_module(f"{_PREFIX}.long_context")
    paths: dict[int, tuple[Any, ...]] = {}
    pristine: dict[str, Any] = {}
    for name, value in vars(module).items():
        if name.startswith("_") or not isinstance(value, (dict, list)):
            continue
        pristine[name] = copy.deepcopy(value)
        paths[id(value)] = (name,)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, (dict, list)):
                paths[id(item)] = (name, key)
    return paths, pristine


def _privatise(instance: Any, shared: dict[tuple[Any, ...], Any]) -> None:
    """Replace module-level long-context objects held by ``instance`` with the copies in ``shared``."""
    paths, pristine = _long_context_objects()

    def replacement(value: Any) -> Any:
        path = paths.get(id(value))
        if path is None:
            return value
        if path not in shared:
            original = pristine[path[0]]
            shared[path] = copy.deepcopy(original if len(path) == 1 else original[path[1]])
        return shared[path]

    for attr, value in list(vars(instance).items()):
        new = replacement(value)
        if new is not value:
            setattr(instance, attr, new)
            continue
        if isinstance(value, dict):
            for key, item in list(value.items()):
                value[key] = replacement(item)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                value[index] = replacement(item)


class Backend:
    """The instances of one task's involved classes, with their public methods by name.

    ``long_context`` loads the long-context scenario (as the official code does for that category).
    """

    def __init__(
        self,
        initial_config: dict[str, Any],
        involved_classes: list[str],
        long_context: bool = False,
        shared: dict[tuple[Any, ...], Any] | None = None,
    ):
        self.instances: dict[str, Any] = {}
        shared = {} if shared is None else shared
        self._methods: dict[str, tuple[Callable[..., Any], inspect.Signature, str]] = {}
        for class_name in involved_classes:
            cls = backend_class(class_name)
            instance = cls()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(_copy_data(initial_config.get(class_name, {})), long_context=long_context)
                if long_context:
                    _privatise(instance, shared)
            self.instances[class_name] = instance
            for name, signature, self_name in _public_methods(cls):
                # A later class wins a name clash, as in the official mapping.
                self._methods[name] = (getattr(instance, name), signature, self_name)

    @classmethod
    def for_payload(cls, payload: dict[str, Any], shared: dict[tuple[Any, ...], Any] | None = None) -> "Backend":
        """The backend of a task entry; backends built with the same ``shared`` dict share long-context
        module objects as the official checker's two instance sets do (see :func:`_long_context_objects`)."""
        task_id = str(payload.get("id", ""))
        category = task_id.rsplit("_", 1)[0]
        return cls(
            payload.get("initial_config") or {},
            list(payload["involved_classes"]),
            long_context="long_context" in category or "composite" in category,
            shared=shared,
        )

    @property
    def method_names(self) -> set[str]:
        return set(self._methods)

    def execute(self, call: ParsedCall, allowed: set[str] | None = None) -> tuple[str, bool]:
        """Run one call; return (result text, rejected). Failures come back as ``"Error during execution: ..."``.

        ``rejected`` is True when nothing ran (unparseable call, unknown or unavailable tool, bad argument
        name). ``allowed`` restricts the callable tools (the episode's current tool list); None allows every
        public method, as the official checker does.
        """
        if call.error is not None:
            return ERROR_PREFIX + call.error, True
        name = call.name
        if name in OFFICIAL_BLOCKED_NAMES:
            return ERROR_PREFIX + f"Function call {name} is not allowed.", True
        entry = self._methods.get(name)
        if entry is None:
            return ERROR_PREFIX + f"name '{name}' is not defined", True
        if allowed is not None and name not in allowed:
            return ERROR_PREFIX + f"tool '{name}' is not available in the current tool list", True
        method, signature, self_name = entry
        params = list(signature.parameters)
        for key in call.kwargs:
            # CPython's own checks, in its order and with its wording, so replays agree with the official
            # checker -- but done before the call so an undeclared name never reaches it.
            if key == self_name or (key in params and params.index(key) < len(call.args)):
                return ERROR_PREFIX + f"{method.__qualname__}() got multiple values for argument '{key}'", True
            if key not in signature.parameters:
                return ERROR_PREFIX + f"{method.__qualname__}() got an unexpected keyword argument '{key}'", True
        # Backends keep and mutate argument objects (a tweet's tag list); a call replayed from the same
        # ParsedCall must not see what an earlier replay did to them, just as eval builds fresh ones.
        try:
            args, kwargs = copy.deepcopy(call.args), copy.deepcopy(call.kwargs)
        except RecursionError:
            return ERROR_PREFIX + "argument nesting too deep", True
        try:
            return stringify(method(*args, **kwargs)), False
        except Exception as exc:  # a backend failure is the call's result, as in the official executor
            return ERROR_PREFIX + str(exc), False


# --- verification --------------------------------------------------------------------------------------


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
    import dataclasses

    call = _parsed_ground_truth(text)
    return dataclasses.replace(call, kwargs=_copy_data(call.kwargs), args=_copy_data(call.args))


def _copy_data(value: Any) -> Any:
    """A deep copy of plain data (scenario configs, literal arguments); pickle is several times faster
    than ``copy.deepcopy`` for it and keeps every type."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


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


# --- the worker process ----------------------------------------------------------------------------------


def _limit_resources(memory_bytes: int | None) -> None:
    if not memory_bytes:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform / not permitted: the timeout still holds
        pass


def _clip_result(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"... [output clipped: {len(text) - limit} more characters]"
    return text


def _verify_batch(conn: Any, request: dict[str, Any], payloads: dict[str, dict[str, Any]]) -> bool:
    """``{"op": "verify_batch", "items": [{"task": id, "payload": {...} | null, "turns": [...]}, ...]}``:
    one reply per item, in order, each sent as soon as it is done (the parent times each one). A payload is
    sent once per task and kept. Returns False when the parent has gone away."""
    for item in request.get("items") or []:
        started = time.perf_counter()
        try:
            task = str(item["task"])
            if item.get("payload") is not None:
                payloads[task] = item["payload"]
            reply: dict[str, Any] = {"ok": True, "outcome": _verify(payloads[task], item["turns"])}
        except MemoryError:
            reply = {"ok": False, "error": "the verification ran out of memory"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not _send_reply(conn, reply, started):
            return False
    return True


def _verify(payload: Any, turns: list[list[str]]) -> dict[str, Any]:
    """Parse each turn's call strings and verify them against the task's ground truth; the outcome as JSON."""
    return verify_payload(payload, [[parse_call(text) for text in turn] for turn in turns]).to_json()


def _send_reply(conn: Any, reply: dict[str, Any], started: float) -> bool:
    """Stamp the reply's elapsed time and send it as JSON; False when the parent has gone."""
    reply["elapsed_s"] = time.perf_counter() - started
    try:
        conn.send_bytes(json.dumps(reply, default=str).encode("utf-8"))
    except (OSError, ValueError):
        return False
    return True


def worker_main(conn: Any, memory_bytes: int | None = None) -> None:
    """Serve requests on ``conn`` until told to exit or the parent goes away.

    Messages are JSON (never pickle): ``{"op": "open", "session": id, "payload": {...}}``, ``{"op": "call",
    "session": id, "name": ..., "arguments": {...}, "allowed": [...] | null, "max_chars": N}``,
    ``{"op": "close", "session": id}``, ``{"op": "verify", "payload": {...},
    "turns": [[call text, ...], ...]}``, ``{"op": "verify_batch", ...}`` (see :func:`_verify_batch`; one
    reply per item), ``{"op": "ping"}``, ``{"op": "exit"}``. Every reply is
    ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.
    """
    _limit_resources(memory_bytes)
    sessions: dict[str, Backend] = {}
    payloads: dict[str, dict[str, Any]] = {}
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        started = time.perf_counter()
        try:
            request = json.loads(raw)
            op = request.get("op")
            if op == "verify_batch":
                if not _verify_batch(conn, request, payloads):
                    return
                continue
            if op == "exit":
                conn.send_bytes(b'{"ok": true}')
                return
            if op == "ping":
                reply: dict[str, Any] = {"ok": True, "pid": os.getpid(), "sessions": len(sessions)}
            elif op == "open":
                # Each session gets its own instances and its own copies of shared long-context objects.
                backend = Backend.for_payload(request["payload"], shared={})
                sessions[str(request["session"])] = backend
                reply = {"ok": True, "tools": sorted(backend.method_names)}
            elif op == "close":
                sessions.pop(str(request.get("session")), None)
                reply = {"ok": True}
            elif op == "call":
                backend = sessions.get(str(request.get("session")))
                if backend is None:
                    reply = {"ok": False, "error": "no such session in this worker"}
                else:
                    call = from_arguments(request.get("name"), request.get("arguments"))
                    allowed = request.get("allowed")
                    text, rejected = backend.execute(call, None if allowed is None else set(allowed))
                    failed = text.startswith(ERROR_PREFIX)
                    text = _clip_result(text, int(request.get("max_chars") or 0))
                    reply = {"ok": True, "result": None if failed else text, "error": text if failed else None, "rejected": rejected}
            elif op == "verify":
                reply = {"ok": True, "outcome": _verify(request["payload"], request["turns"])}
            else:
                reply = {"ok": False, "error": f"unknown request {op!r}"}
        except MemoryError:
            reply = {"ok": False, "error": "the tool ran out of memory"}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if not _send_reply(conn, reply, started):
            return
