"""The judge's answer: a pydantic model, its JSON schema for constrained decoding, and a tolerant reader.

A judge answer is model output and is treated as data only: it is searched for a JSON object with the
standard library's decoder (never evaluated), the object is validated by :class:`Judgement`, and anything
else (prose, a made-up label, a confidence of 7, a 10 MB answer, nesting deep enough to blow the parser's
recursion limit) is reported as invalid with a short reason, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

# Longest answer looked at, and longest rationale kept.
MAX_ANSWER_CHARS = 20_000
MAX_RATIONALE_CHARS = 1_000


class Judgement(BaseModel):
    """One judged turn: a label of the taxonomy, why, and how sure the judge is (0..1).

    Validate with ``Judgement.model_validate(obj, context={"labels": allowed})`` to restrict the label to
    the labels offered for that turn.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    label: str
    rationale: str = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)

    @field_validator("label", mode="before")
    @classmethod
    def _normalise_label(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # the str check reports it
        label = re.sub(r"[\s\-]+", "_", value.strip().lower())
        allowed = (info.context or {}).get("labels")
        if allowed is not None and label not in allowed:
            shown = value if len(value) <= 60 else value[:60] + "..."
            raise ValueError(f"{shown!r} is not one of the labels offered: {', '.join(allowed)}")
        return label

    @field_validator("rationale", mode="before")
    @classmethod
    def _cut_rationale(cls, value: Any) -> Any:
        return value.strip()[:MAX_RATIONALE_CHARS] if isinstance(value, str) else value

    @field_validator("confidence", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read true as 1.0
            raise ValueError("must be a number between 0 and 1, not a boolean")
        return value


def answer_schema(labels: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of an answer whose label is one of ``labels``, as constrained decoders take it
    (OpenAI structured outputs' strict mode: every property required, no others)."""
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": list(labels)},
            "rationale": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["label", "rationale", "confidence"],
        "additionalProperties": False,
    }


CUT_OFF = "the answer's JSON is cut off"  # how an answer cut by the token limit is reported
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _first_answer(text: str) -> dict[str, Any] | None:
    """The first JSON object with a ``label`` field in ``text``: inside code fences first, then anywhere."""
    decoder = json.JSONDecoder()
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for start in (i for i, ch in enumerate(candidate) if ch == "{"):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
                continue
            if isinstance(value, dict) and "label" in value:
                return value
    return None


def read_judgement(text: Any, labels: Sequence[str]) -> tuple[Judgement | None, str]:
    """``(judgement, "")`` for a valid answer, else ``(None, why it is invalid)``.

    The first JSON object that has a ``label`` field is the answer; it must validate completely.
    """
    if not isinstance(text, str):
        return None, f"the answer is a {type(text).__name__}, not text"
    if len(text) > MAX_ANSWER_CHARS:
        return None, f"the answer is {len(text)} characters long (more than {MAX_ANSWER_CHARS})"
    if not text.strip():
        return None, "the answer is empty"
    found = _first_answer(text)
    if found is None:
        if text.count("{") > text.count("}"):
            return None, (f"{CUT_OFF} (an unclosed '{{'): it most likely reached the judge's token "
                          "limit; raise settings.diagnosis_llm.max_new_tokens")
        return None, "the answer holds no JSON object with a 'label' field"
    try:
        return Judgement.model_validate(found, context={"labels": list(labels)}), ""
    except ValidationError as exc:
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors())
        return None, reasons[:500]
