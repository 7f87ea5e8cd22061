"""The judge's answer model, its JSON schema and the reader of raw answers (model text: never evaluated)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from seal_platform.types import TurnLabel
from seal_platform_plugins.diagnosis_llm.judge import LABELS, offered_labels
from seal_platform_plugins.diagnosis_llm.schema import Judgement, answer_schema, read_judgement

ALL = list(LABELS)


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            '{"label": "state_mismatch", "rationale": "wrong folder", "confidence": 0.7}',
            ("state_mismatch", "wrong folder", 0.7),
        ),
        (
            'Sure! {"label": "spurious_tool_call", "rationale": "no call needed", "confidence": 1} Hope this helps.',
            ("spurious_tool_call", "no call needed", 1.0),
        ),
        (
            '```json\n{"label": "Recovery Failure", "rationale": "never retried", "confidence": 0}\n```',
            ("recovery_failure", "never retried", 0.0),
        ),
        (
            '{"note": 1} then {"label": "invalid-tool-call", "rationale": "r", "confidence": "0.5", "extra": [1]}',
            ("invalid_tool_call", "r", 0.5),
        ),
    ],
)
def test_valid_answers(text, expected):
    judgement, reason = read_judgement(text, ALL)
    assert reason == "" and (judgement.label, judgement.rationale, judgement.confidence) == expected


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"label": "pass", "rationale": "fine", "confidence": 1}', "not one of the labels offered"),
        ('{"label": "made_up", "rationale": "x", "confidence": 0.5}', "not one of the labels offered"),
        ('{"label": "state_mismatch", "rationale": "x"}', "confidence: Field required"),
        ('{"label": "state_mismatch", "rationale": "x", "confidence": 1.5}', "less than or equal to 1"),
        ('{"label": "state_mismatch", "rationale": "x", "confidence": -0.1}', "greater than or equal to 0"),
        ('{"label": "state_mismatch", "rationale": "x", "confidence": Infinity}', "finite number"),
        ('{"label": "state_mismatch", "rationale": "x", "confidence": false}', "not a boolean"),
        ('{"label": "state_mismatch", "rationale": "x", "confidence": "high"}', "confidence"),
        ('{"label": 3, "rationale": "x", "confidence": 0.5}', "label"),
        ('{"label": "state_mismatch", "rationale": "   ", "confidence": 0.5}', "rationale"),
        ("{'label': 'state_mismatch', 'rationale': 'x', 'confidence': 0.5}", "no JSON object"),
        ('{"label": "state_mismatch", "rationale": ', "cut off"),  # an answer that hit the token limit
        ("exec('import os')", "no JSON object"),
        ("[" * 19_000, "no JSON object"),
        ('{"a":' * 3_000 + "1" + "}" * 3_000, "no JSON object"),  # nesting past the parser's recursion limit
        (
            '{"x": 1} ' * 1_500 + '{"label": "state_mismatch", "rationale": "late", "confidence": 9}',
            "less than or equal",
        ),
        ("   ", "empty"),
        ("x" * 30_000, "characters long"),
    ],
)
def test_invalid_answers_say_why(text, why):
    judgement, reason = read_judgement(text, ALL)
    assert judgement is None and why in reason


def test_non_text_answers_are_invalid():
    assert read_judgement(None, ALL)[0] is None
    assert read_judgement({"label": "state_mismatch"}, ALL)[1] == "the answer is a dict, not text"


def test_label_is_checked_against_the_labels_offered_for_the_turn():
    text = '{"label": "argument_mismatch", "rationale": "x", "confidence": 0.5}'
    assert read_judgement(text, ["argument_mismatch", "state_mismatch"])[0].label == "argument_mismatch"
    assert "not one of the labels offered: state_mismatch" in read_judgement(text, ["state_mismatch"])[1]
    # Validation without a label set accepts any label (the model is also usable on its own).
    assert Judgement.model_validate({"label": "X y", "rationale": "r", "confidence": 0}).label == "x_y"


def test_rationale_is_cut_and_extra_fields_dropped():
    judgement, _ = read_judgement(
        json.dumps({"label": "state_mismatch", "rationale": "r" * 5000, "confidence": 0.5, "x": 1}), ALL
    )
    assert len(judgement.rationale) == 1000 and "x" not in judgement.model_dump()


def test_schema_is_strict_and_lists_the_offered_labels():
    schema = answer_schema(["state_mismatch", "argument_mismatch"])
    assert schema["properties"]["label"]["enum"] == ["state_mismatch", "argument_mismatch"]
    assert schema["additionalProperties"] is False and set(schema["required"]) == set(schema["properties"])
    with pytest.raises(ValidationError):
        Judgement.model_validate({"label": "state_mismatch", "rationale": "r", "confidence": 2})


def test_offered_labels_refine_the_heuristic_label():
    def offered(label, reference=None):
        return offered_labels(
            TurnLabel(trajectory_id="t", turn=0, label=label, reference_label=reference, source="bfcl")
        )

    assert offered("response_mismatch") == (
        "response_mismatch", "invalid_tool_call", "argument_mismatch", "missing_tool_call", "recovery_failure")
    assert offered("instance_mismatch") == ("instance_mismatch",)
    assert offered("empty_turn_model_response") == ("empty_turn_model_response", "invalid_tool_call")
    # A fine heuristic label: its coarse reference and the sibling refinements are offered.
    assert offered("argument_mismatch", "state_mismatch") == (
        "state_mismatch", "invalid_tool_call", "argument_mismatch", "missing_tool_call", "recovery_failure")
    # A label from another taxonomy: every label of ours.
    assert offered("weird_label", "weird_label") == tuple(LABELS)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=400),
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.sampled_from(["label", "rationale", "confidence", "x"]), inner, max_size=4)
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v, allow_nan=True)),
    )
)
def test_reading_any_text_never_raises(text):
    judgement, reason = read_judgement(text, ALL)
    assert (judgement is None) != (reason == "")
    if judgement is not None:
        assert judgement.label in LABELS and 0.0 <= judgement.confidence <= 1.0 and judgement.rationale


def test_an_answer_cut_by_the_token_limit_says_so_and_names_the_setting():
    from seal_platform_plugins.diagnosis_llm.schema import read_judgement

    cut = '{"label": "state_mismatch", "rationale": "the model wrote the file to the wrong dire'
    judgement, why = read_judgement(cut, ["state_mismatch", "pass"])
    assert judgement is None and "cut off" in why and "settings.diagnosis_llm.max_new_tokens" in why
    _, other = read_judgement("no json here", ["pass"])
    assert "no JSON object" in other and "cut off" not in other
