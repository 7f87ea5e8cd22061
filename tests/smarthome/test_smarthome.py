"""The smarthome environment: seeded tasks, the episode protocol, the verifier, the diagnoser and the
interface evolution it shares with BFCL."""

from __future__ import annotations

import json

import pytest
from smarthome_scripted import ScriptedEngine, call_text, gt_replies

from seal_platform.capability import CapabilityState
from seal_platform.types import Interface, SamplingParams, Trajectory, TurnLabel
from seal_platform_plugins.smarthome.diagnoser import diagnose
from seal_platform_plugins.smarthome.environment import SmartHomeEnvironment
from seal_platform_plugins.smarthome.episode import build_prompt, parse_calls, run_episodes
from seal_platform_plugins.smarthome.plugin import evolve_interface
from seal_platform_plugins.smarthome.settings import SmartHomeSettings
from seal_platform_plugins.smarthome.tools import ToolError, check_arguments

SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=48)


def _env(**kw) -> SmartHomeEnvironment:
    return SmartHomeEnvironment(SmartHomeSettings(n_train=24, n_eval=12, **kw))


def _play(env, tasks, reply, interface=None, attempts=2):
    engine = ScriptedEngine(reply)
    trajs = run_episodes(engine, [(t, t.id, 0) for t in tasks], interface or env.pristine_interface(), SAMPLING,
                         attempts, True)
    return trajs, engine


def test_tasks_are_seeded_multi_turn_and_split():
    env = _env()
    train, again, evals = env.tasks("train"), _env().tasks("train"), env.tasks("eval")
    assert [t.model_dump() for t in train] == [t.model_dump() for t in again]
    assert {t.category for t in train} == {"direct", "paraphrase"}
    assert all(2 <= len(t.payload["turns"]) <= 3 for t in train + evals)
    assert {json.dumps(t.payload, sort_keys=True) for t in train}.isdisjoint(
        json.dumps(t.payload, sort_keys=True) for t in evals)
    other = SmartHomeEnvironment(SmartHomeSettings(n_train=24, seed=7)).tasks("train")
    assert [t.payload for t in other] != [t.payload for t in train]
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("test")


def test_ground_truth_passes_and_every_turn_is_labelled_pass():
    env = _env()
    tasks = env.tasks("eval")
    gt = gt_replies(tasks)
    trajs, engine = _play(env, tasks, lambda user, conv: call_text(gt[user]))
    assert all(t.reward == 1.0 for t in trajs)
    assert engine.batches[0] == len(tasks)  # lock step: one batch per round
    labels = diagnose(trajs)
    assert len(labels) == sum(len(t.payload["turns"]) for t in tasks)
    assert {lab.label for lab in labels} == {"pass"}


def test_no_call_and_hostile_text_fail_with_their_labels():
    env = _env()
    tasks = env.tasks("eval")[:4]
    trajs, _ = _play(env, tasks, lambda user, conv: "Sure, done!")
    assert all(t.reward == 0.0 for t in trajs)
    assert {lab.label for lab in diagnose(trajs)} == {"empty_turn_model_response"}
    hostile = "<tool_call>__import__('os').system('echo pwned')</tool_call>"
    trajs, _ = _play(env, tasks, lambda user, conv: hostile)
    assert all(t.reward == 0.0 for t in trajs)
    assert {lab.label for lab in diagnose(trajs)} == {"invalid_tool_call"}
    assert parse_calls(hostile)[1].startswith("Could not parse")


def test_wrong_arguments_and_extra_calls_fail_the_state_check():
    env = _env()
    tasks = env.tasks("eval")[:6]
    gt = gt_replies(tasks)

    def swap_tool(user, conv):
        call = gt[user]
        if call["name"] == "lock_door":
            return call_text({"name": "set_light", "arguments": {"room": "kitchen", "state": "on"}})
        other = {"lock_door": "front", "set_light": "off"}
        args = dict(call["arguments"])
        key = next(iter(args))
        if call["name"] == "set_thermostat":
            args["temperature"] = 16 if args["temperature"] != 16 else 17
        elif call["name"] == "set_light":
            args["state"] = "on" if args["state"] == "off" else other["set_light"]
        else:
            args[key] = "kitchen" if args[key] != "kitchen" else "office"
        return call_text({"name": call["name"], "arguments": args})

    trajs, _ = _play(env, tasks, swap_tool)
    labels = {lab.label for lab in diagnose(trajs)}
    assert all(t.reward == 0.0 for t in trajs)
    assert labels <= {"argument_mismatch", "missing_tool_call", "state_mismatch", "pass"}
    assert "argument_mismatch" in labels


def test_missing_argument_is_an_error_the_agent_can_recover_from_with_a_hint():
    env = _env()
    tasks = env.tasks("eval")[:4]
    gt = gt_replies(tasks)

    def forgetful(user, conv):
        call = gt[user]
        if conv[-1].role == "tool" and "Error" in conv[-1].content:
            return call_text(call)  # second attempt: the right call
        args = dict(call["arguments"])
        args.pop(next(iter(args)))
        return call_text({"name": call["name"], "arguments": args})

    trajs, _ = _play(env, tasks, forgetful)
    assert all(t.reward == 1.0 for t in trajs)
    tool_msgs = [m.content for m in trajs[0].messages if m.role == "tool"][2:]
    assert any("missing required argument" in c for c in tool_msgs)
    assert not any("Hint:" in c for c in tool_msgs)  # revision 0 gives no recovery feedback
    recovery = Interface(revision=1, spec={"version": 1, "scopes": {"*": {"changes": ["recovery"]}}})
    trajs, _ = _play(env, tasks, forgetful, interface=recovery)
    assert any("Hint: the call is missing a required argument" in m.content for m in trajs[0].messages)
    # With a single attempt the refused call stands: the turn fails, an argument mismatch (the paper's Table 5
    # puts it before recovery failure), with one reference label whatever came first.
    trajs, _ = _play(env, tasks, forgetful, attempts=1)
    assert all(t.reward == 0.0 for t in trajs)
    labels = [lab for lab in diagnose(trajs) if lab.turn == 1]
    assert {lab.label for lab in labels} == {"argument_mismatch"}
    assert {lab.reference_label for lab in labels} == {"state_mismatch"}
    assert "missing required argument" in labels[0].rationale


def test_arguments_are_validated_against_the_schema():
    with pytest.raises(ToolError, match="missing required argument: state"):
        check_arguments("set_light", {"room": "kitchen"})
    with pytest.raises(ToolError, match="unexpected keyword argument 'colour'"):
        check_arguments("set_light", {"room": "kitchen", "state": "on", "colour": "red"})
    with pytest.raises(ToolError, match="invalid value 'living room'"):
        check_arguments("play_music", {"room": "living room", "genre": "jazz"})
    with pytest.raises(ToolError, match="must be an integer"):
        check_arguments("set_thermostat", {"room": "office", "temperature": "21"})
    with pytest.raises(ToolError, match="between 16 and 28"):
        check_arguments("set_thermostat", {"room": "office", "temperature": 40})
    with pytest.raises(ToolError, match="unknown tool"):
        check_arguments("open_window", {})


@pytest.mark.parametrize("room", ["9" * 5000,  # an int of more digits than Python converts (4300)
                                  "[" * 100_000,  # deeper than the parser's recursion
                                  "[" * 50 + "]" * 50],  # valid JSON, nested deeper than a call may be
                         ids=["long-int", "deeper-than-recursion", "deeper-than-allowed"])
def test_a_call_json_cannot_read_safely_is_a_parse_error_not_an_exception(room):
    calls, error = parse_calls(f'<tool_call>{{"name": "set_light", "arguments": {{"room": {room}}}}}</tool_call>')
    assert calls == [] and error


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_integer_argument_is_an_error_the_agent_sees(number):
    env = _env()
    tasks = env.tasks("eval")[:2]
    call = '<tool_call>{"name": "set_thermostat", "arguments": {"room": "kitchen", "temperature": %s}}</tool_call>'
    trajs, _ = _play(env, tasks, lambda user, conv: call % number)
    assert all(t.reward == 0.0 for t in trajs)
    errors = [c.error for t in trajs for c in t.tool_calls]
    assert errors and all(e and "temperature must be an integer" in e for e in errors)


def _labelled_state(env, label: str, n: int = 12) -> CapabilityState:
    state = CapabilityState()
    trajs = [Trajectory(task_id=f"t{i}", category=cat, group=f"g{i}", reward=0.0)
             for i in range(n) for cat in ("direct", "paraphrase")]
    labels = [TurnLabel(trajectory_id=t.id, turn=0, label=label, source="smarthome") for t in trajs]
    state.update(0, 0, trajs, labels)
    return state


class _Ctx:
    def __init__(self, settings):
        self.settings = {"smarthome": settings}

    def settings_for(self, name, model=None):
        return self.settings[name]


def test_the_default_is_the_papers_static_affordances_from_the_first_call():
    env = _env()
    assert env.settings.evolution.mode == "reference"
    new = evolve_interface(ctx=_Ctx(env.settings), environment=env, interface=env.pristine_interface(),
                           state=CapabilityState(), step=0)
    assert new is not None and new.spec["scopes"] == {"*": {"changes": ["enum_values", "no_invent_note",
                                                                        "required_markers"]}}
    trained = build_prompt(env.tasks("eval")[1], new, 2)[0].content
    assert "[required]" in trained and "Allowed values" in trained and "Guidelines" not in trained


def test_diagnoses_drive_training_interface_changes_and_evaluation_stays_pristine():
    env = _env(evolution={"mode": "closed_loop", "min_count": 4, "min_evidence": 8})
    task = env.tasks("eval")[1]
    ctx = _Ctx(env.settings)
    pristine = env.pristine_interface()
    assert evolve_interface(ctx=ctx, environment=env, interface=pristine, state=CapabilityState(), step=0) is None
    new = evolve_interface(ctx=ctx, environment=env, interface=pristine,
                           state=_labelled_state(env, "argument_mismatch"), step=1)
    assert new is not None and "argument_mismatch" in new.driven_by  # the core numbers it (adopt_interface)
    trained = build_prompt(task, new, 2)[0].content
    plain = build_prompt(task, pristine, 2)[0].content
    assert "Allowed values: kitchen, bedroom, living_room, office." in trained
    assert "[required]" in trained and "Guidelines" not in trained  # a constraint cue, not a guideline
    assert "Allowed values" not in plain and "[required]" not in plain
    recovery = evolve_interface(ctx=ctx, environment=env, interface=pristine,
                                state=_labelled_state(env, "recovery_failure"), step=1)
    assert any("recovery" in c for c in recovery.changes)
    # Guideline lines are the smart home's own, not BFCL's.
    from seal_platform_plugins.smarthome.cues import CUES

    missing = evolve_interface(ctx=ctx, environment=env, interface=pristine,
                               state=_labelled_state(env, "missing_tool_call"), step=1)
    text = build_prompt(task, missing, 2)[0].content
    assert CUES.guidelines["missing_tool_call"] in text and "(argument, path, login)" not in text
