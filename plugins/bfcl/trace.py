"""The verifier's trace: what it found per ground-truth turn, in a stable, JSON-able shape.

:func:`seal_platform_plugins.bfcl.verifier.verify` returns a :class:`VerifyOutcome`; its ``turns`` hold one
:class:`seal_platform.types.TurnVerdict` per ground-truth turn. ``TurnVerdict.passed`` is the official
per-turn verdict, ``TurnVerdict.reached`` is False for turns the model never reached (fewer model turns than
ground-truth turns; nothing is executed for them), and ``TurnVerdict.checks`` is a
:class:`TurnChecks` as a dict (``model_dump()``: the JSON shape stores and ``verify`` outputs keep). Its fields
are part of the plugin's contract (diagnosers read them): add fields, never rename or drop them. Readers of a
stored trace use :meth:`TurnChecks.view`, which takes any dict (a trace read back may hold anything).

``state_ok``/``response_ok`` are computed for every reached turn, but as in the official checker they decide
the verdict only for non-empty ground-truth turns (an empty GT turn passes whatever the model did; its state
still carries into the next turns). Checks of turns after the first failing one are still computed, with the
state each side actually reached, so diagnosers can label every turn; the task's success is the official one.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from seal_platform.config import Section
from seal_platform.types import TurnVerdict

# The prefix the official executor gives an exception's text; observations and replays use it too.
ERROR_PREFIX = "Error during execution: "
# Results kept in traces are clipped to this many characters (long-context listings are huge); the checks
# themselves always compare full results.
TRACE_RESULT_CHARS = 1000

EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
FORCE_TERMINATED = "multi_turn:force_terminated"
CHECKER_ERROR = "multi_turn:checker_error"


def clip(text: str, limit: int = TRACE_RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters with a note of how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters]"


def is_error_result(result: str) -> bool:
    """Whether a call's result is a failure: a raised/rejected call or a returned ``{"error": ...}`` object."""
    if result.startswith(ERROR_PREFIX):
        return True
    if result.startswith("{") and '"error"' in result[:200]:
        try:
            value = json.loads(result)
        except ValueError:
            return False
        return isinstance(value, dict) and "error" in value
    return False


class TurnChecks(Section):
    """What the verifier found in one ground-truth turn (``TurnVerdict.checks`` of the bfcl environment).

    ``state_ok``/``response_ok`` are computed for every reached turn; the defaults are what a reader assumes
    of a trace that lacks the field.
    """

    gt_calls: list[str] = Field(default=[], description="the ground-truth calls of the turn, as written in the data")
    model_calls: list[str] = Field(
        default=[], description="the model's calls of the turn, in BFCL call syntax, in order"
    )
    gt_results: list[str] = Field(
        default=[], description="what each ground-truth call returned (clipped to TRACE_RESULT_CHARS)"
    )
    model_results: list[str] = Field(
        default=[], description="what each model call returned when replayed (clipped likewise)"
    )
    gt_error: str | None = Field(
        default=None, description="the first ground-truth call of the turn that raised, as its error text"
    )
    model_errors: list[str] = Field(
        default=[],
        description='the model calls\' failures when replayed: raised/rejected ("Error during execution: ...") or a '
        'returned {"error": ...} object',
    )
    model_error_calls: list[int] = Field(default=[], description="indices (into model_calls) of those failures")
    rejected_calls: list[int] = Field(
        default=[],
        description="indices of model calls refused before running (not parseable, unknown tool, unexpected "
        "argument name, non-literal value)",
    )
    empty_gt: bool | None = Field(
        default=None, description="the ground-truth turn has no call (the model should abstain); None: not recorded"
    )
    empty_model: bool | None = Field(default=None, description="the model made no call in the turn; None: not recorded")
    instance_ok: bool = Field(default=True, description="both instance sets could be built and hold the same classes")
    state_ok: bool = Field(
        default=True, description="every public attribute of every involved instance equals the GT's"
    )
    state_diff: dict[str, list[str]] = Field(default={}, description="class -> the public attributes that differ")
    response_ok: bool = Field(
        default=True, description="every GT result of this turn is among the model's results so far (multiset)"
    )
    missing_results: list[str] = Field(default=[], description="the GT results of this turn not found (clipped)")
    checker_error: str | None = Field(
        default=None, description="an exception raised while building instances or checking state"
    )
    error_type: str | None = Field(
        default=None,
        description="the official error type when this turn fails (multi_turn:empty_turn_model_response, "
        "multi_turn:instance_state_mismatch, multi_turn:execution_response_mismatch, multi_turn:checker_error, "
        "multi_turn:force_terminated for unreached turns)",
    )

    @classmethod
    def unreached(cls, gt_calls: list[str], **changes: Any) -> TurnChecks:
        """The checks of a turn the model never reached (nothing ran), with ``changes`` to its fields."""
        fields = {"gt_calls": list(gt_calls), "empty_gt": not gt_calls, "empty_model": True,
                  "error_type": FORCE_TERMINATED, **changes}
        return cls(**fields)

    def stored(self) -> dict[str, Any]:
        """These checks as stored (``TurnVerdict.checks``), fields in :data:`CHECK_KEYS` order: what
        ``model_dump()`` gives for the verifier's own checks (plain JSON values; tests hold the two equal),
        without pydantic's serializer in the per-turn hot path. The dict shares this object's lists."""
        return dict(zip(CHECK_KEYS, _CHECK_VALUES(self.__dict__)))

    @classmethod
    def view(cls, checks: Mapping[str, Any]) -> TurnChecks:
        """An unvalidated view of a stored ``checks`` dict: a field it lacks has its default, any other value is
        kept as it is (a trace read back from a store or a file may hold anything, so readers stay defensive
        about types); unknown keys are ignored."""
        if checks.keys() >= _CHECK_KEY_SET:  # a full stored dict (every trace the verifier writes)
            return cls.construct_full(dict(zip(CHECK_KEYS, _CHECK_VALUES(checks))))
        return cls.model_construct(**{name: checks[name] for name in CHECK_KEYS if name in checks})

    @classmethod
    def construct_full(cls, values: dict[str, Any]) -> TurnChecks:
        """``model_construct(**values)`` for a dict that holds every field (in :data:`CHECK_KEYS` order), at a
        fraction of its cost (it resolves aliases and defaults field by field): the same ``__dict__`` (this
        very dict), fields set, extra and private values. No validation: for trusted values only. Tests hold
        the two equal; a model with aliases or a post-init hook would need ``model_construct``."""
        checks = cls.__new__(cls)
        object.__setattr__(checks, "__dict__", values)
        object.__setattr__(checks, "__pydantic_fields_set__", set(values))
        object.__setattr__(checks, "__pydantic_extra__", None)
        object.__setattr__(checks, "__pydantic_private__", None)
        return checks


# The checks' field names, in their stored order.
CHECK_KEYS: tuple[str, ...] = tuple(TurnChecks.model_fields)
# The same, as a set, and the values of a mapping holding them all in that order (a tuple): ``view`` and
# ``stored`` run for every turn of every verification and diagnosis, and these do their work in C.
_CHECK_KEY_SET = frozenset(CHECK_KEYS)
_CHECK_VALUES = operator.itemgetter(*CHECK_KEYS)


@dataclass
class VerifyOutcome:
    """The verdict on one transcript.

    ``success`` is the official binary verdict: as many model turns as ground-truth turns and every turn
    passed. ``error_type``/``error_message`` describe the first failure as the official checker would
    (``None`` on success). ``turns`` has one verdict per ground-truth turn (see the module doc for checks).
    ``unfinished`` says why the verifier could not finish the transcript (it overran its time limit, its
    worker died): then every turn is a checker error, not the model's verdict. None when it finished.
    """

    success: bool
    turns: list[TurnVerdict] = field(default_factory=list)
    error_type: str | None = None
    error_message: str | None = None
    n_gt_turns: int = 0
    n_model_turns: int = 0
    unfinished: str | None = None

    @property
    def turn_count_ok(self) -> bool:
        return self.n_gt_turns == self.n_model_turns

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (what worker processes send back)."""
        return {
            "success": self.success,
            "turns": [t.model_dump() for t in self.turns],
            "error_type": self.error_type,
            "error_message": self.error_message,
            "n_gt_turns": self.n_gt_turns,
            "n_model_turns": self.n_model_turns,
            "unfinished": self.unfinished,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyOutcome:
        return cls(
            success=bool(data["success"]),
            turns=[TurnVerdict.model_validate(t) for t in data["turns"]],
            error_type=data.get("error_type"),
            error_message=data.get("error_message"),
            n_gt_turns=int(data.get("n_gt_turns", 0)),
            n_model_turns=int(data.get("n_model_turns", 0)),
            unfinished=data.get("unfinished"),
        )
