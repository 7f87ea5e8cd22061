"""The mcp environment against the real example server process (examples/mcp-inventory/server.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from seal_platform.types import Generation, Interface, Message, SamplingParams
from seal_platform_libs.toolenv.jsoncalls import clip_text, parse_calls
from seal_platform_libs.toolenv.schemadocs import render_docs, validate_arguments
from seal_platform_plugins.mcp.diagnoser import diagnose
from seal_platform_plugins.mcp.environment import MCPEnvironment
from seal_platform_plugins.mcp.episode import build_prompt, run_episodes
from seal_platform_plugins.mcp.settings import MCPSettings

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "examples/mcp-inventory/server.py")
TASKS = str(ROOT / "examples/mcp-inventory/tasks.jsonl")


def settings(env: dict | None = None, **kw) -> MCPSettings:
    server = {"name": "inventory", "command": sys.executable, "args": [SERVER], "env": env or {}, "timeout_s": 3}
    return MCPSettings.model_validate({"servers": [server], "tasks": TASKS, "hidden_tools": ["reset"], **kw})


class Scripted:
    """Answers each conversation from its last user message (the ground truth, or a chosen reply)."""

    name = "scripted"

    def __init__(self, reply):
        self.reply = reply

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conv in conversations:
            user = next(m.content for m in reversed(conv) if m.role == "user")
            out.append(Generation(text=self.reply(user, conv), token_ids=[1, 2], logprobs=[-0.1, -0.2]))
        return out


def gt_engine(tasks) -> Scripted:
    gt = {turn["user"]: turn["calls"][0] for t in tasks for turn in t.payload["turns"]}
    return Scripted(lambda user, conv: (f"<tool_call>{json.dumps(gt[user])}</tool_call>"
                                        if conv[-1].role == "user" else "done"))


SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=64, stop=["</tool_call>"])


@pytest.fixture(scope="module")
def env() -> MCPEnvironment:
    return MCPEnvironment(settings())


def test_tools_are_listed_and_schemas_rendered(env):
    docs = env.docs()
    names = [d["name"] for d in docs]
    assert names == ["get_item", "list_items", "add_stock", "remove_stock", "move_item", "set_status"]  # reset hidden
    plain = render_docs(docs)
    assert "move_item(name, location)" in plain and "Allowed values" not in plain and "required" not in plain
    evolved = render_docs(docs, ["allowed_values", "required_markers"])
    assert 'location (string), required Allowed values: "warehouse", "store", "backroom".' in evolved
    assert 'location (string) Allowed values: "warehouse", "store", "backroom".' in evolved  # list_items: anyOf enum
    pristine = build_prompt(env, env.tasks("eval")[0], env.pristine_interface())[0].content
    assert "Allowed values" not in pristine


def test_arguments_are_validated_against_the_schema(env):
    doc = next(d for d in env.docs() if d["name"] == "move_item")
    assert validate_arguments(doc, {"name": "lamp", "location": "store"}) is None
    assert "is not one of" in validate_arguments(doc, {"name": "lamp", "location": "attic"})
    assert "'location' is a required property" in validate_arguments(doc, {"name": "lamp"})
    assert "is not of type 'string'" in validate_arguments(doc, {"name": 3, "location": "store"})


def test_guarded_parsing_and_clipping():
    assert parse_calls('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>') == (
        [{"name": "a", "arguments": {"x": 1}}],
        None,
    )
    assert parse_calls("no call") == ([], None)
    assert "nests too deeply" in parse_calls("<tool_call>" + "[" * 50 + "]" * 50 + "</tool_call>")[1]
    assert "Too many" in parse_calls("<tool_call>{}</tool_call>" * 9)[1]
    assert "JSON" in parse_calls("<tool_call>__import__('os').system('x')</tool_call>")[1]
    clipped = clip_text("\x1b[31m\x00" + "\ud800" + "A" * 5000, 100)
    clipped.encode("utf-8")  # valid UTF-8
    assert "\x1b" not in clipped and "\x00" not in clipped and clipped.endswith("[... cut at 100 characters]")


def test_ground_truth_passes_and_episodes_are_isolated(env):
    tasks = [t for t in env.tasks("train") if t.payload["turns"][0]["calls"][0]["name"] == "add_stock"][:1]
    # The same adding task twice in one batch: with a shared server the second would see the first's stock.
    trajs = run_episodes(env, gt_engine(tasks), [(tasks[0], "g", 0), (tasks[0], "g", 1)], Interface(), SAMPLING)
    assert [t.reward for t in trajs] == [1.0, 1.0]
    assert trajs[0].turn_verdicts[0].checks["check_results"] == trajs[1].turn_verdicts[0].checks["check_results"]
    assert {label.label for label in diagnose(trajs)} == {"pass"}


def test_mistakes_are_labelled_and_rejected_before_the_server(env):
    task = env.tasks("eval")[0]

    def reply(user, conv):
        if conv[-1].role != "user":
            return "done"
        call = dict(task.payload["turns"][0]["calls"][0])
        args = dict(call["arguments"])
        key = next(k for k in args if k != "name")
        args[key] = "attic" if key == "location" else ("lost" if key == "status" else -5)
        return f"<tool_call>{json.dumps({'name': call['name'], 'arguments': args})}</tool_call>"

    (traj,) = run_episodes(env, Scripted(reply), [(task, "g", 0)], Interface(), SAMPLING)
    assert traj.reward == 0.0 and traj.tool_calls[0].error and traj.tool_calls[0].result is None
    assert diagnose([traj])[0].label == "recovery_failure"
    (traj,) = run_episodes(
        env, Scripted(lambda u, c: "I will not call anything."), [(task, "g", 0)], Interface(), SAMPLING
    )
    assert diagnose([traj])[0].label == "empty_turn_model_response"
    (traj,) = run_episodes(env, Scripted(lambda u, c: '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'),
                           [(task, "g", 0)], Interface(), SAMPLING)
    assert diagnose([traj])[0].label == "invalid_tool_call"


@pytest.mark.parametrize("switch", [{"INVENTORY_HANG_ON": "get_item"}, {"INVENTORY_CRASH_ON": "move_item"}])
def test_a_failing_server_masks_the_episode_and_the_run_goes_on(switch, monkeypatch):
    import mcp.client.stdio

    # The SDK's grace for a server to exit once its stdin is closed (2 s; a hung one then gets SIGTERM): short,
    # so that each hung episode costs its call's time limit and not the grace as well.
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 0.2)
    bad = MCPEnvironment(
        settings(env=switch, n_eval=3).model_copy(
            update={"servers": [settings(env=switch).servers[0].model_copy(update={"timeout_s": 1.0})]}
        )
    )
    tasks = bad.tasks("eval")[:3]
    start = time.monotonic()
    trajs = run_episodes(bad, gt_engine(tasks), [(t, f"g{i}", 0) for i, t in enumerate(tasks)], Interface(), SAMPLING)
    assert time.monotonic() - start < 150  # bounded by the timeouts, not by a hung server (loose: a loaded CPU)
    assert len(trajs) == 3
    failed = [t for t in trajs if t.infra_failure]
    assert failed, "the failing server must end the episode as an infrastructure failure"
    assert all(t.finish == "infra_failure" and "inventory" in t.infra_failure for t in failed)
    assert diagnose(trajs) == [label for label in diagnose(trajs) if label.trajectory_id not in {t.id for t in failed}]


def test_hostile_tool_results_are_clipped_utf8():
    hostile = MCPEnvironment(settings(env={"INVENTORY_HOSTILE": "1"}, max_result_chars=500))
    task = hostile.tasks("train")[0]
    engine = Scripted(lambda u, c: ('<tool_call>{"name": "get_item", "arguments": {"name": "lamp"}}</tool_call>'
                                    if c[-1].role == "user" else "done"))
    (traj,) = run_episodes(hostile, engine, [(task, "g", 0)], Interface(), SAMPLING)
    result = traj.tool_calls[0].result
    assert result is not None and len(result) < 600 and "\x1b" not in result and "\x00" not in result
    result.encode("utf-8")
    json.dumps(traj.model_dump())  # storable


def test_arguments_that_are_not_text_are_an_error_the_agent_sees(env):
    task = env.tasks("eval")[0]
    engine = Scripted(lambda u, c: '<tool_call>{"name": "get_item", "arguments": {"name": "lamp\\ud800"}}</tool_call>')
    start = time.monotonic()
    (traj,) = run_episodes(env, engine, [(task, "g", 0)], Interface(), SAMPLING)
    assert time.monotonic() - start < 30  # refused before the server: no wait for its timeout
    assert traj.infra_failure is None and traj.reward == 0.0
    assert traj.tool_calls and all("not valid Unicode text" in c.error for c in traj.tool_calls)
    assert "not valid Unicode text" in next(m.content for m in traj.messages if m.role == "tool")


def test_a_request_the_sdk_cancels_is_the_clients_usual_error():
    from seal_platform.infra import InfraError
    from seal_platform_plugins.mcp.client import MCPConnection

    with (
        MCPConnection(settings().servers[0]) as conn,
        pytest.raises(InfraError, match="'inventory' failed during call"),
    ):
        conn.call("get_item", {"name": "\ud800"})  # the SDK cannot encode it and cancels the request


def test_a_stray_line_on_the_servers_stdout_is_skipped():
    noisy = MCPEnvironment(settings(env={"INVENTORY_GARBAGE_ON": "set_status"}))
    tasks = [t for t in noisy.tasks("train") if t.payload["turns"][0]["calls"][0]["name"] == "set_status"][:2]
    trajs = run_episodes(noisy, gt_engine(tasks), [(t, f"g{i}", 0) for i, t in enumerate(tasks)], Interface(), SAMPLING)
    assert [t.infra_failure for t in trajs] == [None, None]
    assert trajs[0].tool_calls[0].result is not None


def _labelled_state(label: str, n: int = 12):
    from seal_platform.capability import CapabilityState
    from seal_platform.types import Trajectory, TurnLabel

    state = CapabilityState()
    trajs = [Trajectory(task_id=f"t{i}", category="direct", group=f"g{i}", reward=0.0) for i in range(n)]
    state.update(0, 0, trajs, [TurnLabel(trajectory_id=t.id, turn=0, label=label, source="mcp") for t in trajs])
    return state


def test_labels_drive_tool_doc_changes_and_evaluation_stays_pristine(env):
    from seal_platform.capability import CapabilityState
    from seal_platform_plugins.mcp.evolution import evolve

    pristine = env.pristine_interface()
    assert evolve(pristine, CapabilityState(), env.settings.evolution) is None
    new = evolve(pristine, _labelled_state("argument_mismatch"), env.settings.evolution)
    assert new is not None and new.spec["changes"] == ["allowed_values"] and new.driven_by == ["argument_mismatch"]
    task = env.tasks("eval")[0]
    assert 'Allowed values: "warehouse", "store", "backroom".' in build_prompt(env, task, new)[0].content
    assert "Allowed values" not in build_prompt(env, task, pristine)[0].content
    recovery = evolve(new, _labelled_state("recovery_failure"), env.settings.evolution)
    assert set(recovery.spec["changes"]) == {"allowed_values", "required_markers", "recovery_hints"}
    # With recovery hints on, a refused call is answered with what the schema says.
    bad = '<tool_call>{"name": "move_item", "arguments": {"name": "lamp", "location": "attic"}}</tool_call>'
    engine = Scripted(lambda u, c: bad if c[-1].role == "user" else "done")
    (traj,) = run_episodes(env, engine, [(task, "g", 0)], recovery, SAMPLING)
    tool_msg = next(m.content for m in traj.messages if m.role == "tool")
    assert "Hint: move_item requires name, location; location must be one of" in tool_msg


def test_isolation_by_the_servers_reset_tool():
    with pytest.raises(ValueError, match="reset_tool"):
        settings(isolation="reset")
    env = MCPEnvironment(settings(isolation="reset", reset_tool="reset"))
    tasks = env.tasks("train")[:2]
    trajs = run_episodes(env, gt_engine(tasks), [(t, f"g{i}", 0) for i, t in enumerate(tasks)], Interface(), SAMPLING)
    assert [t.reward for t in trajs] == [1.0, 1.0]
    broken = MCPEnvironment(settings(isolation="reset", reset_tool="no_such_reset"))
    (traj,) = run_episodes(broken, gt_engine(tasks), [(tasks[0], "g", 0)], Interface(), SAMPLING)
    assert traj.infra_failure and "reset tool" in traj.infra_failure


def test_the_environment_refuses_to_start_without_servers_and_tasks(tmp_path):
    """Both keys are optional in the settings (every installed plugin's section is validated for every
    recipe); a recipe whose environment is mcp must give them."""
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.errors import ConfigError
    from seal_platform_plugins.mcp.plugin import _build
    from seal_platform_plugins.mcp.settings import MCPSettings

    ctx = RunContext(config=RunConfig(environment="mcp"), run_id="r", run_dir=tmp_path, settings={"mcp": MCPSettings()})
    with pytest.raises(ConfigError, match="settings.mcp.servers and settings.mcp.tasks"):
        _build(ctx)


def test_a_task_file_missing_here_stops_the_run_before_anything_is_started(tmp_path, monkeypatch):
    # The shipped recipe's paths are relative to the repository's root; run from elsewhere, the machine check
    # says so before a run row, a model load or a server start (before: a failed run left in the store).
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", "mcp-example", "--quiet"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "settings.mcp.tasks: there is no file 'examples/mcp-inventory/tasks.jsonl' here" in text, text
    assert "nothing was started" in text or "problem(s) in the recipe" in text, text
    store = tmp_path / "runs" / "store.sqlite"
    assert not store.exists() or not RunStore(f"sqlite:///{store}").list_runs()


def test_the_task_files_splits_are_checked_with_the_recipe(tmp_path):
    """The mcp environment declares its task file's splits: a split the file lacks is a recipe problem, found
    before a run's row is written, and so is a file that is not there."""
    from seal_platform.errors import ConfigError
    from seal_platform.planning import plan_recipe

    with pytest.raises(ConfigError) as raised:
        plan_recipe("mcp-example", [f"settings.mcp.tasks={TASKS}", "evaluation.split=test"])
    assert "evaluation.split: environment 'mcp' has no split 'test'; its splits: eval, train" in str(raised.value)
    evals = tmp_path / "eval-only.jsonl"
    evals.write_text("".join(line + "\n" for line in Path(TASKS).read_text().splitlines() if '"split": "eval"' in line))
    with pytest.raises(ConfigError) as raised:
        plan_recipe("mcp-example", [f"settings.mcp.tasks={evals}"])
    assert "environment: environment 'mcp' has no 'train' split to train on; its splits: eval" in str(raised.value)
    with pytest.raises(ConfigError) as raised:  # a recipe problem too (before: left to check_machine)
        plan_recipe("mcp-example", [f"settings.mcp.tasks={tmp_path / 'missing.jsonl'}"])
    assert "settings.mcp.tasks: there is no file" in str(raised.value) and "missing.jsonl" in str(raised.value)


def test_a_stdio_server_starts_where_the_check_looked_a_home_relative_cwd_included(tmp_path, monkeypatch):
    """check_machine reads `~` in a stdio server's cwd as the home folder; the run starts the server there too."""
    from seal_platform_plugins.mcp.client import MCPConnection
    from seal_platform_plugins.mcp.probe import server_problems

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "srv").mkdir()
    server = settings().servers[0].model_copy(update={"cwd": "~/srv"})
    assert server_problems("settings.mcp.servers[0]", server) == []
    with MCPConnection(server) as conn:
        assert conn.list_tools()


def test_a_server_that_dies_mid_evaluation_is_scored_as_an_infrastructure_failure(tmp_path):
    """The plugin's evaluate and the core's check of its result together (before: the helper left the lost
    episode out of n_tasks and the core refused the result: 'an EvalResult of 2 task(s) for 3 task(s)'). The
    server exits on remove_stock, which only the second of the three eval tasks calls."""
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.stages import evaluate_with
    from seal_platform_plugins.mcp.plugin import evaluate

    dying = MCPEnvironment(settings(env={"INVENTORY_CRASH_ON": "remove_stock"}, n_eval=3))
    tasks = dying.tasks("eval")
    assert [t.payload["turns"][0]["calls"][0]["name"] for t in tasks] == ["set_status", "remove_stock", "move_item"]
    ctx = RunContext(
        config=RunConfig(environment="mcp"), run_id="r", run_dir=tmp_path, settings={"mcp": dying.settings}
    )
    result = evaluate_with(
        evaluate, ctx=ctx, environment=dying, engine=gt_engine(tasks), tasks=tasks, step=0, plugin="mcp"
    )
    assert result.n_tasks == 3 and result.n_infra_failures == 1
    lost = [t for t in result.trajectories if t.infra_failure]
    assert [t.task_id for t in lost] == [tasks[1].id] and "inventory" in lost[0].infra_failure
    assert result.per_category == {tasks[0].category: 100.0, tasks[2].category: 100.0}  # the episodes that ran


def test_a_system_prompt_and_a_tasks_context_reach_the_prompt(env):
    from seal_platform.types import Task

    told = MCPEnvironment(settings(system_prompt="You run a hardware shop's stock system."))
    task = Task(id="t", category="c", split="eval",
                payload={"turns": [{"user": "x", "calls": [], "check": []}], "context": "The lamp is fragile."})
    system = build_prompt(told, task, Interface())[0].content
    assert system.startswith("You run a hardware shop's stock system.\nYou can use these tools:")
    assert system.endswith("\nThe lamp is fragile.") and "move_item(" in system
    plain = build_prompt(env, env.tasks("eval")[0], Interface())[0].content
    assert plain.startswith("You can use these tools:")
