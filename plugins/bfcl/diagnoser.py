"""The heuristic diagnoser: one failure label per ground-truth turn, from the verifier trace.

Two labels are computed for every turn:

* the **reference label**, by the reference's rules in its order (first rule that fires): ``gt_error``,
  ``spurious_tool_call``, ``correct_abstention``, ``empty_turn_model_response``, ``instance_mismatch``,
  ``checker_error``, ``state_mismatch``, ``response_mismatch``, ``pass``;
* the **label** itself, which refines the reference label where the trace shows why the turn failed (the
  paper's Table 5): ``invalid_tool_call`` (a parse error or a call to a tool not in the current list in this
  turn), ``recovery_failure`` (a tool error the agent never recovered from), ``missing_tool_call`` (a
  ground-truth function never called), ``argument_mismatch`` (the right functions with other arguments).

``TurnLabel.reference_label`` always carries the reference label, so A-Patch's base weights apply to every
label. Turns the agent never reached (the episode ended at a step or context limit first) are labelled
``unreached_turn`` with the reference label ``unreached_turn`` too: the reference calls them
``correct_abstention``, a bug that rewards running out of steps. Like ``gt_error`` and ``checker_error`` they
say nothing about the agent's behaviour in that turn (the failure is labelled on the turn where it happened),
so they belong to the core's :data:`seal_platform.labels.EXCLUDED_LABELS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from seal_platform import labels as core_labels
from seal_platform.types import Task, ToolCall, Trajectory, TurnLabel, TurnVerdict

from .trace import TurnChecks

SOURCE = "bfcl"

UNREACHED = core_labels.UNREACHED_LABEL
# The labels the reference's rules compute, in the order they fire: the core's reference labels less
# ``unreached_turn``, which no rule computes (a turn the episode never reached gets it before any rule runs,
# see :func:`label_turn`) and which is listed after the finer labels.
REFERENCE_LABELS = tuple(label for label in core_labels.REFERENCE_LABELS if label != UNREACHED)
FINE_LABELS = ("invalid_tool_call", "argument_mismatch", "missing_tool_call", "recovery_failure")
ALL_LABELS = REFERENCE_LABELS + FINE_LABELS + (UNREACHED,)
# Reference labels a finer label may replace, the core's (for documentation; the actual reference label of
# each turn is computed and stored with it).
REFINES = core_labels.REFINES

# What each label means (``seal-platform labels bfcl``, docs/labels.md). The first rule that fires wins, in
# the order of REFERENCE_LABELS; a finer label replaces its reference label where the trace shows why.
MEANINGS: dict[str, str] = {
    "gt_error": "executing the ground-truth calls raised (a data problem; excluded from A-Patch)",
    "spurious_tool_call": "the turn needed no tool call, but the agent called a tool",
    "correct_abstention": "the turn needed no tool call and the agent made none",
    "empty_turn_model_response": "the turn needed tool calls, but the agent made no (decodable) call",
    "instance_mismatch": "the agent's execution crashed or the set of backend instances differs",
    "checker_error": "a checker raised (excluded from A-Patch)",
    "state_mismatch": "the state check failed: the backends ended in another state than required",
    "response_mismatch": "the response check failed: a ground-truth result is missing from the agent's results",
    "pass": "every check of the turn passed",
    "invalid_tool_call": "a parse error or a call to a tool not in the current list in this turn",
    "argument_mismatch": "the right functions, called with other arguments",
    "missing_tool_call": "a ground-truth function was never called",
    "recovery_failure": "a tool error the agent never recovered from",
    UNREACHED: "the episode ended (step or context limit) before this turn (excluded from A-Patch)",
}


def _field(verdict: TurnVerdict | Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``turn``, ``passed`` or ``reached`` of a verdict or of its dict form."""
    if isinstance(verdict, TurnVerdict):
        return getattr(verdict, name)
    return verdict.get(name, default)


def _checks(verdict: TurnVerdict | Mapping[str, Any]) -> TurnChecks:
    """The turn's checks as an unvalidated view (a dict-form verdict may hold them under ``checks`` or at its
    top level; ``checks`` wins): values may be anything, so every reader below stays defensive."""
    if isinstance(verdict, TurnVerdict):
        return TurnChecks.view(verdict.checks)
    checks = verdict.get("checks")
    return TurnChecks.view({**verdict, **checks} if isinstance(checks, Mapping) else verdict)


def _flat(calls: Any) -> list[Any]:
    """Calls of a turn as one flat list (the trace may group them per step). Iterative, so a hostile trace
    nested thousands deep cannot exhaust the stack; a scalar counts as one (unreadable) call."""
    if calls is None:
        return []
    out: list[Any] = []
    stack = [calls]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


def _indices(value: Any) -> set[int]:
    """A trace's list of call indices (``rejected_calls``, ``model_error_calls``); anything else is none."""
    if not isinstance(value, (list, tuple, set)):
        return set()
    return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}


def _result_text(results: list[Any], index: int) -> str:
    value = results[index] if index < len(results) else None
    return value if isinstance(value, str) and value else "error"


def _as_int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _signature(call: Any) -> tuple[str, str] | None:
    """(name, canonical arguments) of a call given as BFCL text, a mapping or a ToolCall; None if unreadable."""
    if isinstance(call, str):  # the usual case (a trace's call texts), tested first: Mapping's check is slow
        return _text_signature(call)
    if isinstance(call, ToolCall):
        return call.name, _canon(call.arguments)
    if isinstance(call, Mapping) and "name" in call:
        args = call.get("arguments", call.get("kwargs", {}))
        return str(call["name"]), _canon(args if isinstance(args, Mapping) else {})
    return None


@lru_cache(maxsize=65536)
def _text_signature(call: str) -> tuple[str, str] | None:
    """:func:`_signature` of a call text (cached: ground-truth calls recur in every diagnosis of a task)."""
    # The safe AST-literal parser (model text is never evaluated), its shared parses: a verification in this
    # process has parsed most of these texts already. Read only.
    from seal_platform_libs.toolenv.calls import parse_call_shared

    parsed = parse_call_shared(call)
    if not parsed.ok:
        return None
    args: dict[str, Any] = dict(parsed.kwargs)
    if parsed.args:
        # Ground truth sometimes passes arguments by position (``sort('a.txt')``); name them as the
        # backend would, by the tool doc's parameter order.
        order = _param_order().get(parsed.name)
        if order is None or len(order) < len(parsed.args):
            args["*"] = list(parsed.args)
        else:
            args.update(zip(order, parsed.args))
    return parsed.name, _canon(args)


@lru_cache(maxsize=1)
def _param_order() -> dict[str, list[str]]:
    """Tool name -> its parameter names in doc order, over every BFCL backend class."""
    from . import data

    out: dict[str, list[str]] = {}
    for class_name in data.FUNC_DOC_FILES:
        probe = Task(id="probe", category="multi_turn_base", split="all", payload={"involved_classes": [class_name]})
        for doc in data.tool_docs(probe):
            out[doc["name"]] = list((doc.get("parameters") or {}).get("properties") or {})
    return out


def _canon(arguments: Mapping[str, Any]) -> str:
    try:
        return repr(sorted((str(k), repr(v)) for k, v in arguments.items()))
    except (RecursionError, ValueError):  # nested too deeply, or an int too long for repr
        return "<unrepresentable arguments>"


def reference_label(verdict: TurnVerdict | Mapping[str, Any], n_accepted_calls: int | None = None) -> str:
    """The reference taxonomy's label of one verified turn (first rule that fires).

    ``n_accepted_calls`` (calls of the turn that were not rejected) decides whether the agent called
    anything; without it the trace's ``empty_model`` / ``model_calls`` do.
    """
    return _reference(_checks(verdict), _field(verdict, "passed"), n_accepted_calls)


def _reference(checks: TurnChecks, passed: Any, n_accepted_calls: int | None) -> str:
    if n_accepted_calls is None:
        empty_model = checks.empty_model
        n_calls = (0 if empty_model else 1) if empty_model is not None else len(_flat(checks.model_calls))
    else:
        n_calls = n_accepted_calls
    if checks.gt_error:
        return "gt_error"
    empty_gt = checks.empty_gt
    if empty_gt is None:
        empty_gt = not _flat(checks.gt_calls)
    if empty_gt:
        return "spurious_tool_call" if n_calls else "correct_abstention"
    if not n_calls:
        return "empty_turn_model_response"
    if checks.instance_ok is False:
        return "instance_mismatch"
    if checks.checker_error:
        return "checker_error"
    if checks.state_ok is False:
        return "state_mismatch"
    if checks.response_ok is False:
        return "response_mismatch"
    if passed is False:
        # A failure the trace does not explain (a newer verifier check): the closest reference label.
        return "state_mismatch"
    return "pass"


def _trace_calls(checks: TurnChecks, turn: int) -> list[ToolCall]:
    """The turn's calls rebuilt from the trace alone (for transcripts without tool-call records)."""
    texts = _flat(checks.model_calls)
    rejected = _indices(checks.rejected_calls)
    failed = _indices(checks.model_error_calls)
    results = _flat(checks.model_results)
    out = []
    for index, text in enumerate(texts):
        sig = _signature(text)
        name = sig[0] if sig else ""
        out.append(
            ToolCall(
                turn=turn,
                name=name,
                rejected="refused before running" if index in rejected else None,
                error=_result_text(results, index) if index in failed and index not in rejected else None,
            )
        )
    return out


def _failed(call: ToolCall) -> bool:
    """A raised/refused call, or one whose result is the backend's own ``{"error": ...}`` reply."""
    from .trace import is_error_result

    return bool(call.error) or (call.result is not None and is_error_result(call.result))


def _unrecovered_error(calls: Sequence[ToolCall]) -> bool:
    """Whether some executed call failed and no later call of the same tool in the turn succeeded."""
    for index, call in enumerate(calls):
        if call.rejected or not _failed(call):
            continue
        later = calls[index + 1:]
        if not any(c.name == call.name and not c.rejected and not _failed(c) for c in later):
            return True
    return False


# The reference labels that the turn's calls can refine; any other is final as it is.
_REFINABLE = frozenset({"spurious_tool_call", "correct_abstention", "empty_turn_model_response", "state_mismatch",
                        "response_mismatch"})


def _refine(ref: str, checks: TurnChecks, turn_calls: Sequence[ToolCall], from_trace: bool = False) -> str:
    if ref not in _REFINABLE:
        return ref
    rejected = any(c.rejected for c in turn_calls)
    if ref in ("spurious_tool_call", "correct_abstention"):
        # A turn that needed no call, where the agent reached for a tool it did not have (the miss_func
        # trap) or wrote a malformed call: the reference would call it an abstention when all were rejected.
        return "invalid_tool_call" if rejected else ref
    if ref == "empty_turn_model_response":
        return "invalid_tool_call" if rejected else ref
    # state_mismatch or response_mismatch from here on (the only other refinable labels)
    if rejected:
        return "invalid_tool_call"
    executed = [c for c in turn_calls if not c.rejected]
    if _unrecovered_error(executed):
        return "recovery_failure"
    gt = [s for s in (_signature(c) for c in _flat(checks.gt_calls)) if s is not None]
    if from_trace:
        model = [s for s in (_signature(c) for c in _flat(checks.model_calls)) if s is not None]
    else:
        model = [(c.name, _canon(c.arguments)) for c in executed]
    gt_names = Counter(name for name, _ in gt)
    model_names = Counter(name for name, _ in model)
    if any(model_names[name] < count for name, count in gt_names.items()):
        return "missing_tool_call"
    model_set = Counter(model)
    if any(model_set[sig] < count for sig, count in Counter(gt).items()):
        return "argument_mismatch"
    return ref


def label_turn(
    verdict: TurnVerdict | Mapping[str, Any], turn_calls: Sequence[ToolCall] | None = None
) -> tuple[str, str]:
    """(label, reference label) of one ground-truth turn.

    :param verdict: the verifier's finding for the turn (a :class:`TurnVerdict` or its dict form).
    :param turn_calls: the trajectory's tool calls made in this turn, rejected ones included; they decide
        whether the agent called anything (rejected messages do not count as calls) and which finer label
        applies. None: a transcript without call records; the trace's ``rejected_calls`` and
        ``model_error_calls`` stand in for them.
    """
    if _field(verdict, "reached", True) is False:
        return UNREACHED, UNREACHED
    checks, passed = _checks(verdict), _field(verdict, "passed")
    if turn_calls is None:
        ref = _reference(checks, passed, None)
        if ref not in _REFINABLE:  # final: no need to rebuild the turn's calls from the trace
            return ref, ref
        turn = _as_int(_field(verdict, "turn", 0))
        return _refine(ref, checks, _trace_calls(checks, turn), from_trace=True), ref
    ref = _reference(checks, passed, sum(1 for c in turn_calls if not c.rejected))
    return _refine(ref, checks, turn_calls), ref


def label_turns(
    outcome_turns: Iterable[TurnVerdict | Mapping[str, Any]], tool_calls: Iterable[ToolCall] | None = None
) -> list[str]:
    """One label per ground-truth turn of a verify outcome, in turn order (for ``seal-platform verify``).

    :param outcome_turns: the per-turn verdicts of one transcript.
    :param tool_calls: the transcript's tool calls with their ``turn``, if recorded; otherwise (None or
        empty) the labels come from the trace alone.
    """
    calls = list(tool_calls or ())
    by_turn: dict[int, list[ToolCall]] = {}
    for call in calls:
        by_turn.setdefault(call.turn, []).append(call)
    labels = []
    for index, verdict in enumerate(outcome_turns):
        turn = _as_int(_field(verdict, "turn", index), index)
        labels.append(label_turn(verdict, by_turn.get(turn, []) if calls else None)[0])
    return labels


def diagnose_trajectory(trajectory: Trajectory, source: str = SOURCE) -> list[TurnLabel]:
    """The labels of every ground-truth turn of one verified trajectory."""
    by_turn: dict[int, list[ToolCall]] = {}
    for call in trajectory.tool_calls:
        by_turn.setdefault(call.turn, []).append(call)
    out = []
    for verdict in trajectory.turn_verdicts:
        label, ref = label_turn(verdict, by_turn.get(verdict.turn, []))
        out.append(
            TurnLabel(
                trajectory_id=trajectory.id,
                turn=verdict.turn,
                label=label,
                source=source,
                rationale=_rationale(label, ref, verdict),
                reference_label=ref,
            )
        )
    return out


def diagnose(trajectories: Iterable[Trajectory], source: str = SOURCE) -> list[TurnLabel]:
    """Labels for every ground-truth turn of every trajectory (successes too)."""
    labels: list[TurnLabel] = []
    for trajectory in trajectories:
        labels.extend(diagnose_trajectory(trajectory, source))
    return labels


_WHY = {
    "gt_error": "executing the ground-truth calls raised",
    "spurious_tool_call": "the turn needed no call but the agent called a tool",
    "correct_abstention": "the turn needed no call and the agent made none",
    "empty_turn_model_response": "the turn needed calls but the agent made none",
    "instance_mismatch": "the agent's execution crashed or built other instances",
    "checker_error": "a checker raised",
    "state_mismatch": "the backend state differs from the ground truth's",
    "response_mismatch": "a ground-truth result is missing from the agent's results",
    "pass": "all checks passed",
    "invalid_tool_call": "a message was rejected (parse error or a tool not in the current list)",
    "argument_mismatch": "the right functions were called with other arguments",
    "missing_tool_call": "a ground-truth function was never called",
    "recovery_failure": "a tool error was never recovered from",
    UNREACHED: "the episode ended before this turn",
}


def _rationale(label: str, ref: str, verdict: TurnVerdict) -> str:
    text = _WHY.get(label, label)
    if label != ref:
        text += f" (reference: {ref})"
    return text
