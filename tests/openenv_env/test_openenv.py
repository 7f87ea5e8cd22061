"""The openenv environment against real local servers speaking the OpenEnv protocol: the example thermostat
server (examples/openenv-thermostat/server.py) and a deliberately misbehaving one (bad_server.py)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from seal_platform.types import Generation, Interface, Message, SamplingParams
from seal_platform_libs.toolenv.schemadocs import render_docs, validate_arguments
from seal_platform_plugins.openenv.client import OpenEnvUnavailable, free_port
from seal_platform_plugins.openenv.diagnoser import diagnose
from seal_platform_plugins.openenv.environment import OpenEnvEnvironment, action_doc, load_tasks
from seal_platform_plugins.openenv.episode import build_prompt, run_episodes
from seal_platform_plugins.openenv.settings import OpenEnvSettings

EXAMPLE_SERVER = Path(__file__).resolve().parents[2] / "examples" / "openenv-thermostat" / "server.py"
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=64, stop=["</tool_call>"])
THERMOSTAT = {"observation_field": "message", "n_train": 4, "n_eval": 2, "timeout_s": 5}


class Node(BaseModel):  # a recursive action model (pydantic: a $ref into $defs inside its own definition)
    name: str
    children: list[Node] = []


class TreeAction(BaseModel):
    tree: Node


class Scripted:
    """Answers each conversation from its last message (``reply(last message, conversation)``)."""

    name = "scripted"

    def __init__(self, reply):
        self.reply = reply

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        return [Generation(text=self.reply(conv[-1].content, conv), token_ids=[1, 2], logprobs=[-0.1, -0.2])
                for conv in conversations]


# An agent that answers every turn with the same move (the bad servers' action schema).
MOVE_LEFT = Scripted(lambda last, conv: '<tool_call>{"name": "act", "arguments": {"move": "left"}}')


def _first_training_episode(env: OpenEnvEnvironment, agent: Scripted, interface: Interface | None = None):
    """The trajectory of ``agent`` on the environment's first training task."""
    (traj,) = run_episodes(env, agent, [(env.tasks("train")[0], "g", 0)], interface or Interface(), SAMPLING)
    return traj


def _call(direction: str, degrees: int, name: str = "act") -> str:
    call = json.dumps({"name": name, "arguments": {"direction": direction, "degrees": degrees}})
    return f"<tool_call>{call}</tool_call>"


def solver(last: str, conv) -> str:
    """Reads the room's temperature and the target from the observation and acts (at most 5 degrees a step)."""
    m = re.search(r"at (\d+) degrees\. Bring it to (\d+)", last)
    if not m:
        return "The room is on target."
    gap = int(m.group(2)) - int(m.group(1))
    return _call("up" if gap > 0 else "down", min(abs(gap), 5))


def env_for(url: str, **kw) -> OpenEnvEnvironment:
    return OpenEnvEnvironment(OpenEnvSettings.model_validate({"url": url, **THERMOSTAT, **kw}))


def test_the_action_schema_becomes_the_tool_doc(thermostat_url):
    env = env_for(thermostat_url)
    schema = env.doc["input_schema"]
    assert env.doc["name"] == "act" and set(schema["properties"]) == {"direction", "degrees"}  # metadata dropped
    plain = render_docs(env.docs())
    assert "act(direction, degrees): Turn the heat up or down." in plain and "Allowed values" not in plain
    evolved = render_docs(env.docs(), ["allowed_values", "required_markers"])
    assert 'direction (string), required: Which way to turn the heat. Allowed values: "up", "down".' in evolved
    assert "Allowed values" not in build_prompt(env, env.pristine_interface())[0].content
    # pydantic's enums arrive as $refs into $defs: inlined, so their allowed values can be shown
    doc = action_doc({"$defs": {"Move": {"enum": ["left", "right"], "type": "string"}},
                      "properties": {"move": {"$ref": "#/$defs/Move", "description": "Where."}}, "required": ["move"]},
                     "go", "")
    assert doc["input_schema"]["properties"]["move"] == {"enum": ["left", "right"], "type": "string",
                                                         "description": "Where."}


def test_a_recursive_action_model_keeps_the_definitions_its_refs_need():
    doc = action_doc(TreeAction.model_json_schema(), "act", "")
    tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    assert validate_arguments(doc, {"tree": tree}) is None
    assert validate_arguments(doc, {"tree": {"name": "a", "children": [{"name": "b", "children": [{}]}]}})
    assert "Node" in doc["input_schema"]["$defs"]
    assert "$defs" not in action_doc({"$defs": {"M": {"type": "string"}}, "properties": {"m": {"$ref": "#/$defs/M"}}},
                                     "go", "")["input_schema"]  # every ref inlined: nothing left to point to


@pytest.mark.parametrize("schema,why", [
    ({"definitions": [1], "properties": {"a": {}}}, "definitions is not an object"),
    ({"type": "object", "properties": [1]}, "properties are not an object"),
    ({"type": "object", "properties": {"a": {}}, "required": 5}, "required is not a list of names"),
])
def test_a_malformed_action_schema_is_one_paragraph(thermostat_url, schema, why):
    with pytest.raises(OpenEnvUnavailable) as info:
        env_for(thermostat_url, action_schema=schema)
    assert why in str(info.value) and "settings.openenv.action_schema" in str(info.value)


def test_a_malformed_schema_from_the_server_is_one_paragraph_naming_the_url(bad_server):
    url = bad_server("badschema")
    with pytest.raises(OpenEnvUnavailable) as info:
        OpenEnvEnvironment(OpenEnvSettings(url=url))
    assert f"{url}/schema" in str(info.value) and "properties are not an object" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_a_solver_passes_every_episode_and_sessions_are_isolated(thermostat_url, transport):
    env = env_for(thermostat_url, transport=transport)
    tasks = env.tasks("train")
    assert env.parallel_episodes() == (8 if transport == "ws" else 1)
    # The same task twice in one batch: on a shared environment the second would start from the first's end.
    episodes = [(tasks[0], "g0", 0), (tasks[0], "g0", 1), (tasks[1], "g1", 0)]
    trajs = run_episodes(env, Scripted(solver), episodes, Interface(), SAMPLING)
    assert [t.infra_failure for t in trajs] == [None] * 3
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0]
    assert trajs[0].messages[1:] == trajs[1].messages[1:]  # same seed, same start, same episode
    assert all(v.passed for t in trajs for v in t.turn_verdicts) and trajs[0].metadata["env_done"] is True
    assert (
        json.loads(trajs[0].metadata["final_state"])["temperature"]
        == json.loads(trajs[0].metadata["final_state"])["target"]
    )
    assert {label.label for label in diagnose(trajs)} == {"pass"}


def test_mistakes_are_shown_to_the_agent_labelled_and_never_raised(thermostat_url):
    env = env_for(thermostat_url, max_steps=6)
    task = env.tasks("eval")[0]
    script = iter([
        "<tool_call>__import__('os').system('rm -rf /')</tool_call>",  # not JSON
        _call("up", 1, name="rm"),  # another tool
        _call("sideways", 1),  # not an allowed value: refused before the server
        "<tool_call>" + "[" * 60 + "]" * 60 + "</tool_call>",  # nested too deeply
        _call("up", 1) * 3,  # more than one call in a message
        "I would rather not.",  # no call: the episode ends
    ])
    (traj,) = run_episodes(env, Scripted(lambda last, conv: next(script)), [(task, "g", 0)], Interface(), SAMPLING)
    assert traj.infra_failure is None and traj.reward == 0.0 and traj.finish == "no_action"
    tool_msgs = [m.content for m in traj.messages if m.role == "tool"]
    assert len(tool_msgs) == 5 and all(m.startswith("Error:") for m in tool_msgs)
    assert "is not one of ['up', 'down']" in tool_msgs[2]
    assert [lab.label for lab in diagnose([traj])] == ["invalid_tool_call", "invalid_tool_call", "invalid_arguments",
                                                       "invalid_tool_call", "invalid_tool_call",
                                                       "empty_turn_model_response"]
    assert json.loads(traj.metadata["final_state"])["step_count"] == 0  # nothing reached the environment


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_an_action_the_server_refuses_is_shown_and_labelled(thermostat_url, transport):
    loose = {"type": "object", "properties": {"direction": {"type": "string"}, "degrees": {"type": "integer"}},
             "required": ["direction", "degrees"]}
    env = env_for(thermostat_url, transport=transport, action_schema=loose, max_steps=1)
    traj = _first_training_episode(env, Scripted(lambda last, conv: _call("up", 9)))
    assert traj.infra_failure is None and traj.finish == "step_limit"
    assert traj.tool_calls[0].error.startswith("Error: the environment refused the action:")
    assert "less than or equal to 5" in traj.tool_calls[0].error
    assert [lab.label for lab in diagnose([traj])] == ["action_refused"]


def test_per_step_rewards_are_per_turn_verdicts(thermostat_url):
    env = env_for(thermostat_url, reward_mode="per_step", max_steps=4, n_train=40)

    def gap(task) -> int:
        session = env.open_session()
        obs = session.reset(task.payload["reset"]).observation
        session.close()
        return abs(obs["target"] - obs["temperature"])

    task = next(t for t in env.tasks("train") if 2 <= gap(t) <= 4)  # reached in 2 to 4 steps of one degree

    def slow(last, conv):  # one degree at a time towards the target: unrewarded steps, then the rewarded one
        m = re.search(r"at (\d+) degrees\. Bring it to (\d+)", last)
        return _call("up" if int(m.group(2)) > int(m.group(1)) else "down", 1) if m else "done"

    (traj,) = run_episodes(env, Scripted(slow), [(task, "g", 0)], Interface(), SAMPLING)
    labels = [lab.label for lab in diagnose([traj])]
    assert labels[0] == "unrewarded_step" and all(v.checks["kind"] == "stepped" for v in traj.turn_verdicts)
    assert labels == ["unrewarded_step"] * (len(labels) - 1) + ["pass"] and traj.reward == 1.0
    final = env_for(thermostat_url, max_steps=4)
    (traj2,) = run_episodes(final, Scripted(slow), [(task, "g", 0)], Interface(), SAMPLING)
    assert traj2.reward == 1.0 and {lab.label for lab in diagnose([traj2])} == {"pass"}
    (traj3,) = run_episodes(env_for(thermostat_url, max_steps=1), Scripted(slow), [(task, "g", 0)], Interface(),
                            SAMPLING)
    assert traj3.reward == 0.0 and [lab.label for lab in diagnose([traj3])] == ["failed_episode"]


def test_an_unreachable_server_is_one_paragraph_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(OpenEnvUnavailable) as info:
        OpenEnvEnvironment(OpenEnvSettings(url=url))
    assert url in str(info.value) and "\n" not in str(info.value) and "settings.openenv" in str(info.value)


@pytest.mark.parametrize("mode,transport,words", [
    ("garbage", "ws", "not JSON"), ("garbage", "http", "not JSON"),
    ("malformed", "ws", "malformed reset answer"), ("malformed", "http", "malformed reset answer"),
    ("nan", "ws", "malformed step answer"), ("bigreward", "ws", "malformed step answer"),
    ("bigreward", "http", "malformed step answer"), ("crash", "ws", "step"), ("crash", "http", "step"),
    ("hang", "ws", "did not answer step within 1 s"), ("hang", "http", "did not answer step within 1 s"),
])
def test_a_failing_server_masks_the_episode_and_names_the_url(bad_server, mode, transport, words):
    url = bad_server(mode)
    env = OpenEnvEnvironment(OpenEnvSettings(url=url, transport=transport, timeout_s=1, n_train=2, n_eval=1))
    tasks = env.tasks("train")
    start = time.monotonic()
    trajs = run_episodes(env, MOVE_LEFT, [(t, f"g{i}", 0) for i, t in enumerate(tasks)], Interface(), SAMPLING)
    assert time.monotonic() - start < 60
    assert len(trajs) == 2 and all(t.finish == "infra_failure" for t in trajs)
    assert url in trajs[0].infra_failure and words in trajs[0].infra_failure, trajs[0].infra_failure
    assert diagnose(trajs) == []


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_a_server_error_on_a_step_is_a_refused_action(bad_server, transport):
    env = OpenEnvEnvironment(OpenEnvSettings(url=bad_server("error"), transport=transport, max_steps=2, n_train=1))
    traj = _first_training_episode(env, MOVE_LEFT)
    assert traj.infra_failure is None and "move must be 'left' today" in traj.tool_calls[0].error
    assert [lab.label for lab in diagnose([traj])] == ["action_refused", "action_refused"]


def test_hostile_observations_are_clipped_valid_text(bad_server):
    env = OpenEnvEnvironment(OpenEnvSettings(url=bad_server("hostile"), max_observation_chars=300, max_steps=1,
                                             n_train=1))
    traj = _first_training_episode(env, MOVE_LEFT)
    shown = traj.messages[-1].content
    assert traj.infra_failure is None and len(shown) < 400 and shown.endswith("[... cut at 300 characters]")
    assert "\x1b" not in shown and "\x00" not in shown
    shown.encode("utf-8")
    json.dumps(traj.model_dump())  # storable


def test_a_local_server_is_started_from_the_recipe_and_stopped():
    server = {"command": "python", "args": [str(EXAMPLE_SERVER), "--port", "{port}"]}
    env = OpenEnvEnvironment(OpenEnvSettings.model_validate({"server": server, **THERMOSTAT}))
    process = env._server.process
    assert env.url.startswith("http://127.0.0.1:") and process.poll() is None
    (traj,) = run_episodes(env, Scripted(solver), [(env.tasks("eval")[0], "g", 0)], Interface(), SAMPLING)
    assert traj.reward == 1.0
    env.close()
    assert process.poll() is not None  # stopped with the environment


def test_a_local_server_that_fails_to_start_is_one_paragraph():
    server = {"command": "python", "args": ["-c", "import sys; print('no port for me'); sys.exit(3)"]}
    with pytest.raises(OpenEnvUnavailable) as info:
        OpenEnvEnvironment(OpenEnvSettings(server=server))
    text = str(info.value)
    assert "exited with status 3" in text and "no port for me" in text and "\n" not in text


def test_task_files_and_settings_are_checked(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "reset": {"seed": 1}}\n{"id": "b", "rest": {}}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: not a valid task"):
        load_tasks(path)
    path.write_text('{"id": "a", "reset": {"seed": 1}, "category": "easy"}\n{"id": "e", "split": "eval"}\n')
    assert [(t.id, t.split, t.category, t.payload) for t in load_tasks(path)] == [
        ("a", "train", "easy", {"reset": {"seed": 1}}), ("e", "eval", "default", {"reset": {}})]
    with pytest.raises(ValueError, match="either url"):
        OpenEnvSettings(url="http://127.0.0.1:1", server={"command": sys.executable})
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenEnvSettings(url="file:///etc/passwd")


def test_the_splits_of_the_task_file_or_the_seeds_are_checked_with_the_recipe(tmp_path):
    """The openenv environment declares its splits (the task file's; without one the seeds' train and eval): a
    split it lacks is a recipe problem, found before a run's row is written or its server is contacted."""
    from seal_platform.errors import ConfigError
    from seal_platform.planning import plan_recipe

    with pytest.raises(ConfigError) as raised:
        plan_recipe("openenv-example", ["evaluation.split=test"])
    assert "evaluation.split: environment 'openenv' has no split 'test'; its splits: eval, train" in str(raised.value)
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "reset": {"seed": 1}}\n{"id": "h", "split": "hard", "reset": {"seed": 2}}\n')
    assert plan_recipe("openenv-example", [f"settings.openenv.tasks={path}", "evaluation.split=hard"])
    with pytest.raises(ConfigError) as raised:
        plan_recipe("openenv-example", [f"settings.openenv.tasks={path}"])
    assert "evaluation.split: environment 'openenv' has no split 'eval'; its splits: hard, train" in str(raised.value)


def test_the_environment_refuses_to_start_without_a_server(tmp_path):
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.errors import ConfigError
    from seal_platform_plugins.openenv.plugin import _build

    ctx = RunContext(config=RunConfig(environment="openenv"), run_id="r", run_dir=tmp_path,
                     settings={"openenv": OpenEnvSettings()})
    with pytest.raises(ConfigError, match="settings.openenv.url .* or settings.openenv.server"):
        _build(ctx)


def test_a_recipe_with_neither_url_nor_server_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """Refused with the recipe's other problems (`config validate`, `run`), not when the run builds the
    environment after its row is written."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.errors import ConfigError
    from seal_platform.planning import plan_recipe

    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    monkeypatch.chdir(tmp_path)  # a run would write its folder under ./runs
    wanted = ("settings.openenv: environment openenv needs settings.openenv.url (a running OpenEnv server) or "
              "settings.openenv.server (a local one to start), and the recipe sets neither (it names openenv in "
              "environment) (set settings.openenv.url to http://host:port, or settings.openenv.server to the command "
              "that starts one; see docs/openenv.md and recipes/openenv-example.yaml)")
    checked = CliRunner().invoke(cli, ["config", "validate", "openenv-example", "settings.openenv.server=null"])
    assert checked.exit_code == 1 and wanted in " ".join(checked.output.split()), checked.output
    store = tmp_path / "store.sqlite"
    run = CliRunner().invoke(cli, ["run", "openenv-example", "settings.openenv.server=null", "--store", str(store),
                                   "--quiet"])
    assert run.exit_code == 2 and wanted in " ".join(run.output.split()), run.output
    assert not store.exists() and not (tmp_path / "runs").exists()  # no run row, no run folder
    # A benchmark on openenv needs one too; a url (or the recipe's server) is enough.
    benchmark = "evaluation.benchmarks=[{environment: openenv, name: thermostat}]"
    with pytest.raises(ConfigError, match=r"sets neither \(it names openenv in environment, "
                                          r"evaluation\.benchmarks\[0\]\.environment\)"):
        plan_recipe("openenv-example", ["settings.openenv.server=null", benchmark])
    assert plan_recipe("openenv-example", ["settings.openenv.server=null", "settings.openenv.url=http://127.0.0.1:1"])
    assert plan_recipe("openenv-example", [benchmark])


def test_labels_drive_action_doc_changes_and_evaluation_stays_pristine(thermostat_url):
    from seal_platform.capability import CapabilityState
    from seal_platform.types import Trajectory, TurnLabel
    from seal_platform_plugins.openenv.evolution import evolve

    def labelled(label: str) -> CapabilityState:
        state = CapabilityState()
        trajs = [Trajectory(task_id=f"t{i}", category="default", group=f"g{i}", reward=0.0) for i in range(12)]
        state.update(0, 0, trajs, [TurnLabel(trajectory_id=t.id, turn=0, label=label, source="openenv") for t in trajs])
        return state

    env = env_for(thermostat_url, max_steps=2)
    pristine = env.pristine_interface()
    assert evolve(pristine, CapabilityState(), env.settings.evolution) is None
    assert evolve(pristine, labelled("failed_episode"), env.settings.evolution) is None  # nothing a doc can say
    new = evolve(pristine, labelled("invalid_arguments"), env.settings.evolution)
    assert new.spec["changes"] == ["allowed_values", "recovery_hints", "required_markers"]
    assert new.driven_by == ["invalid_arguments"]
    assert 'Allowed values: "up", "down".' in build_prompt(env, new)[0].content
    assert "Allowed values" not in build_prompt(env, pristine)[0].content
    traj = _first_training_episode(env, Scripted(lambda last, conv: _call("sideways", 1)), new)
    assert 'Hint: act requires direction, degrees; direction must be one of "up", "down". Try again.' in \
        traj.messages[-1].content


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_a_server_that_dies_mid_evaluation_is_scored_as_an_infrastructure_failure(bad_server, transport, tmp_path):
    """The plugin's evaluate and the core's check of its result together, against a server that answers the
    first episode's step and exits on the second (before: 'an EvalResult of 1 task(s) for 3 task(s)')."""
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.stages import evaluate_with
    from seal_platform_plugins.openenv.plugin import evaluate

    settings = OpenEnvSettings(url=bad_server("dies"), transport=transport, timeout_s=2, n_eval=3,
                               max_parallel_episodes=1)
    env = OpenEnvEnvironment(settings)
    tasks = env.tasks("eval")
    ctx = RunContext(
        config=RunConfig(environment="openenv"), run_id="r", run_dir=tmp_path, settings={"openenv": settings}
    )
    engine = Scripted(lambda last, conv: '<tool_call>{"name": "act", "arguments": {"move": "left"}}</tool_call>')
    result = evaluate_with(evaluate, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=0, plugin="openenv")
    assert result.n_tasks == 3 and result.n_infra_failures == 2
    assert [t.task_id for t in result.trajectories if not t.infra_failure] == [tasks[0].id]
    assert result.per_category == {"default": 100.0}


def test_episodes_never_open_more_sessions_than_the_server_serves(bad_server):
    """openenv-core's template serves one session unless its app says more; the recipe asked for 8 at once
    (before: 7 of 8 episodes were refused, and in evaluation the run crashed)."""
    url = bad_server("one_session")
    env = OpenEnvEnvironment(OpenEnvSettings(url=url, n_train=4, n_eval=1, max_parallel_episodes=8))
    assert env.parallel_episodes() == 1
    tasks = env.tasks("train")
    engine = Scripted(lambda last, conv: '<tool_call>{"name": "act", "arguments": {"move": "left"}}</tool_call>')
    trajs = run_episodes(env, engine, [(t, f"g{i}", j) for i, t in enumerate(tasks) for j in range(2)], Interface(),
                         SAMPLING)
    assert (
        len(trajs) == 8
        and not [t.infra_failure for t in trajs if t.infra_failure]
        and {t.reward for t in trajs} == {1.0}
    )
    told = OpenEnvEnvironment(OpenEnvSettings(url=url, n_train=1, max_parallel_episodes=8, max_sessions=1))
    assert told.parallel_episodes() == 1  # the recipe's limit: no sessions opened to find it out


def test_a_server_that_refuses_every_session_is_one_paragraph_before_the_run(bad_server):
    url = bad_server("full")
    with pytest.raises(OpenEnvUnavailable) as info:
        OpenEnvEnvironment(OpenEnvSettings(url=url, n_train=1))
    text = str(info.value)
    assert url in text and "refuses every session" in text and "max_concurrent_envs" in text and "\n" not in text


def test_an_answer_that_trickles_in_is_bounded_by_wall_clock_time(bad_server):
    """Each read of the trickled /step answer comes within httpx's read timeout; the whole answer (about 11 s)
    does not come within timeout_s (before: each episode was held until the last byte, ~35x timeout_s)."""
    env = OpenEnvEnvironment(OpenEnvSettings(url=bad_server("trickle"), transport="http", timeout_s=1.5, n_train=1))
    start = time.monotonic()
    traj = _first_training_episode(env, MOVE_LEFT)
    assert time.monotonic() - start < 8
    assert traj.infra_failure and "did not finish its answer to step within 1.5 s" in traj.infra_failure


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_finite_step_rewards_whose_sum_overflows_mask_the_episode(bad_server, transport):
    env = OpenEnvEnvironment(OpenEnvSettings(url=bad_server("hugereward"), transport=transport, reward_mode="per_step",
                                             binary_reward=False, max_steps=3, n_train=2))
    trajs = run_episodes(env, MOVE_LEFT, [(t, f"g{i}", 0) for i, t in enumerate(env.tasks("train"))], Interface(),
                         SAMPLING)
    assert all(t.infra_failure and "not a finite number" in t.infra_failure for t in trajs)
    json.dumps([t.model_dump() for t in trajs], allow_nan=False)  # storable


def test_config_validate_reads_every_line_of_the_task_file(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "reset": {"seed": 1}}\n{"id": "b", "rest": {}}\n')
    monkeypatch.chdir(tmp_path)
    for path, said in ((tasks, "tasks.jsonl:2: not a valid task"), (tmp_path / "gone.jsonl", "not found")):
        result = CliRunner().invoke(cli, ["config", "validate", "openenv-example", f"settings.openenv.tasks={path}"])
        assert result.exit_code == 1 and "settings.openenv.tasks" in result.output, result.output
        assert said in " ".join(result.output.split()), result.output
