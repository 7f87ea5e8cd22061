"""The episode protocol, played on real BFCL tasks with scripted engines and the real tool workers."""

from __future__ import annotations

import json

import pytest
from bfcl_scripted_engine import GroundTruthEngine, ListEngine, gt_calls, task_mapper

from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, SamplingParams
from seal_platform_libs.toolenv.formats import REVEAL_TEXT, HermesFormat, ParsedCall
from seal_platform_plugins.bfcl import data
from seal_platform_plugins.bfcl.environment import BfclEnvironment
from seal_platform_plugins.bfcl.settings import BfclSettings

SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=64)
H = HermesFormat()


def tc(name: str, **arguments) -> str:
    return H.render_calls([ParsedCall(name, arguments)])


@pytest.fixture(scope="module")
def env():
    environment = BfclEnvironment(BfclSettings())
    yield environment
    environment.close()


def make_env(**settings) -> BfclEnvironment:
    return BfclEnvironment(BfclSettings(**settings))


def play(environment: BfclEnvironment, task_id: str, replies: list[str], interface: Interface | None = None):
    engine = ListEngine(replies)
    task = data.get_task(task_id)
    trajectory = environment.play(task, engine, interface or environment.pristine_interface(), SAMPLING)
    return trajectory, engine


def test_scripted_engines_satisfy_the_engine_protocol():
    assert isinstance(ListEngine(["x"]), RolloutEngine)


def test_system_prompt_lists_every_involved_class_but_not_held_out_tools(env):
    trajectory, _ = play(env, "multi_turn_miss_func_0", ["Done."])
    system = trajectory.messages[0]
    assert system.role == "system" and not system.trainable
    names = [
        json.loads(line)["function"]["name"]
        for line in system.content.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    ]
    assert "mv" in names and "post_tweet" in names  # GorillaFileSystem and TwitterAPI
    assert "sort" not in names  # held out until turn 3
    assert "cp" not in names  # the task's excluded_function


def test_message_roles_tokens_and_loss_mask(env):
    trajectory, engine = play(env, "multi_turn_base_0", [tc("ls"), "Here you go."])
    roles = [m.role for m in trajectory.messages]
    assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"]
    for message in trajectory.messages:
        assert message.trainable == (message.role == "assistant")
        if message.role == "assistant":
            assert message.token_ids and len(message.token_ids) == len(message.logprobs)
    assert trajectory.generated_tokens == sum(len(m.token_ids) for m in trajectory.messages if m.role == "assistant")
    # The engine saw the exact assistant message it produced, token ids included, in the next prompt.
    assert engine.prompts[1][2].token_ids == trajectory.messages[2].token_ids


def test_a_message_without_calls_advances_the_turn_and_the_episode_ends_after_the_last(env):
    trajectory, engine = play(env, "multi_turn_base_0", ["No."])
    n_turns = len(data.get_task("multi_turn_base_0").payload["question"])
    assert engine.calls == n_turns
    assert [m.role for m in trajectory.messages].count("user") == n_turns
    assert trajectory.finish == "completed" and trajectory.metadata["turns_reached"] == n_turns
    assert trajectory.reward == 0.0  # ground truth needs calls
    assert len(trajectory.turn_verdicts) == n_turns


def test_accepted_calls_run_in_order_and_each_result_is_an_observation(env):
    trajectory, _ = play(env, "multi_turn_base_0", [tc("cd", folder="document") + "\n" + tc("ls"), "ok"])
    tools = [m for m in trajectory.messages if m.role == "tool"]
    assert len(tools) == 2 and all(t.content.startswith("<tool_response>\n") for t in tools)
    assert "final_report.pdf" in tools[1].content  # ls ran inside the folder cd entered
    assert [(c.turn, c.name, c.rejected) for c in trajectory.tool_calls[:2]] == [(0, "cd", None), (0, "ls", None)]
    assert trajectory.tool_calls[0].result is not None


def test_malformed_call_rejects_the_whole_message_and_the_turn_does_not_advance(env):
    bad = tc("cd", folder="document") + '<tool_call>{"name": "mkdir", "arguments": {oops}}</tool_call>'
    trajectory, engine = play(env, "multi_turn_base_0", [bad, tc("ls"), "done"])
    messages = trajectory.messages
    assert [m.role for m in messages[:6]] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert "Error" in messages[3].content and "JSON" in messages[3].content
    # Nothing of the rejected message ran: ls still lists the root (no cd happened).
    assert "document" in messages[5].content and "final_report.pdf" not in messages[5].content
    rejected = [c for c in trajectory.tool_calls if c.rejected]
    assert [c.name for c in rejected] == ["cd"] and all(c.turn == 0 for c in rejected)
    assert trajectory.metadata["rejected_messages"] == 1
    # The turn did not advance on the rejection: the second generation still sees only the first user turn.
    assert [m.role for m in engine.prompts[1]].count("user") == 1


def test_unknown_and_held_out_tools_are_rejected_until_revealed(env):
    task = data.get_task("multi_turn_miss_func_0")
    # turns 0-2: the agent tries the held-out `sort` (rejected), then gives up; turn 3 reveals it.
    script = [
        tc("sort", file_name="final_report.pdf"),
        "I cannot sort.",
        "ok",
        "ok",
        tc("sort", file_name="final_report.pdf"),
        "sorted",
        "ok",
    ]
    trajectory, engine = play(env, task.id, script)
    calls = [(c.turn, c.name, bool(c.rejected)) for c in trajectory.tool_calls]
    assert calls[0] == (0, "sort", True)
    assert "unknown tool 'sort'" in trajectory.tool_calls[0].rejected
    assert (3, "sort", False) in calls
    reveal = [m for m in trajectory.messages if m.role == "user" and REVEAL_TEXT in m.content]
    assert len(reveal) == 1 and '"sort"' in reveal[0].content
    # The reveal is the fourth user turn (index 3), as the data says.
    users = [m for m in trajectory.messages if m.role == "user"]
    assert users[3] is reveal[0]


def test_step_limit_per_dialogue_and_per_turn():
    looping = [tc("ls")]  # calls forever
    with _ctx(make_env(max_steps=3)) as env3:
        trajectory, engine = play(env3, "multi_turn_base_0", looping)
        assert engine.calls == 3 and trajectory.finish == "step_limit"
        assert trajectory.metadata["turns_reached"] == 1
        assert [v.reached for v in trajectory.turn_verdicts] == [True, False, False, False]
        assert trajectory.reward == 0.0
        # A budget used up exactly at the end of a turn leaves the next turn unreached, not empty.
        trajectory, engine = play(env3, "multi_turn_base_0", [tc("pwd"), tc("pwd"), "ok", tc("ls")])
        assert engine.calls == 3 and trajectory.metadata["turns_reached"] == 1
    with _ctx(make_env(max_steps=2, step_limit_scope="turn")) as env_turn:
        # Two calls then an answer per turn fits a per-turn limit of 3 but would not fit 3 per dialogue.
        trajectory, engine = play(env_turn, "multi_turn_base_0", [tc("pwd"), "ok"] * 10)
        assert trajectory.finish == "completed" and engine.calls == 8


class _ctx:
    def __init__(self, environment: BfclEnvironment):
        self.environment = environment

    def __enter__(self) -> BfclEnvironment:
        return self.environment

    def __exit__(self, *exc) -> None:
        self.environment.close()


def test_context_limit_ends_the_episode():
    with _ctx(make_env(max_context_tokens=2000)) as small:
        # The long-context `document` folder lists ~1000 characters: a few of them outgrow 2000 tokens.
        trajectory, engine = play(
            small, "multi_turn_long_context_0", [tc("cd", folder="document")] + [tc("ls", a=True)] * 100
        )
        assert trajectory.finish == "context_limit" and engine.calls < 20
    with _ctx(make_env(max_context_tokens=256)) as tiny:
        trajectory, engine = play(tiny, "multi_turn_base_0", ["ok"])
        # The system prompt alone is over 256 tokens: no generation happens at all, no turn is reached.
        assert trajectory.finish == "context_limit" and engine.calls == 0
        assert trajectory.metadata["turns_reached"] == 0
        assert not any(v.reached for v in trajectory.turn_verdicts) and trajectory.reward == 0.0


def test_max_new_tokens_is_capped_by_settings_and_context_room():
    with _ctx(make_env(max_new_tokens=32)) as capped:
        _, engine = play(capped, "multi_turn_base_0", ["ok"])
        assert {s.max_new_tokens for s in engine.seen} == {32}


def test_observations_are_clipped_with_a_marker():
    with _ctx(make_env(max_observation_tokens=64)) as clipping:
        # The long-context `document` folder lists ~1000 characters of file names.
        trajectory, _ = play(
            clipping, "multi_turn_long_context_0", [tc("cd", folder="document") + tc("ls", a=True), "ok"]
        )
        observation = [m for m in trajectory.messages if m.role == "tool"][1].content
        assert "final_report.pdf" in observation
        assert "[observation clipped:" in observation
        # At most 64 tokens by the scripted engine's count (4 characters a token), marker included.
        body = observation.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
        assert 150 < len(body) <= 64 * 4


def test_python_format_round_trip_through_the_protocol():
    with _ctx(make_env(tool_call_format="python")) as py:
        tasks = data.load_tasks(["multi_turn_base", "multi_turn_miss_func"], split="eval", limit_per_category=3)
        result = py.evaluate(GroundTruthEngine(py.format), tasks, 0, task_mapper(2), 64)
        assert result.per_category == {"multi_turn_base": 100.0, "multi_turn_miss_func": 100.0}
        system = result.trajectories[0].messages[0].content
        assert "[func_name1(params_name1=params_value1" in system
        assistant = next(m for m in result.trajectories[0].messages if m.role == "assistant")
        assert assistant.content.startswith("[") and "<tool_call>" not in assistant.content


def test_python_format_binds_positional_arguments_by_doc_order():
    with _ctx(make_env(tool_call_format="python")) as py:
        trajectory, _ = play(py, "multi_turn_base_0", ["[cd('document'), ls()]", "ok"])
        assert trajectory.tool_calls[0].arguments == {"folder": "document"}
        assert "final_report.pdf" in [m for m in trajectory.messages if m.role == "tool"][1].content


def test_ground_truth_replay_passes_and_a_wrong_argument_fails(env):
    task = data.get_task("multi_turn_base_0")
    mapper = task_mapper(1)
    [good] = mapper(lambda t: env.play(t, GroundTruthEngine(H), env.pristine_interface(), SAMPLING), [task])
    assert good.reward == 1.0 and all(v.passed for v in good.turn_verdicts)
    first = gt_calls(task, 0)
    first[-1] = ParsedCall("mv", {"source": "final_report.pdf", "destination": "tmp"})
    trajectory, _ = play(env, task.id, [H.render_calls(first), "done"])
    assert trajectory.reward == 0.0 and not trajectory.turn_verdicts[0].passed


def test_pristine_interface_renders_the_official_presentation_byte_for_byte(env):
    task = data.get_task("multi_turn_base_0")
    trajectory, _ = play(env, task.id, ["ok"])
    assert trajectory.messages[0].content == H.system_prompt(data.tool_docs(task))
    assert trajectory.interface_revision == 0


def test_a_training_revision_changes_prompt_and_adds_recovery_hints(env):
    revision = Interface(
        revision=2, parent=1,
        spec={"version": 1, "scopes": {"*": {"changes": ["no_invent_note", "recovery", "required_markers"]}}},
    )
    trajectory, _ = play(env, "multi_turn_base_0", [tc("cd", folder="nowhere"), tc("nope"), "ok"], revision)
    system = trajectory.messages[0].content
    assert "[required]" in system and "Never invent a tool" in system
    assert trajectory.interface_revision == 2
    tools = [m.content for m in trajectory.messages if m.role == "tool"]
    assert "Hint:" in tools[0]  # a tool error
    assert "Hint:" in tools[1]  # an unknown tool
    pristine, _ = play(env, "multi_turn_base_0", [tc("cd", folder="nowhere"), tc("nope"), "ok"])
    assert all("Hint:" not in m.content for m in pristine.messages if m.role == "tool")


def test_malformed_model_output_never_crashes_the_episode(env):
    garbage = ["<tool_call>", "</tool_call>", '<tool_call>{"name": 5}</tool_call>', "\x00",
               '<tool_call>{"name": "cd", "arguments": {"folder": {"$ref": [1e999]}}}</tool_call>', "ok"]
    trajectory, _ = play(env, "multi_turn_base_0", garbage)
    assert trajectory.finish == "completed"
    assert trajectory.metadata["rejected_messages"] == 3


def test_a_lone_surrogate_in_an_argument_name_becomes_valid_text(env):
    """json.loads turns '\\ud800' into a lone surrogate; the backend's error quotes the argument name
    ("got an unexpected keyword argument '\\ud800'") and clip_observation encodes it before any Message
    exists: the observation is made valid text (U+FFFD) instead of raising UnicodeEncodeError."""
    trajectory, _ = play(
        env, "multi_turn_base_0", ['<tool_call>{"name": "cd", "arguments": {"\\ud800": 1}}</tool_call>', "ok"]
    )
    tool = next(m for m in trajectory.messages if m.role == "tool").content
    assert "unexpected keyword argument '\ufffd'" in tool
    tool.encode("utf-8")
    trajectory.model_dump_json().encode("utf-8")
