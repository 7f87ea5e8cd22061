"""seal_platform_libs.toolenv.lockstep (the lock-step episode loop of tool environments) and
seal_platform_libs.toolenv.hooks (their standard hooks), on a small counting environment of the test's own: each
task asks the agent to count from 1 to ``payload["to"]``, one number per message; a wrong number is answered
with an error and the agent may go on. The engine is scripted: it answers each conversation from its
messages, so what the loop sent it is what it answered."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pytest

from seal_platform.config import RunConfig
from seal_platform.infra import INFRA_FINISH, InfraError
from seal_platform.types import Generation, Interface, Message, SamplingParams, Task, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.episodes import evaluation_episodes, training_episodes
from seal_platform_libs.toolenv.hooks import LockstepHooks
from seal_platform_libs.toolenv.lockstep import LockstepEpisode, ScriptedEpisode, play_lockstep


@dataclass
class Counting(LockstepEpisode):
    """Count to ``payload["to"]``; ``payload["fail"]``: where the environment's server fails (``begin``, a number
    said, or ``score``). ``log``: what happened to the episodes, shared by all of them, in order."""

    log: list[str] = field(default_factory=list)
    said: list[int] = field(default_factory=list)
    open: bool = False

    def begin(self) -> None:
        self.log.append(f"begin {self.task.id}")
        if self.task.payload.get("fail") == "begin":
            raise InfraError(f"{self.task.id}: the server did not start")
        self.open = True
        self.messages.append(Message(role="user", content=f"Count to {self.task.payload['to']}."))

    def react(self, text: str) -> None:
        if self.task.payload.get("fail") == text:
            raise InfraError(f"{self.task.id}: the server died at {text}")
        expected = len(self.said) + 1
        if text.strip() == str(expected):
            self.said.append(expected)
            self.messages.append(Message(role="tool", content="ok"))
        else:
            self.messages.append(Message(role="tool", content=f"Error: expected {expected}"))
        self.done = len(self.said) >= self.task.payload["to"] or len(self.messages) > 40

    def wrap_up(self) -> None:
        self.traj.metadata["said"] = list(self.said)

    def close(self) -> None:
        if self.open:
            self.log.append(f"close {self.task.id}")
        self.open = False

    def score(self) -> None:
        if self.task.payload.get("fail") == "score":
            raise InfraError(f"{self.task.id}: the checker is gone")
        passed = self.said == list(range(1, self.task.payload["to"] + 1))
        self.traj.turn_verdicts = [TurnVerdict(turn=0, passed=passed)]
        self.traj.reward = 1.0 if passed else 0.0


class Counter:
    """Says the next number (or, for the n-th message of a task listed in ``script``, that text); records each
    call's batch. ``too_long``: task ids whose prompts no longer fit."""

    name = "scripted"

    def __init__(self, script: dict[tuple[str, int], str] | None = None, too_long: tuple[str, ...] = (),
                 log: list[str] | None = None):
        self.script, self.too_long, self.log = script or {}, too_long, log
        self.batches: list[list[str]] = []

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        ids = [conv[0].content for conv in conversations]  # the system message names the task
        self.batches.append(ids)
        if self.log is not None:
            self.log.append(f"generate {len(ids)}")
        out = []
        for task_id, conv in zip(ids, conversations):
            if task_id in self.too_long:
                out.append(Generation(text="", token_ids=[], logprobs=[], finish_reason="prompt_too_long"))
                continue
            n = sum(m.role == "assistant" for m in conv)
            said = sum(m.role == "tool" and m.content == "ok" for m in conv)
            out.append(Generation(text=self.script.get((task_id, n), str(said + 1)), token_ids=[7], logprobs=[-0.5]))
        return out


def _task(i: int, to: int, **payload: object) -> Task:
    return Task(id=f"t{i}", category="count", split="eval", payload={"to": to, **payload})


def _play(tasks: list[Task], engine: Counter, chunk: int | None = None, log: list[str] | None = None,
          interface: Interface | None = None) -> list[Trajectory]:
    log = [] if log is None else log

    def make(task: Task, traj: Trajectory) -> Counting:
        log.append(f"make {task.id}")
        return Counting(task, traj, [Message(role="system", content=task.id)], interface or Interface(), log=log)

    return play_lockstep(engine, evaluation_episodes(tasks, 3), interface or Interface(), SamplingParams(), make, chunk)


def test_every_round_is_one_engine_call_for_the_episodes_still_going():
    tasks = [_task(0, 3), _task(1, 1), _task(2, 2)]
    engine = Counter()
    trajs = _play(tasks, engine)
    assert engine.batches == [["t0", "t1", "t2"], ["t0", "t2"], ["t0"]]
    assert [t.task_id for t in trajs] == ["t0", "t1", "t2"] and [t.reward for t in trajs] == [1.0, 1.0, 1.0]
    assert [t.metadata["said"] for t in trajs] == [[1, 2, 3], [1], [1, 2]]
    assert all(t.group == f"eval3:{t.task_id}" and t.sample == 0 and t.finish == "completed" for t in trajs)
    # The conversation is the trajectory's, each agent message the engine's generation (trainable).
    first = trajs[0].messages
    assert [m.role for m in first] == ["system", "user"] + ["assistant", "tool"] * 3
    assert [m.content for m in first if m.role == "assistant"] == ["1", "2", "3"]
    assert all(m.trainable and m.token_ids == [7] and m.logprobs == [-0.5] for m in first if m.role == "assistant")


def test_an_agent_mistake_is_the_agent_s_and_the_episode_goes_on():
    engine = Counter(script={("t0", 0): "two", ("t0", 1): "1"})
    (traj,) = _play([_task(0, 2)], engine)
    assert [m.content for m in traj.messages if m.role == "tool"] == ["Error: expected 1", "ok", "ok"]
    assert traj.reward == 1.0 and not traj.infra_failure and len(engine.batches) == 3


def test_chunks_are_made_begun_played_and_closed_one_after_the_other():
    log: list[str] = []
    tasks = [_task(i, 1 + i % 2) for i in range(5)]
    engine = Counter(log=log)
    trajs = _play(tasks, engine, chunk=2, log=log)
    assert log == [
        "make t0", "make t1", "begin t0", "begin t1", "generate 2", "generate 1", "close t0", "close t1",
        "make t2", "make t3", "begin t2", "begin t3", "generate 2", "generate 1", "close t2", "close t3",
        "make t4", "begin t4", "generate 1", "close t4",
    ]
    assert [t.task_id for t in trajs] == [t.id for t in tasks] and all(t.reward == 1.0 for t in trajs)


def test_a_server_failure_loses_that_episode_only_and_closes_it_at_once():
    log: list[str] = []
    tasks = [_task(0, 3, fail="2"), _task(1, 3), _task(2, 2, fail="begin"), _task(3, 1, fail="score")]
    engine = Counter(log=log)
    interface = Interface(revision=4)
    trajs = _play(tasks, engine, log=log, interface=interface)
    assert [t.task_id for t in trajs] == ["t0", "t1", "t2", "t3"]
    lost = {t.task_id: t for t in trajs if t.infra_failure}
    assert set(lost) == {"t0", "t2", "t3"}
    assert (
        lost["t0"].infra_failure == "t0: the server died at 2"
        and lost["t2"].infra_failure == "t2: the server did not start"
    )
    assert lost["t3"].infra_failure == "t3: the checker is gone"
    assert all(t.finish == INFRA_FINISH and t.interface_revision == 4 and t.group == f"eval3:{t.task_id}"
               and t.messages == [] for t in lost.values())
    assert trajs[1].reward == 1.0 and trajs[1].metadata["said"] == [1, 2, 3] and trajs[1].interface_revision == 4
    # t2 never joined a round; t0 left the rounds (and was closed) the moment its server died.
    assert engine.batches == [["t0", "t1", "t3"], ["t0", "t1"], ["t1"]]
    assert log.index("close t0") < log.index("generate 1") and log.count("close t0") == 1
    assert "close t2" not in log  # it never opened


def test_a_prompt_over_the_context_ends_the_episode_without_a_reaction():
    engine = Counter(too_long=("t1",))
    trajs = _play([_task(0, 2), _task(1, 2)], engine)
    assert trajs[1].finish == "context_limit" and trajs[1].reward == 0.0 and trajs[1].metadata["said"] == []
    assert [m.role for m in trajs[1].messages] == ["system", "user", "assistant"]  # no tool message
    assert trajs[0].reward == 1.0 and engine.batches == [["t0", "t1"], ["t0"]]


def test_any_other_error_propagates_after_every_episode_is_closed():
    log: list[str] = []

    class Broken(Counter):
        def generate(self, conversations, sampling):
            if len(self.batches) == 1:
                raise RuntimeError("the engine crashed")
            return super().generate(conversations, sampling)

    with pytest.raises(RuntimeError, match="the engine crashed"):
        _play([_task(0, 3), _task(1, 3)], Broken(), log=log)
    assert log[-2:] == ["close t0", "close t1"]


def test_no_episodes_make_nothing_and_call_no_engine():
    engine = Counter()
    assert play_lockstep(engine, [], Interface(), SamplingParams(), lambda task, traj: pytest.fail("made")) == []
    assert engine.batches == []


@dataclass
class Echo(ScriptedEpisode):
    """Scripted turns: the agent must repeat the user's words, in at most two messages per turn."""

    ended: list[tuple[int, int]] = field(default_factory=list)  # (turn, attempts) at each turn_ended

    def react(self, text: str) -> None:
        self.attempts += 1
        right = text == self.task.payload["turns"][self.turn]["user"]
        self.messages.append(Message(role="tool", content="ok" if right else "Error: repeat it"))
        if right or self.attempts >= 2:
            self.end_turn()

    def turn_ended(self) -> None:
        self.ended.append((self.turn, self.attempts))

    def score(self) -> None:
        self.traj.reward = float(len(self.ended))


class Parrot:
    """Repeats the last user message, except for the n-th message of a task listed in ``wrong``."""

    def __init__(self, wrong: set[tuple[str, int]]):
        self.wrong = wrong

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conv in conversations:
            n = sum(m.role == "assistant" for m in conv)
            said = "?" if (conv[0].content, n) in self.wrong else [m for m in conv if m.role == "user"][-1].content
            out.append(Generation(text=said, token_ids=[7], logprobs=[-0.5]))
        return out


def test_scripted_episodes_add_each_user_turn_after_the_last_and_end_after_the_final_one():
    turns = {"t0": ["a", "b", "c"], "t1": ["x", "y"]}
    tasks = [Task(id=i, category="echo", split="eval", payload={"turns": [{"user": u} for u in us]})
             for i, us in turns.items()]
    eps: list[Echo] = []

    def make(task: Task, traj: Trajectory) -> Echo:
        eps.append(Echo(task, traj, [Message(role="system", content=task.id)], Interface()))
        return eps[-1]

    # t1 gets turn "y" wrong twice: the turn ends after its two attempts, and so does the episode.
    trajs = play_lockstep(Parrot({("t1", 1), ("t1", 2)}), evaluation_episodes(tasks, 0), Interface(),
                          SamplingParams(), make)
    assert [ep.ended for ep in eps] == [[(0, 1), (1, 1), (2, 1)], [(0, 1), (1, 2)]]
    assert [[m.content for m in ep.messages if m.role == "user"] for ep in eps] == [turns["t0"], turns["t1"]]
    assert all(ep.done and ep.turn == len(turns[ep.task.id]) for ep in eps)
    assert [t.reward for t in trajs] == [3.0, 2.0]


# --- the standard hooks ------------------------------------------------------------------------------------------


class CountingEnvironment:
    """An environment for the standard hooks: settings with ``max_new_tokens``, a pristine interface and
    ``play``."""

    class settings:
        max_new_tokens = 12

    def pristine_interface(self) -> Interface:
        return Interface(revision=0)

    def play(self, engine, episodes, interface, sampling):
        self.sampling = sampling

        def make(task: Task, traj: Trajectory) -> Counting:
            return Counting(task, traj, [Message(role="system", content=task.id)], interface)

        return play_lockstep(engine, episodes, interface, sampling, make, chunk=2)


class _Ctx:
    def __init__(self, environment: str = "counting"):
        self.config = RunConfig(environment=environment)


def _hooks() -> LockstepHooks:
    return LockstepHooks("counting", lambda: dict, batches="all at once", fix="remove rollout.executor")


def test_the_standard_collect_and_evaluate_play_the_step_s_episodes():
    hooks, env = _hooks(), CountingEnvironment()
    tasks = [_task(0, 2), _task(1, 1)]
    trajs = hooks.collect(ctx=_Ctx(), environment=env, engine=Counter(), tasks=tasks, interface=Interface(revision=2),
                          group_size=3, step=5)
    assert [(t.task_id, t.group, t.sample) for t in trajs] == [(task.id, group, j) for task, group, j
                                                              in training_episodes(tasks, 3, 5)]
    assert all(t.interface_revision == 2 and t.reward == 1.0 for t in trajs)
    assert env.sampling.max_new_tokens == 12 and env.sampling.stop == ["</tool_call>"]
    lost = _task(2, 2, fail="1")
    result = hooks.evaluate(ctx=_Ctx(), environment=env, engine=Counter(), tasks=[*tasks, lost], step=1)
    assert result.n_tasks == 3 and result.n_infra_failures == 1 and result.per_category == {"count": 100.0}
    assert all(t.interface_revision == 0 for t in result.trajectories)
    assert env.sampling.temperature == 0.0  # greedy
    assert hooks.register_settings() == {"counting": dict}


def test_recipe_issues_name_an_unused_executor_and_an_evolution_for_another_environment():
    hooks = _hooks()
    assert hooks.recipe_issues(RunConfig(environment="counting")) == []
    executor = hooks.recipe_issues(RunConfig(environment="counting", rollout={"executor": "ray"}))
    assert [i.where for i in executor] == ["rollout.executor"] and "all at once" in executor[0].what
    other = hooks.recipe_issues(RunConfig(environment="toy", stages={"evolve_interface": "counting"}))
    assert [i.where for i in other] == ["stages.evolve_interface"] and "'toy'" in other[0].what
    assert hooks.recipe_issues(RunConfig(environment="counting", stages={"evolve_interface": "counting"})) == []


def test_the_task_file_issue_says_what_is_wrong_with_it(tmp_path):
    from pydantic import BaseModel

    from seal_platform_libs.toolenv.episodes import load_task_file

    class Spec(BaseModel):
        id: str
        split: str = "train"
        category: str = "count"
        to: int

    def load(path: str) -> list[Task]:
        return load_task_file(path, Spec, "settings.counting.tasks", lambda line: {"to": line.to})

    hooks, uses = _hooks(), RunConfig(environment="counting")
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text('{"id": "a", "to": 2}\n')
    bad.write_text('{"id": "a", "to": 2}\n{"id": "b", "to": "many"}\n')
    assert hooks.task_file_issues(uses, str(good), load, "docs/x.md") == []
    (issue,) = hooks.task_file_issues(uses, str(bad), load, "docs/x.md")
    assert issue.where == "settings.counting.tasks" and f"{bad}:2: not a valid task" in issue.what
    assert "docs/x.md" in issue.fix and not issue.what.endswith(".")
    (missing,) = hooks.task_file_issues(uses, str(tmp_path / "gone.jsonl"), load, "docs/x.md")
    assert "not found" in missing.what
    # Not read for a recipe that does not use the environment, nor without a file.
    assert hooks.task_file_issues(RunConfig(environment="toy"), str(bad), load, "docs/x.md") == []
    assert hooks.task_file_issues(uses, None, load, "docs/x.md") == []


# --- the core calls an environment plugin for its own environment only ------------------------------------------


def test_environment_plugins_are_not_called_in_another_environment_s_run(toy_site, toy_recipe):
    """The tool-environment plugins have no guard against another plugin's environment (their collect would
    fail on the toy environment, which has no ``play``): the run of the toy environment, with them and a
    recording plugin of another environment loaded, calls collect, evaluate and evolve_interface on toy only."""
    from seal_platform.hookspecs import hookimpl
    from seal_platform.loop import Runner
    from seal_platform.planning import load_recipe, prepare
    from seal_platform.plugins import make_plugin_manager
    from seal_platform.registry import EnvironmentSpec
    from seal_platform.store import RunStore

    class Elsewhere:
        def __init__(self):
            self.called: list[str] = []

        @hookimpl
        def register_environments(self):
            return [EnvironmentSpec("elsewhere", lambda ctx: pytest.fail("built"), "another environment")]

        @hookimpl
        def collect(self, step):
            self.called.append("collect")
            return []

        @hookimpl
        def evaluate(self, step):
            self.called.append("evaluate")
            return []

        @hookimpl
        def evolve_interface(self, step):
            self.called.append("evolve_interface")

    elsewhere = Elsewhere()
    plugins = ["toy", "smarthome", "mcp", "openenv"]
    config, _, path = load_recipe(str(toy_recipe), ["training.steps=2", f"plugins.allow={plugins}"])
    host = make_plugin_manager(allow=plugins, extra=[("elsewhere", elsewhere)])
    assert all(host.is_loaded(name) for name in plugins)
    runner = Runner(prepare(config, host, str(path)), host, RunStore(config.store_url()))
    summary = runner.run()
    assert summary.status == "completed" and elsewhere.called == []
    toy = sys.modules["toy_plugin"].plugin
    assert toy.calls.count("collect") == 2 and toy.calls.count("evaluate") == 2
