"""The official-checker harness and the deterministic perturbation generator of the agreement test.

A plain module (not conftest.py, whose name another test folder's conftest can shadow on ``sys.path``):
``tests/bfcl/test_agreement.py`` imports it, and ``benchmarks/bench_verifier.py`` loads it by path, so the
test and the benchmark use the same cases.
"""

from __future__ import annotations

import copy
import itertools
import random
import re
from typing import Any

# --- the official checker, in a fresh namespace per check -------------------------------------------------

_names = itertools.count()
_LONG_CONTEXT_SNAPSHOT: dict[str, Any] | None = None


def _long_context_module() -> Any:
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context

    return long_context


def _restore_long_context() -> None:
    """Put bfcl's long-context module objects back as they were (in place, keeping object identities two
    levels deep): the official backends share and mutate them, so without this one check leaks into the next."""
    global _LONG_CONTEXT_SNAPSHOT
    module = _long_context_module()
    if _LONG_CONTEXT_SNAPSHOT is None:
        _LONG_CONTEXT_SNAPSHOT = {
            name: copy.deepcopy(value)
            for name, value in vars(module).items()
            if not name.startswith("_") and isinstance(value, (dict, list))
        }
        return
    for name, saved in _LONG_CONTEXT_SNAPSHOT.items():
        live = getattr(module, name)
        if isinstance(live, dict):
            for key in list(live):
                if key not in saved:
                    del live[key]
            for key, value in saved.items():
                current = live.get(key)
                if isinstance(current, dict) and isinstance(value, dict):
                    current.clear()
                    current.update(copy.deepcopy(value))
                elif isinstance(current, list) and isinstance(value, list):
                    current[:] = copy.deepcopy(value)
                else:
                    live[key] = copy.deepcopy(value)
        else:
            for index, value in enumerate(saved):
                if index < len(live) and isinstance(live[index], dict) and isinstance(value, dict):
                    live[index].clear()
                    live[index].update(copy.deepcopy(value))
                elif index < len(live):
                    live[index] = copy.deepcopy(value)
            del live[len(saved):]
            live.extend(copy.deepcopy(value) for value in saved[len(live):])


def official_verdict(entry: dict[str, Any], model_turns: list[list[str]]) -> tuple[bool, str | None]:
    """(valid, error_type) from bfcl_eval's multi_turn_checker, as its eval runner calls it.

    The runner first fails a transcript whose turn count differs (``multi_turn:force_terminated``) and drops
    empty steps; we pass each turn as one step. Every check gets a model name never used before, and its
    cached instances are deleted afterwards, so no check sees another's instances. An exception inside the
    checker is reported as ``("raised", ...)``.
    """
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    ground_truth = entry["ground_truth"]
    if len(model_turns) != len(ground_truth):
        return False, "multi_turn:force_terminated"
    _restore_long_context()
    name = f"agreement{next(_names)}x"
    decoded = [[list(turn)] if turn else [] for turn in model_turns]
    test_entry = {k: copy.deepcopy(v) for k, v in entry.items() if k != "ground_truth"}
    try:
        result = multi_turn_checker(decoded, ground_truth, test_entry, entry["id"].rsplit("_", 1)[0], name)
    except Exception as exc:  # the official checker asserts / getattr-fails in some states
        return False, f"raised:{type(exc).__name__}"
    finally:
        space = vars(multi_turn_utils)
        prefix = re.sub(r"[-./:]", "_", name)
        for key in [k for k in space if k.startswith(prefix)]:
            del space[key]
    return bool(result["valid"]), None if result["valid"] else result.get("error_type")


# --- deterministic perturbations of the ground truth ------------------------------------------------------

PERTURBATION_KINDS = (
    "drop",
    "duplicate",
    "swap",
    "move",
    "alter",
    "spurious",
    "empty_turn",
    "positional",
    "turn_count",
)


def _alter_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, -1, 10])
    if isinstance(value, float):
        return round(value * rng.choice([0.5, 2.0, 1.1]) + 1.0, 3)
    if isinstance(value, str):
        options = [value + "x", value.upper() if value.upper() != value else value.lower() + "z", "", value[:-1] or "y"]
        return rng.choice(options)
    if isinstance(value, list):
        return value[:-1] if value else ["extra"]
    if isinstance(value, dict):
        return {}
    return "changed"


def _alter_call(text: str, rng: random.Random, method_names: list[str]) -> str:
    """Change one thing in a call: a value, a keyword name, a dropped keyword, or the function name."""
    from seal_platform_libs.toolenv.calls import parse_call, render_call

    call = parse_call(text)
    if call.error is not None:
        return text
    kwargs = dict(call.kwargs)
    args = list(call.args)
    choice = rng.random()
    if (kwargs or args) and choice < 0.6:
        if kwargs and (not args or rng.random() < 0.8):
            key = rng.choice(sorted(kwargs))
            kwargs[key] = _alter_value(kwargs[key], rng)
        else:
            index = rng.randrange(len(args))
            args[index] = _alter_value(args[index], rng)
        return render_call(call.name, kwargs, tuple(args))
    if kwargs and choice < 0.75:
        key = rng.choice(sorted(kwargs))
        kwargs[key + "_typo"] = kwargs.pop(key)
        return render_call(call.name, kwargs, tuple(args))
    if kwargs and choice < 0.85:
        kwargs.pop(rng.choice(sorted(kwargs)))
        return render_call(call.name, kwargs, tuple(args))
    other = [m for m in method_names if m != call.name]
    if other:
        return render_call(rng.choice(other), kwargs, tuple(args))
    return render_call(call.name + "_v2", kwargs, tuple(args))


def _to_positional(text: str) -> str:
    from seal_platform_libs.toolenv.calls import parse_call, render_call

    call = parse_call(text)
    if call.error is not None or not call.kwargs:
        return text
    return render_call(call.name, {}, tuple(call.args) + tuple(call.kwargs.values()))


def perturb(
    entry: dict[str, Any], rng: random.Random, kind: str, pool: list[str], method_names: list[str]
) -> list[list[str]]:
    """One perturbation of ``entry``'s ground truth of the given kind (deterministic given ``rng``)."""
    turns = [list(turn) for turn in entry["ground_truth"]]
    filled = [i for i, turn in enumerate(turns) if turn]
    if not filled:
        return turns
    t = rng.choice(filled)
    if kind == "drop":
        turns[t].pop(rng.randrange(len(turns[t])))
    elif kind == "duplicate":
        i = rng.randrange(len(turns[t]))
        turns[t].insert(i + rng.choice([0, 1]), turns[t][i])
    elif kind == "swap":
        if len(turns[t]) >= 2:
            i, j = rng.sample(range(len(turns[t])), 2)
            turns[t][i], turns[t][j] = turns[t][j], turns[t][i]
        else:
            turns[t].append(rng.choice(pool))
    elif kind == "move":
        call = turns[t].pop(rng.randrange(len(turns[t])))
        target = rng.randrange(len(turns))
        turns[target].insert(rng.randrange(len(turns[target]) + 1), call)
    elif kind == "alter":
        i = rng.randrange(len(turns[t]))
        turns[t][i] = _alter_call(turns[t][i], rng, method_names)
    elif kind == "spurious":
        target = rng.randrange(len(turns))
        empties = [i for i, turn in enumerate(turns) if not turn]
        if empties and rng.random() < 0.5:
            target = rng.choice(empties)
        extra = rng.choice(
            pool + ["pwd()", "ls()", "get_current_time()", "unknown_tool(x=1)", "cd(folder=undefined_name)"]
        )
        turns[target].insert(rng.randrange(len(turns[target]) + 1), extra)
    elif kind == "empty_turn":
        turns[t] = []
    elif kind == "positional":
        turns[t] = [_to_positional(call) for call in turns[t]]
    elif kind == "turn_count":
        if rng.random() < 0.5:
            turns.pop(rng.randrange(len(turns)))
        else:
            turns.insert(rng.randrange(len(turns) + 1), [])
    else:
        raise ValueError(kind)
    return turns


def agreement_cases(
    entries: list[dict[str, Any]], per_task: int, seed: int
) -> list[tuple[dict[str, Any], list[list[str]], str]]:
    """(entry, model turns, kind): each entry's own ground truth, then ``per_task`` perturbations of it.

    Kinds cycle so every kind is used about equally; calls for "spurious" come from other tasks that
    involve the same classes.
    """
    from seal_platform_plugins.bfcl.backend import _public_methods, backend_class

    rng = random.Random(seed)
    by_classes: dict[tuple[str, ...], list[str]] = {}
    for entry in entries:
        key = tuple(sorted(entry["involved_classes"]))
        by_classes.setdefault(key, []).extend(call for turn in entry["ground_truth"] for call in turn)
    cases = []
    counter = itertools.count()
    for entry in entries:
        cases.append((entry, [list(turn) for turn in entry["ground_truth"]], "ground_truth"))
        pool = by_classes[tuple(sorted(entry["involved_classes"]))]
        methods = sorted(
            name for cls in entry["involved_classes"] for name, _, _ in _public_methods(backend_class(cls))
        )
        for _ in range(per_task):
            kind = PERTURBATION_KINDS[next(counter) % len(PERTURBATION_KINDS)]
            cases.append((entry, perturb(entry, rng, kind, pool, methods), kind))
    return cases
