"""Closed-loop interface evolution on hand-built label streams: each change, its trigger and its thresholds."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from pydantic import ValidationError

from seal_platform.capability import CapabilityState
from seal_platform.stages import adopt_interface
from seal_platform.types import Interface, Trajectory, TurnLabel, TurnVerdict
from seal_platform_libs.toolenv import evolution
from seal_platform_libs.toolenv.evolution import (
    GUIDELINES,
    EvolutionSettings,
    label_pressures,
)
from seal_platform_libs.toolenv.interface import active_changes, render_tools, system_addendum

BASE = "multi_turn_base"
PARAM = "multi_turn_miss_param"
FUNC = "multi_turn_miss_func"
LONG = "multi_turn_long_context"
CATEGORIES = [BASE, FUNC, PARAM, LONG]
_ids = itertools.count()


def evolve(interface: Interface, state: CapabilityState, settings: EvolutionSettings, categories: list[str],
           step: int) -> Interface | None:
    """:func:`evolution.evolve`, numbered as the core numbers what ``evolve_interface`` returns."""
    new = evolution.evolve(interface, state, settings, categories)
    return None if new is None else adopt_interface(new, interface, step, "bfcl")


def rollouts(category: str, turns: list[str], reward: float, n: int) -> list[tuple[Trajectory, list[TurnLabel]]]:
    """``n`` rollouts of ``category``, each with one label per turn as given."""
    out = []
    for _ in range(n):
        tid = f"t{next(_ids)}"
        traj = Trajectory(
            id=tid,
            task_id=f"{category}_{tid}",
            category=category,
            group=tid,
            reward=reward,
            turn_verdicts=[TurnVerdict(turn=i, passed=reward > 0.5) for i in range(len(turns))],
        )
        out.append((traj, [TurnLabel(trajectory_id=tid, turn=i, label=z, source="test") for i, z in enumerate(turns)]))
    return out


def state_of(*groups: list[tuple[Trajectory, list[TurnLabel]]], step: int = 0, epoch: int = 0,
             state: CapabilityState | None = None) -> CapabilityState:
    state = state or CapabilityState()
    pairs = [p for g in groups for p in g]
    state.update(step, epoch, [t for t, _ in pairs], [lab for _, ls in pairs for lab in ls])
    return state


def scope(rev: Interface | None, name: str) -> dict:
    assert rev is not None
    return rev.spec.get("scopes", {}).get(name, {})


def lines(rev: Interface | None, name: str) -> list[str]:
    return [g["label"] for g in scope(rev, name).get("guidelines", [])]


def Closed(**kw):  # noqa: N802 - stands for the settings class
    """The closed loop with the epoch window and no release (what most tests here exercise); the defaults
    (reference mode, the round's profile, release at 0.02) are tested on their own below."""
    return EvolutionSettings(**{"mode": "closed_loop", "table": "window", "release_pressure": None, **kw})


ALL_ON = Closed(type_hints=True, hide_optional=True)


# --- modes ---------------------------------------------------------------------------------------------------


def test_off_never_changes_the_interface() -> None:
    state = state_of(rollouts(PARAM, ["argument_mismatch"] * 4, 0.0, 20))
    assert evolve(Interface(), state, Closed(mode="off"), CATEGORIES, step=3) is None


def test_closed_loop_does_nothing_without_evidence() -> None:
    assert evolve(Interface(), CapabilityState(), Closed(), CATEGORIES, step=0) is None
    # Lots of passing turns: evidence, but no pressure.
    state = state_of(rollouts(BASE, ["pass"] * 4, 1.0, 20))
    assert evolve(Interface(), state, Closed(), CATEGORIES, step=0) is None


def test_reference_mode_turns_static_affordances_on_for_every_category_at_once() -> None:
    rev = evolve(Interface(), CapabilityState(), Closed(mode="reference"), CATEGORIES, step=0)
    assert rev is not None and (rev.revision, rev.parent, rev.step) == (1, 0, 0)
    assert scope(rev, "*") == {"changes": ["enum_values", "no_invent_note", "required_markers"]}
    for category in CATEGORIES:
        assert active_changes(rev, category) == {"enum_values", "no_invent_note", "required_markers"}
    # Static: whatever the labels say later, nothing else changes.
    heavy = state_of(rollouts(PARAM, ["recovery_failure"] * 4, 0.0, 20))
    assert evolve(rev, heavy, Closed(mode="reference"), CATEGORIES, step=5) is None
    assert rev.changes == ["*: static schema affordances enum_values, no_invent_note, required_markers"]
    assert rev.driven_by == []
    # The category switch applies to the reference behaviour too.
    only = evolve(Interface(), CapabilityState(), Closed(mode="reference", categories=[FUNC]), CATEGORIES, 0)
    assert set(only.spec["scopes"]) == {FUNC}
    assert active_changes(only, BASE) == set()


# --- each change and its trigger -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        # each failure type drives one cue type: constraint info, the tool list, recovery, or a guideline
        ("argument_mismatch", {"required_markers", "enum_values", "type_hints", "hide_optional"}),
        ("instance_mismatch", {"required_markers", "type_hints"}),
        ("state_mismatch", {"enum_values"}),
        ("invalid_tool_call", {"no_invent_note"}),
        ("recovery_failure", {"recovery"}),
        ("spurious_tool_call", set()),
        ("empty_turn_model_response", set()),
        ("response_mismatch", set()),
        ("missing_tool_call", set()),
    ],
)
def test_each_label_switches_on_its_changes(label: str, expected: set[str]) -> None:
    state = state_of(rollouts(BASE, [label, "pass", "pass", "pass"], 0.0, 10))
    rev = evolve(Interface(), state, ALL_ON, CATEGORIES, step=2)
    assert rev is not None
    assert active_changes(rev, BASE) == expected
    assert label in rev.driven_by
    # Guideline-type failures get a guideline line (and nothing else); the others none.
    if evolution.CUE_TYPE[label] == "guideline":
        assert lines(rev, BASE) == [label] and GUIDELINES[label] in system_addendum(rev, BASE)
    else:
        assert lines(rev, BASE) == [] and expected


def test_optional_schema_changes_need_their_settings() -> None:
    state = state_of(rollouts(PARAM, ["argument_mismatch", "pass"], 0.0, 10))
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=0)
    assert active_changes(rev, PARAM) == {"required_markers", "enum_values"}


@pytest.mark.parametrize(
    ("settings", "absent"),
    [
        (Closed(schema_affordances=False), {"required_markers", "enum_values", "no_invent_note"}),
        (Closed(recovery_feedback=False), {"recovery"}),
    ],
)
def test_families_can_be_switched_off(settings: EvolutionSettings, absent: set[str]) -> None:
    state = state_of(rollouts(FUNC, ["invalid_tool_call", "argument_mismatch", "recovery_failure"], 0.0, 10))
    rev = evolve(Interface(), state, settings, CATEGORIES, step=0)
    on = active_changes(rev, FUNC)
    assert on and not (on & absent)


def test_guidelines_can_be_switched_off() -> None:
    state = state_of(rollouts(BASE, ["state_mismatch", "pass"], 0.0, 10))
    rev = evolve(Interface(), state, Closed(guidelines=False), CATEGORIES, step=0)
    assert "guidelines" not in scope(rev, BASE)
    assert "Guidelines" not in system_addendum(rev, BASE)
    rev0 = evolve(Interface(), state, Closed(max_guidelines=0), CATEGORIES, step=0)
    assert "guidelines" not in scope(rev0, BASE)


# --- thresholds ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("occurrences", "fires"), [(7, False), (8, True)])
def test_min_count(occurrences: int, fires: bool) -> None:
    # Prevalence stays high (>= 0.25): only the count decides.
    state = state_of(
        rollouts(BASE, ["recovery_failure", "pass"], 0.0, occurrences),
        rollouts(BASE, ["pass", "pass"], 0.0, 10),
    )
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=0)
    assert (rev is not None and "recovery" in active_changes(rev, BASE)) is fires
    lowered = evolve(Interface(), state, Closed(min_count=occurrences), CATEGORIES, step=0)
    assert lowered is not None and "recovery" in active_changes(lowered, BASE)


@pytest.mark.parametrize(("turns", "fires"), [(100, False), (80, True)])
def test_min_prevalence(turns: int, fires: bool) -> None:
    # 8 recovery failures among ``turns`` labelled turns: prevalence 0.08 or 0.10.
    state = state_of(
        rollouts(BASE, ["recovery_failure", "pass", "pass", "pass"], 0.0, 8),
        rollouts(BASE, ["pass"] * 4, 0.0, (turns - 32) // 4),
    )
    pressure = label_pressures(state.window, BASE)["recovery_failure"]
    assert pressure.prevalence == pytest.approx(8 / turns)
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=0)
    assert (rev is not None and "recovery" in active_changes(rev, BASE)) is fires
    assert rev is None or "recovery_failure" not in lines(rev, BASE)  # a recovery cue, not a guideline


def test_pressure_discounts_labels_that_still_succeed() -> None:
    """Same count and prevalence, but the trajectories carrying the label mostly succeed."""
    mostly_ok = state_of(
        rollouts(BASE, ["recovery_failure", "pass"], 1.0, 19),
        rollouts(BASE, ["recovery_failure", "pass"], 0.0, 1),
    )
    p = label_pressures(mostly_ok.window, BASE)["recovery_failure"]
    assert p.prevalence == pytest.approx(0.5) and p.mean_reward == pytest.approx(0.95)
    assert p.pressure == pytest.approx(0.025)
    rev = evolve(Interface(), mostly_ok, Closed(), CATEGORIES, step=0)
    assert rev is None or "recovery" not in active_changes(rev, BASE)
    rev = evolve(Interface(), mostly_ok, Closed(activate_pressure=0.02), CATEGORIES, step=0)
    assert rev is not None and "recovery" in active_changes(rev, BASE)


def test_min_evidence_defers_the_decision() -> None:
    state = state_of(rollouts(BASE, ["recovery_failure", "recovery_failure"], 0.0, 6))  # 12 turns
    assert evolve(Interface(), state, Closed(min_count=8), CATEGORIES, step=0) is None
    rev = evolve(Interface(), state, Closed(min_count=8, min_evidence=12), CATEGORIES, step=0)
    assert rev is not None and "recovery" in active_changes(rev, BASE)


def test_excluded_labels_neither_drive_nor_dilute() -> None:
    state = state_of(
        rollouts(BASE, ["recovery_failure", "gt_error", "gt_error", "unreached_turn"], 0.0, 10),
        rollouts(BASE, ["pass", "checker_error", "checker_error", "checker_error"], 0.0, 30),
    )
    pressures = label_pressures(state.window, BASE)
    assert set(pressures) == {"recovery_failure", "pass"}
    assert pressures["recovery_failure"].prevalence == pytest.approx(10 / 40)
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=0)
    assert active_changes(rev, BASE) == {"recovery"} and lines(rev, BASE) == []
    # Counting unreached turns makes them a guideline target of their own.
    rev = evolve(Interface(), state, Closed(excluded_labels=["gt_error", "checker_error"]), CATEGORIES, 0)
    assert "unreached_turn" in lines(rev, BASE)


# --- guidelines ----------------------------------------------------------------------------------------------


def test_guidelines_top_three_by_pressure_with_deterministic_ties() -> None:
    state = state_of(
        rollouts(BASE, ["empty_turn_model_response"] * 2 + ["pass"] * 2, 0.0, 10),  # 20 turns, reward 0
        rollouts(BASE, ["response_mismatch"] * 2 + ["pass"] * 2, 0.0, 8),  # 16
        rollouts(BASE, ["missing_tool_call"] * 2 + ["pass"] * 2, 0.0, 8),  # 16: ties with response_mismatch
        rollouts(BASE, ["spurious_tool_call"] * 2 + ["pass"] * 2, 1.0, 8),  # 16 but reward 1: pressure 0
        rollouts(BASE, ["argument_mismatch"] + ["pass"] * 3, 0.0, 5),  # 5 < min_count
    )
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=0)
    assert lines(rev, BASE) == ["empty_turn_model_response", "missing_tool_call", "response_mismatch"]
    text = system_addendum(rev, BASE)
    assert text.index(GUIDELINES["empty_turn_model_response"]) < text.index(GUIDELINES["missing_tool_call"])
    assert "pass" not in lines(rev, BASE)
    rev2 = evolve(Interface(), state, Closed(max_guidelines=2), CATEGORIES, step=0)
    assert lines(rev2, BASE) == ["empty_turn_model_response", "missing_tool_call"]


def test_custom_guideline_texts() -> None:
    state = state_of(rollouts(BASE, ["my_new_label", "pass"], 0.0, 10))
    assert lines(evolve(Interface(), state, Closed(), CATEGORIES, 0) or Interface(), BASE) == []
    settings = Closed(guideline_texts={"my_new_label": "Do the new thing."})
    rev = evolve(Interface(), state, settings, CATEGORIES, step=0)
    assert system_addendum(rev, BASE).endswith("- Do the new thing.")


# --- scopes --------------------------------------------------------------------------------------------------


def test_decisions_are_per_category() -> None:
    state = state_of(
        rollouts(FUNC, ["invalid_tool_call", "pass"], 0.0, 10),
        rollouts(PARAM, ["argument_mismatch", "pass"], 0.0, 10),
        rollouts(BASE, ["pass", "pass"], 1.0, 10),
    )
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=4)
    assert active_changes(rev, FUNC) == {"no_invent_note"}
    assert active_changes(rev, PARAM) == {"required_markers", "enum_values"}
    assert active_changes(rev, BASE) == set()
    assert active_changes(rev, LONG) == set()
    assert system_addendum(rev, BASE) == ""
    assert set(rev.spec["scopes"]) == {FUNC, PARAM}
    docs = [{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "x": {"type": "string", "description": "X."}}, "required": ["x"]}}]
    assert render_tools(docs, rev, BASE) is docs
    assert render_tools(docs, rev, PARAM)[0]["parameters"]["properties"]["x"]["description"] == "[required] X."


def test_category_switch_limits_which_categories_evolve() -> None:
    state = state_of(
        rollouts(FUNC, ["invalid_tool_call", "pass"], 0.0, 10),
        rollouts(PARAM, ["argument_mismatch", "pass"], 0.0, 10),
    )
    rev = evolve(Interface(), state, Closed(categories=[PARAM]), CATEGORIES, step=0)
    assert set(rev.spec["scopes"]) == {PARAM}


def test_pooled_decisions_apply_to_every_category() -> None:
    state = state_of(
        rollouts(FUNC, ["recovery_failure", "pass"], 0.0, 5),
        rollouts(PARAM, ["recovery_failure", "pass"], 0.0, 5),
    )
    # Per category, 5 occurrences each stay under min_count 8; pooled, 10 are enough.
    assert evolve(Interface(), state, Closed(), CATEGORIES, step=0) is None
    rev = evolve(Interface(), state, Closed(per_category=False), CATEGORIES, step=0)
    assert set(rev.spec["scopes"]) == {"*"}
    for category in CATEGORIES:
        assert "recovery" in active_changes(rev, category)


def test_categories_default_to_those_in_the_state() -> None:
    state = state_of(rollouts(PARAM, ["argument_mismatch", "pass"], 0.0, 10))
    rev = evolve(Interface(), state, Closed(), [], step=0)
    assert set(rev.spec["scopes"]) == {PARAM}


# --- over time -----------------------------------------------------------------------------------------------


def test_changes_stick_through_a_new_epoch_and_guidelines_follow_the_window() -> None:
    settings = Closed()
    state = state_of(rollouts(PARAM, ["argument_mismatch", "missing_tool_call", "pass"], 0.0, 10), step=0, epoch=0)
    rev1 = evolve(Interface(), state, settings, CATEGORIES, step=0)
    assert active_changes(rev1, PARAM) == {"required_markers", "enum_values"}
    assert lines(rev1, PARAM) == ["missing_tool_call"]
    # New epoch, a handful of turns: too little evidence to touch anything.
    state_of(rollouts(PARAM, ["pass"], 1.0, 3), step=1, epoch=1, state=state)
    assert state.window.labelled_turns == 3
    assert evolve(rev1, state, settings, CATEGORIES, step=1) is None
    # Plenty of evidence that the agent now copes: the guidelines go, the affordances stay.
    state_of(rollouts(PARAM, ["pass", "pass"], 1.0, 10), step=2, epoch=1, state=state)
    rev2 = evolve(rev1, state, settings, CATEGORIES, step=2)
    assert rev2 is not None and (rev2.revision, rev2.parent, rev2.step) == (2, 1, 2)
    assert active_changes(rev2, PARAM) == {"required_markers", "enum_values"}
    assert lines(rev2, PARAM) == []
    assert any("guidelines cleared" in c for c in rev2.changes)
    # With a release threshold the affordances go too.
    rev3 = evolve(rev2, state, Closed(release_pressure=0.01), CATEGORIES, step=3)
    assert rev3 is not None and active_changes(rev3, PARAM) == set()
    assert rev3.spec == {}
    assert any(c.startswith(f"{PARAM}: -required_markers") for c in rev3.changes)


def test_totals_table_keeps_deciding_from_the_whole_run() -> None:
    state = state_of(rollouts(BASE, ["recovery_failure", "pass"], 0.0, 10), step=0, epoch=0)
    state_of(rollouts(BASE, ["pass", "pass"], 0.0, 10), step=1, epoch=1, state=state)
    assert evolve(Interface(), state, Closed(), CATEGORIES, step=1) is None
    rev = evolve(Interface(), state, Closed(table="totals"), CATEGORIES, step=1)
    assert "recovery" in active_changes(rev, BASE)


def test_a_second_revision_diffs_against_its_parent() -> None:
    settings = Closed(guidelines=False)
    state = state_of(rollouts(BASE, ["recovery_failure", "pass"], 0.0, 10), step=0)
    rev1 = evolve(Interface(), state, settings, CATEGORIES, step=0)
    state_of(rollouts(BASE, ["invalid_tool_call"] * 3 + ["pass"], 0.0, 10), step=1, state=state)
    rev2 = evolve(rev1, state, settings, CATEGORIES, step=1)
    assert rev2 is not None and rev2.parent == rev1.revision == 1
    assert rev2.driven_by == ["invalid_tool_call"]
    assert rev2.changes and rev2.changes[0].startswith(f"{BASE}: +no_invent_note (invalid_tool_call n=30")
    diff = rev2.diff(rev1)
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any('"no_invent_note"' in line for line in added)
    assert not any('"recovery"' in line for line in added)
    assert any("Never invent a tool" in line for line in added)  # the readable system text


# --- determinism and serialisation -----------------------------------------------------------------------------


def test_same_labels_in_any_order_give_the_same_revision() -> None:
    groups = [
        rollouts(FUNC, ["invalid_tool_call", "state_mismatch", "pass"], 0.0, 10),
        rollouts(PARAM, ["argument_mismatch", "recovery_failure"], 0.0, 9),
        rollouts(BASE, ["response_mismatch", "pass", "instance_mismatch"], 0.0, 12),
    ]
    pairs = [p for g in groups for p in g]
    revs = []
    for seed in range(3):
        shuffled = pairs[:]
        random.Random(seed).shuffle(shuffled)
        state = CapabilityState()
        labs = [lab for _, ls in shuffled for lab in ls]
        random.Random(seed + 10).shuffle(labs)
        state.update(0, 0, [t for t, _ in shuffled], labs)
        rev = evolve(Interface(), state, ALL_ON, list(reversed(CATEGORIES)) if seed else CATEGORIES, step=0)
        assert rev is not None
        revs.append(rev)
    dumps = {json.dumps(r.model_dump(mode="json")) for r in revs}
    assert len(dumps) == 1
    rev = revs[0]
    assert json.loads(json.dumps(rev.spec)) == rev.spec
    assert Interface.model_validate_json(rev.model_dump_json()) == rev
    # Specs list their entries sorted, so the stored JSON does not depend on dict order.
    for body in rev.spec["scopes"].values():
        assert body["changes"] == sorted(body["changes"])
    assert list(rev.spec["scopes"]) == sorted(rev.spec["scopes"])


def test_changes_and_driven_by_are_informative() -> None:
    state = state_of(rollouts(FUNC, ["invalid_tool_call", "pass"], 0.25, 10))
    rev = evolve(Interface(), state, Closed(), CATEGORIES, step=7)
    assert rev.driven_by == ["invalid_tool_call"]
    text = "\n".join(rev.changes)
    assert f"{FUNC}: +no_invent_note" in text
    for change in ("+required_markers", "+recovery", "guidelines"):  # one cue type per failure type
        assert f"{FUNC}: {change}" not in text
    assert "n=10 prevalence=0.50 mean_reward=0.25 pressure=0.38" in text
    assert rev.system_text.startswith(f"[{FUNC}]\n")


def test_settings_reject_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValidationError):
        Closed(mode="sometimes")
    with pytest.raises(ValidationError):
        Closed(min_count=8, min_prevalance=0.1)  # typo
    with pytest.raises(ValidationError):
        Closed(min_prevalence=1.5)
    assert EvolutionSettings.model_validate({"mode": "reference", "max_guidelines": 2}).max_guidelines == 2


# --- the defaults: the paper's configuration; the closed loop reads the round and can let go -------------------


def test_defaults_are_the_papers_active_configuration() -> None:
    defaults = EvolutionSettings()
    assert defaults.mode == "reference" and defaults.table == "round" and defaults.release_pressure == 0.02
    heavy = state_of(rollouts(PARAM, ["recovery_failure", "argument_mismatch"], 0.0, 20))
    rev = evolve(Interface(), heavy, defaults, CATEGORIES, step=0)
    assert scope(rev, "*") == {"changes": ["enum_values", "no_invent_note", "required_markers"]}


def test_the_round_profile_reads_only_the_latest_step_and_changes_switch_off_as_failures_fade() -> None:
    settings = EvolutionSettings(mode="closed_loop")  # round profile, release 0.02
    state = state_of(rollouts(BASE, ["recovery_failure", "pass"], 0.0, 10), step=0)
    rev1 = evolve(Interface(), state, settings, CATEGORIES, step=0)
    assert "recovery" in active_changes(rev1, BASE)
    # The next round has no recovery failures: the window still holds step 0's, the round does not.
    state_of(rollouts(BASE, ["pass", "pass"], 1.0, 10), step=1, state=state)
    assert state.window.count("recovery_failure", BASE) == 10 and state.last.count("recovery_failure", BASE) == 0
    rev2 = evolve(rev1, state, settings, CATEGORIES, step=1)
    assert rev2 is not None and "recovery" not in active_changes(rev2, BASE)
    assert any(c.startswith(f"{BASE}: -recovery") for c in rev2.changes)
    # Read over the epoch's window instead, step 0's failures keep it on.
    assert evolve(rev1, state, EvolutionSettings(mode="closed_loop", table="window"), CATEGORIES, step=1) is None


def test_guideline_texts_come_from_the_environment_and_the_recipe_overrides_them() -> None:
    from seal_platform_libs.toolenv.evolution import CueTexts

    state = state_of(rollouts(BASE, ["missing_tool_call", "pass"], 0.0, 10))
    cues = CueTexts(guidelines={"missing_tool_call": "Turn the lights on when asked."})
    rev = evolution.evolve(Interface(), state, Closed(), CATEGORIES, cues)
    assert system_addendum(rev, BASE).endswith("- Turn the lights on when asked.")
    assert GUIDELINES["missing_tool_call"] not in system_addendum(rev, BASE)
    own = Closed(guideline_texts={"missing_tool_call": "The recipe's line."})
    assert system_addendum(evolution.evolve(Interface(), state, own, CATEGORIES, cues), BASE).endswith(
        "- The recipe's line."
    )
    # No cues: BFCL's lines.
    assert GUIDELINES["missing_tool_call"] in system_addendum(
        evolution.evolve(Interface(), state, Closed(), CATEGORIES), BASE
    )


def test_recovery_hints_come_from_the_environment() -> None:
    from seal_platform_libs.toolenv.interface import DEFAULT_HINTS, recovery_hint

    rev = evolution.evolve(Interface(), state_of(rollouts(BASE, ["recovery_failure", "pass"], 0.0, 10)), Closed(),
                           CATEGORIES)
    error = "Error during execution: set_light() missing required argument: room"
    assert recovery_hint(rev, BASE, error) == DEFAULT_HINTS["missing_argument"].replace("{detail}", "room")
    own = {"missing_argument": "Hint: name the room ({detail})."}
    assert recovery_hint(rev, BASE, error, own) == "Hint: name the room (room)."
    assert recovery_hint(Interface(), BASE, error, own) is None  # revision 0: never a hint
