"""The BFCL backend classes and the safe execution of one parsed call on them.

This is the only module that touches the BFCL backend classes. It imports them from a fixed table by class
name (the task's ``involved_classes`` are checked against the table; model text never names a module or a
class), builds fresh instances per episode / per verification, and executes :class:`ParsedCall` s -- a
method looked up by exact name in a table of the instances' public methods, keyword names checked against
the method's declared parameters, literal values only. No ``eval``, no ``getattr`` on model-supplied names.

Used by the verification core (:mod:`.checker`) and by the tool-worker server (:mod:`._worker`) for the
episodes' tool calls; it has no process or IPC code.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import pickle
from collections.abc import Callable, Iterable, Sequence
from functools import cache, lru_cache
from typing import Any

from seal_platform_libs.toolenv.calls import ParsedCall

from .trace import ERROR_PREFIX

# The official checker refuses these names before eval; we keep its message so verdicts agree.
OFFICIAL_BLOCKED_NAMES = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})

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

# Called after every tool call :meth:`Backend.execute` makes (None: nothing). A child of ``verify``'s forked
# path (:mod:`.fork_verify`) marks its progress with it, so that the parent holds each call to the per-call
# time limit, as training's worker pool does.
CALL_DONE: Callable[[], None] | None = None


class BackendError(ValueError):
    """The task's backend cannot be built (unknown class, bad initial config)."""


@cache
def backend_class(class_name: str) -> type:
    """The backend class for a name from :data:`BACKEND_MODULES` (import happens here, once)."""
    module_name = BACKEND_MODULES.get(class_name)
    if module_name is None:
        raise BackendError(f"unknown BFCL backend class {class_name!r}; known: {', '.join(BACKEND_MODULES)}")
    module = importlib.import_module(module_name)
    cls = module.__dict__.get(class_name)
    if not isinstance(cls, type):
        raise BackendError(f"{module_name} has no class {class_name}")
    _copy_default_state_by_pickle(module)
    return cls


_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data: dicts, lists and tuples of strings, numbers, booleans and None, and sets
    of those atoms."""
    if depth > 50:
        return False
    if type(value) in _PLAIN:
        return True
    if type(value) is dict:
        return all(type(k) in _PLAIN and _plain(v, depth + 1) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) in (set, frozenset):
        return all(type(v) in _PLAIN for v in value)
    return False


def _copy_default_state_by_pickle(module: Any) -> None:
    """Make ``module``'s copies of its own ``DEFAULT_STATE`` pickle round trips instead of ``copy.deepcopy``.

    Each stateful backend's ``_load_scenario`` starts with ``deepcopy(DEFAULT_STATE)`` (the name imported by
    ``from copy import deepcopy``), for every instance, even where the scenario then replaces every part of
    it: TradingBot's default state alone cost 6% of a verification's CPU. For plain data a pickle round trip
    makes the same objects (types, order, shared references) several times faster (:func:`copy_data`). The
    module's ``deepcopy`` becomes a function that does that for the very ``DEFAULT_STATE`` object it was
    given (checked plain once, here) and calls ``copy.deepcopy`` for anything else; a module without
    ``DEFAULT_STATE``, with a state that is not plain data, or whose ``deepcopy`` is not ``copy.deepcopy`` is
    left as it is. The official checker in the same process gets the same copies, equal to deepcopy's."""
    default = module.__dict__.get("DEFAULT_STATE")
    if module.__dict__.get("deepcopy") is not copy.deepcopy or not isinstance(default, dict) or not _plain(default):
        return

    def deepcopy(value: Any, memo: Any = None) -> Any:
        if value is default and memo is None:
            return copy_data(value)
        return copy.deepcopy(value, memo)

    deepcopy.__doc__ = f"copy.deepcopy, by a pickle round trip for {module.__name__}.DEFAULT_STATE (seal-platform)"
    module.deepcopy = deepcopy


@cache
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
            return _dumps(result)
        except Exception:
            return str(result)
    return str(result)


def _dumps(result: dict[Any, Any]) -> str:
    """``json.dumps(result)``, reusing the encodings of the long-context module's constants.

    Long-context ``get_stock_info`` returns the module's two 2,000-float moving-average lists inside every
    result; encoding them is most of the verifier's JSON time. A value of ``result`` that *is* one of those
    objects and still equals its pristine copy gets the encoding made once (anything else -- another
    object, a changed one, a non-string key -- goes through ``json.dumps``), so the text is exactly
    ``json.dumps(result)``'s: the items joined with its default separators."""
    encodings = _constant_encodings()
    if not any(id(value) in encodings for value in result.values()):
        return json.dumps(result)
    parts = []
    for key, value in result.items():
        if type(key) is not str:
            return json.dumps(result)
        known = encodings.get(id(value))
        if known is not None and known[0] is value and value == known[1]:
            parts.append(f"{json.dumps(key)}: {known[2]}")
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{" + ", ".join(parts) + "}"


@lru_cache(maxsize=1)
def _constant_encodings() -> dict[int, tuple[Any, Any, str]]:
    """id -> (object, pristine copy, ``json.dumps`` of it) for the long-context module's top-level lists
    and dicts (the objects backends return without copying)."""
    module = importlib.import_module(f"{_PREFIX}.long_context")
    _, pristine = _long_context_objects()
    out: dict[int, tuple[Any, Any, str]] = {}
    for name, copy_ in pristine.items():
        try:
            out[id(getattr(module, name))] = (getattr(module, name), copy_, json.dumps(copy_))
        except (TypeError, ValueError):  # not JSON-able: always encoded (and failed) the official way
            continue
    return out


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
            shared[path] = copy_data(original if len(path) == 1 else original[path[1]])
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
        configs: dict[str, bytes] | None = None,
    ):
        self.instances: dict[str, Any] = {}
        shared = {} if shared is None else shared
        configs = {} if configs is None else configs
        for class_name in involved_classes:
            cls = backend_class(class_name)
            instance = cls()
            if class_name not in STATELESS_CLASSES:
                # Each instance loads its own copy of its initial config, unpickled from one pickling of it
                # per ``configs`` (backends built with the same dict, for one task, pickle it once).
                blob = configs.get(class_name)
                if blob is None:
                    blob = configs[class_name] = pickle.dumps(initial_config.get(class_name, {}),
                                                              protocol=pickle.HIGHEST_PROTOCOL)
                instance._load_scenario(pickle.loads(blob), long_context=long_context)
                if long_context:
                    _privatise(instance, shared)
            self.instances[class_name] = instance
        self._methods = _method_table(tuple(involved_classes))

    @classmethod
    def for_payload(cls, payload: dict[str, Any], shared: dict[tuple[Any, ...], Any] | None = None,
                    configs: dict[str, bytes] | None = None) -> Backend:
        """The backend of a task entry; backends built with the same ``shared`` dict share long-context
        module objects as the official checker's two instance sets do (see :func:`_long_context_objects`).
        ``configs``: the task's initial configs, pickled, by class (filled on first use): pass one dict to
        every backend of this payload built while it stays unchanged, so each config is pickled once."""
        task_id = str(payload.get("id", ""))
        category = task_id.rsplit("_", 1)[0]
        return cls(
            payload.get("initial_config") or {},
            list(payload["involved_classes"]),
            long_context="long_context" in category or "composite" in category,
            shared=shared,
            configs=configs,
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
        class_name, positions, self_name = entry
        method = getattr(self.instances[class_name], name)  # a name from our own table, never model text
        n_args = len(call.args)
        for key in call.kwargs:
            # CPython's own checks, in its order and with its wording, so replays agree with the official
            # checker -- but done before the call so an undeclared name never reaches it.
            position = positions.get(key)
            if key == self_name or (position is not None and position < n_args):
                return ERROR_PREFIX + f"{method.__qualname__}() got multiple values for argument '{key}'", True
            if position is None:
                return ERROR_PREFIX + f"{method.__qualname__}() got an unexpected keyword argument '{key}'", True
        # Backends keep and mutate argument objects (a tweet's tag list); a call replayed from the same
        # ParsedCall must not see what an earlier replay did to them, just as eval builds fresh ones.
        try:
            args, kwargs = _fresh(call.args), _fresh(call.kwargs)
        except RecursionError:
            return ERROR_PREFIX + "argument nesting too deep", True
        try:
            return stringify(method(*args, **kwargs)), False
        except Exception as exc:  # a backend failure is the call's result, as in the official executor
            return ERROR_PREFIX + str(exc), False
        finally:
            if CALL_DONE is not None:  # a forked verify child's progress mark (fork_verify)
                CALL_DONE()


@cache
def _method_table(involved_classes: tuple[str, ...]) -> dict[str, tuple[str, dict[str, int], str]]:
    """Public method name -> (class name, its parameters' positions by name (``self`` not counted), self
    parameter name) of a set of involved classes; a later class wins a name clash, as in the official
    mapping."""
    table: dict[str, tuple[str, dict[str, int], str]] = {}
    for class_name in involved_classes:
        for name, signature, self_name in _public_methods(backend_class(class_name)):
            table[name] = (class_name, {p: i for i, p in enumerate(signature.parameters)}, self_name)
    return table


def warm_up(involved: Iterable[Sequence[str]], long_context: bool = True) -> None:
    """Import the backend classes of the tasks' ``involved_classes`` lists, build their method tables and fill
    this module's caches, so that processes forked from this one start with them (:mod:`.fork_verify`);
    the long-context module's caches only with ``long_context`` (some task is a long-context one)."""
    for group in {tuple(group) for group in involved}:
        if all(name in BACKEND_MODULES for name in group):  # an unknown name is the replay's error to report
            _method_table(group)
    if long_context:
        _long_context_objects()
        _constant_encodings()


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _fresh(value: tuple | dict) -> Any:
    """A call's arguments as new objects: immutable values are shared, anything else is deep-copied."""
    for v in value.values() if isinstance(value, dict) else value:
        if type(v) not in _ATOMS:
            return copy.deepcopy(value)
    return value if isinstance(value, tuple) else dict(value)


def copy_data(value: Any) -> Any:
    """A deep copy of plain data (scenario configs, literal arguments); pickle is several times faster
    than ``copy.deepcopy`` for it and keeps every type."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
