"""What an environment's ``collect`` / ``evaluate`` and a diagnoser's ``diagnose`` return is checked at the stage
boundary, before anything of it is stored, and a violation is the plugin's error (a PluginError naming the plugin
and the hook), never a concurrency conflict: ids unique within a call and across the run store, finite rewards,
one evaluation trajectory per task, pass rates that are percentages, non-empty labels (labels no diagnoser
declares are kept, with one ``labels_undeclared`` event per step). A stage that fails in another plugin's code
(the engine's ``generate`` under the environment's ``evaluate``) names that plugin and where it was raised. The
store's own refusal of a write is a WriteConflict only when another writer caused it."""

from __future__ import annotations

import math
import re
import sys

import pytest

from seal_platform.capability import CapabilityState
from seal_platform.errors import PluginError, StoreError
from seal_platform.loop import Runner
from seal_platform.planning import plan_recipe
from seal_platform.stages import score_evaluation
from seal_platform.store import RunStore, WriteConflict
from seal_platform.types import EvalResult, Task, Trajectory

from .conftest import diagnoser_source, make_dist

RAW = ("IntegrityError", "UNIQUE", "FOREIGN KEY", "NOT NULL", "INSERT", "[SQL", "sqlite3", "constraint failed")


def _runner(recipe, overrides=(), resume=None):
    plan = plan_recipe(recipe, list(overrides))
    store = RunStore(plan.config.store_url())
    return Runner(plan, plan.host, store, recipe=plan.source, resume_run_id=resume), store


def _fails(runner, store) -> str:
    """The run's PluginError (not a store error, not a conflict), with the run marked failed and saying it."""
    with pytest.raises((PluginError, StoreError)) as raised:
        runner.run()
    error = raised.value
    said = str(error)
    assert isinstance(error, PluginError) and not isinstance(error, StoreError), repr(error)
    assert "another process" not in said and not [raw for raw in RAW if raw in said], said
    run = store.get_run(runner.run_id)
    assert run.status == "failed" and said in run.error
    return said


# --- ids ---------------------------------------------------------------------------------------------------


def test_duplicate_ids_from_collect_are_the_plugin_s_error_and_the_step_is_not_stored(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=duplicate_ids", "training.steps=1"])
    said = _fails(runner, store)
    assert said.startswith("collect of plugin 'toy' returned trajectories with duplicate ids ['same']; a "
                           "trajectory's id must be unique across the run store"), said
    assert "uuid4" in said
    assert store.steps(runner.run_id) == [] and store.trajectories(runner.run_id, phase="train") == []


def test_ids_reused_across_evaluations_are_refused_before_the_write_and_the_run_resumes(toy_site, toy_recipe):
    overrides = ["training.steps=2", "evaluation.every=1", "training.checkpoint_every=1"]
    runner, store = _runner(toy_recipe, [*overrides, "settings.toy.bad_data=task_sample_ids"])
    said = _fails(runner, store)
    run_id = runner.run_id
    assert said.startswith(f"evaluate of plugin 'toy' returned trajectories whose ids are already in the run "
                           f"store: ['eval-0:0' (run {run_id}, step 0, eval)"), said
    assert "must be unique across the run store" in said and "uuid4" in said
    # The store is as the last good write left it: the evaluation before training, step 0, nothing of step 1's.
    assert sorted({e.step for e in store.evaluations(run_id)}) == [0]
    assert [s.step for s in store.steps(run_id)] == [0]
    # Not lost: with the plugin fixed, the run resumes and completes.
    resumed, store = _runner(toy_recipe, overrides, resume=run_id)
    summary = resumed.run()
    assert summary.status == "completed" and sorted(summary.evaluations) == [1, 2]
    assert sorted({e.step for e in store.evaluations(run_id)}) == [0, 1, 2]


def test_ids_reused_across_steps_of_collect_are_the_plugin_s_error(toy_site, toy_recipe):
    # 10 tasks, 4 a step: step 2 (a new epoch) draws tasks steps 0 and 1 had, and so their ids.
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=task_sample_ids", "training.steps=3",
                                         "evaluation.every=0", "evaluation.before_training=false"])
    said = _fails(runner, store)
    assert re.match(rf"collect of plugin 'toy' returned trajectories whose ids are already in the run store: "
                    rf"\['train-\d+:\d' \(run {runner.run_id}, step [01], train\)", said), said
    assert [s.step for s in store.steps(runner.run_id)] == [0, 1]


def test_ids_another_run_used_are_refused_in_the_next_run(toy_site, toy_recipe):
    overrides = ["settings.toy.bad_data=task_sample_ids", "training.steps=1", "evaluation.every=0",
                 "evaluation.before_training=false"]
    first, store = _runner(toy_recipe, overrides)
    assert first.run().status == "completed"  # unique within the run
    second, store = _runner(toy_recipe, overrides)  # the same seed: the same batch, the same ids
    said = _fails(second, store)
    assert f"(run {first.run_id}, step 0, train)" in said and said.startswith("collect of plugin 'toy'"), said
    assert store.steps(second.run_id) == []


# --- rewards -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, shown", [("nan_reward", "nan"), ("inf_reward", "inf")])
def test_a_reward_that_is_not_finite_is_the_plugin_s_error(toy_site, toy_recipe, bad, shown):
    runner, store = _runner(toy_recipe, [f"settings.toy.bad_data={bad}", "training.steps=1"])
    said = _fails(runner, store)
    assert re.fullmatch(rf"collect of plugin 'toy' returned reward {shown} for trajectory '[0-9a-f]{{32}}' \(task "
                        rf"'train-\d+'\), which is not a finite number\.", said), said
    assert store.steps(runner.run_id) == []


def test_an_evaluation_reward_that_is_not_finite_is_the_plugin_s_error(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=eval_nan_reward", "training.steps=1"])
    said = _fails(runner, store)
    assert said.startswith("evaluate of plugin 'toy' returned reward nan for trajectory "), said
    assert said.endswith("which is not a finite number."), said
    assert store.evaluations(runner.run_id) == [] and store.trajectories(runner.run_id) == []


# --- evaluate's contract: one per task, pass rates in percent ----------------------------------------------


def test_an_evaluation_without_trajectories_is_the_plugin_s_error_not_a_zero_pass_rate(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=eval_empty", "training.steps=1"])
    said = _fails(runner, store)
    assert said.startswith("evaluate of plugin 'toy' returned 0 trajectories for 6 task(s); it must return one "
                           "per task"), said
    assert "none for task(s) ['eval-0', 'eval-1', 'eval-2', 'eval-3', 'eval-4', ...]" in said, said
    assert store.evaluations(runner.run_id) == []


def test_an_evaluation_that_leaves_a_task_out_names_it(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=eval_none_for_a_task", "training.steps=1"])
    said = _fails(runner, store)
    assert said.startswith("evaluate of plugin 'toy' returned 5 trajectories for 6 task(s)"), said
    assert said.endswith("none for task(s) ['eval-5']."), said


def test_an_eval_result_with_a_pass_rate_that_is_not_a_percentage_is_the_plugin_s_error(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.bad_data=eval_rate_7", "training.steps=1"])
    said = _fails(runner, store)
    assert said == ("evaluate of plugin 'toy' returned pass rates that are not percentages (finite numbers from 0 "
                    "to 100): ['big: 700.0', 'small: 700.0'].")


def test_score_evaluation_checks_against_the_tasks():
    tasks = [Task(id=f"t{i}", category="c", split="eval") for i in range(2)]
    good = [Trajectory(task_id=t.id, category="c", group=t.id, reward=r) for t, r in zip(tasks, (1.0, 7.0))]
    # No reward range is documented (an environment may pass its own reward through): 7.0 counts as a pass.
    assert score_evaluation(good, "eval", "env", tasks).per_category == {"c": 100.0}
    with pytest.raises(PluginError, match=r"returned 1 trajectories for 2 task\(s\).*none for task\(s\) \['t1'\]"):
        score_evaluation(good[:1], "eval", "env", tasks)
    twice = [good[0], good[0].model_copy(update={"id": "other"})]
    with pytest.raises(PluginError, match=r"more than one, or one not asked for, for task\(s\) \['t0'\].*none for"
                                          r"|none for task\(s\) \['t1'\]; more than one"):
        score_evaluation(twice, "eval", "env", tasks)
    with pytest.raises(PluginError, match=r"an EvalResult of 0 task\(s\) for 2 task\(s\)"):
        score_evaluation(EvalResult(split="eval", per_category={}, n_tasks=0), "eval", "env", tasks)
    with pytest.raises(PluginError, match=r"not percentages .*'c: nan'"):
        score_evaluation(EvalResult(split="eval", per_category={"c": math.nan}, n_tasks=2), "eval", "env", tasks)


# --- the store's own refusal: a conflict only when another writer caused it ---------------------------------


def _store(tmp_path) -> RunStore:
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="n", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    return store


def _record(store: RunStore, step: int, *trajectories: Trajectory) -> None:
    store.record_step("r", step=step, epoch=0, trajectories=list(trajectories), labels=[], label_weights={},
                      state=CapabilityState(), interface_revision=0, metrics={}, timings={})


def _plain(exc: BaseException) -> str:
    said = str(exc)
    assert isinstance(exc, StoreError) and not isinstance(exc, WriteConflict), repr(exc)
    assert "another process" not in said and not [raw for raw in RAW if raw in said], said
    assert "\n" not in said, said
    return said


def test_the_store_refusing_ids_another_step_holds_says_so_not_another_process(tmp_path):
    store = _store(tmp_path)
    _record(store, 0, Trajectory(id="t:0", task_id="t", category="c", group="0:t", reward=1.0))
    with pytest.raises(StoreError) as raised:  # the same id in the next step: this process's own data
        _record(store, 1, Trajectory(id="t:0", task_id="t", category="c", group="1:t", reward=0.0))
    said = _plain(raised.value)
    assert said == ("step 1 of run r could not be recorded: the store holds trajectory ids ['t:0' (run r, step 0, "
                    "train)] already; a trajectory's id must be unique across the store (Trajectory.id's default, a "
                    "fresh uuid4, is); nothing of it was written."), said
    assert [s.step for s in store.steps("r")] == [0]
    # Its evaluation, the same.
    result = EvalResult.from_trajectories("eval", [Trajectory(id="t:0", task_id="t", category="c", group="e")])
    with pytest.raises(StoreError) as raised:
        store.add_evaluation("r", 2, result)
    assert _plain(raised.value).startswith("the evaluation at step 2 of run r could not be recorded: the store "
                                           "holds trajectory ids ['t:0' (run r, step 0, train)] already")
    assert store.evaluations("r") == []


def test_the_store_refuses_an_id_twice_in_one_write_and_a_reward_that_is_not_finite(tmp_path):
    store = _store(tmp_path)
    twice = [Trajectory(id="x", task_id=f"t{i}", category="c", group="g", reward=1.0) for i in range(2)]
    with pytest.raises(StoreError) as raised:
        store.add_evaluation("r", 0, EvalResult.from_trajectories("eval", twice))
    assert _plain(raised.value) == ("the evaluation at step 0 of run r could not be recorded: trajectory ids ['x'] "
                                    "appear more than once in it; a trajectory's id must be unique across the store "
                                    "(Trajectory.id's default, a fresh uuid4, is); nothing of it was written.")
    nan = Trajectory(task_id="t", category="c", group="g")
    nan.reward = float("nan")  # set after validation, as an environment fills a trajectory in
    with pytest.raises(StoreError) as raised:
        _record(store, 0, nan)
    assert _plain(raised.value) == (f"step 0 of run r could not be recorded: the reward of trajectory {nan.id!r} is "
                                    "nan, not a finite number; nothing of it was written.")
    assert store.steps("r") == [] and store.evaluations("r") == [] and store.trajectories("r") == []


# --- where a stage failed ----------------------------------------------------------------------------------


BROKEN_ENGINE = '''
from seal_platform import hookimpl
from seal_platform.registry import EngineSpec


class BrokenEngine:
    name = "broken-engine"

    def generate(self, conversations, sampling):
        picked = []
        return [picked[0]]  # IndexError, here

    def count_tokens(self, conversation):
        return 0

    def close(self):
        pass


@hookimpl
def register_rollout_engines():
    return [EngineSpec("broken-engine", lambda ctx: BrokenEngine(), "raises in generate")]
'''


def test_a_failure_in_another_plugin_s_engine_names_that_plugin_and_where_it_was_raised(toy_site, toy_recipe,
                                                                                     monkeypatch):
    make_dist(toy_site, "seal-brokeneng", "0.1.0", {"brokeneng": "brokeneng_plugin"},
              {"brokeneng_plugin.py": BROKEN_ENGINE})
    sys.modules.pop("brokeneng_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    runner, store = _runner(toy_recipe, ["plugins.allow=[toy,brokeneng]", "rollout.engine=broken-engine",
                                         "training.steps=1"])
    said = _fails(runner, store)
    line = BROKEN_ENGINE.splitlines().index("        return [picked[0]]  # IndexError, here") + 1
    assert said == ("the 'evaluate' stage of plugin 'toy' failed in the code of plugin 'brokeneng' (generate, which "
                    "'toy' called): IndexError: list index out of range "
                    f"(at {toy_site / 'brokeneng_plugin.py'}:{line})"), said


def test_a_failure_in_the_stage_owner_s_code_says_where_it_was_raised(toy_site, toy_recipe):
    runner, store = _runner(toy_recipe, ["settings.toy.fail_in=reweight", "training.steps=1"])
    said = _fails(runner, store)
    source = (toy_site / "toy_plugin.py").read_text().splitlines()
    line = source.index('            raise RuntimeError(f"toy failure in {name}")') + 1
    assert said == (f"the 'reweight' stage failed in plugin 'toy': RuntimeError: toy failure in reweight "
                    f"(at {toy_site / 'toy_plugin.py'}:{line})"), said


def test_plugin_of_module_finds_a_plugin_s_package_and_leaves_the_core_out():
    from seal_platform.stages import plugin_of_module

    modules = {"grpo": "seal_platform_plugins.grpo.plugin", "bfcl": "seal_platform_plugins.bfcl.plugin",
               "lib": "audit_library.plugin", "diag2": "audit_library.diag2", "single": "single_module",
               "builtin": "seal_platform.some_builtin"}
    assert plugin_of_module("seal_platform_plugins.grpo.trainer", modules) == "grpo"
    assert plugin_of_module("seal_platform_libs.policy.engines.hf", modules) is None  # a library: the caller's
    assert plugin_of_module("seal_platform_plugins.bfcl.plugin", modules) == "bfcl"
    assert plugin_of_module("audit_library.diag2", modules) == "diag2"  # its own module
    assert plugin_of_module("audit_library.helpers", modules) is None  # two plugins' package: whose, unsaid
    assert plugin_of_module("audit_library.helpers", modules, prefer="lib") == "lib"
    assert plugin_of_module("seal_platform.stages", modules) is None  # the core's package is no plugin's
    assert plugin_of_module("single_module", modules) == "single"
    assert plugin_of_module("torch.nn.functional", modules) is None


# --- labels ------------------------------------------------------------------------------------------------


def _with_diagnoser(toy_site, toy_recipe, monkeypatch, label: str, steps: int = 1):
    make_dist(toy_site, "seal-multi", "0.1.0", {"multi": "multi_plugin"},
              {"multi_plugin.py": diagnoser_source(label=label)})
    sys.modules.pop("multi_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    return _runner(toy_recipe, ["plugins.allow=[toy,multi]", f"training.steps={steps}",
                                "diagnosis.diagnosers=[toy,multi]", "diagnosis.primary=toy"])


@pytest.mark.parametrize("label", ["", "  "])
def test_an_empty_label_is_refused(toy_site, toy_recipe, monkeypatch, label):
    runner, store = _with_diagnoser(toy_site, toy_recipe, monkeypatch, label)
    said = _fails(runner, store)
    assert said.startswith(f"plugin 'multi' returned a label from 'diagnose' ({label!r} for turn 0 of "
                           "trajectory "), said
    assert said.endswith("source 'multi') that is empty: a label names what happened in the turn (one of "
                         "['ok'])."), said
    assert store.steps(runner.run_id) == [] and store.labels(runner.run_id) == []


def test_undeclared_labels_are_kept_with_one_event_per_step(toy_site, toy_recipe, monkeypatch):
    runner, store = _with_diagnoser(toy_site, toy_recipe, monkeypatch, "made_up", steps=2)
    assert runner.run().status == "completed"
    assert {lab.label for lab in store.labels(runner.run_id) if lab.source == "multi"} == {"made_up"}  # kept
    events = [e for e in store.events(runner.run_id) if e.kind == "labels_undeclared"]
    assert [e.data for e in events] == [{"step": 0, "diagnosers": {"multi": ["made_up"]}},
                                        {"step": 1, "diagnosers": {"multi": ["made_up"]}}]
    assert events[0].message == ("step 0: labels that no diagnoser declares (DiagnoserSpec.labels) were kept and "
                                 "count as any other (diagnoser 'multi': ['made_up']); declare them, or fix the "
                                 "diagnoser if they are mistakes.")


def test_a_label_another_diagnoser_declares_is_no_event(toy_site, toy_recipe, monkeypatch):
    # The LLM judge's fallback: the heuristic diagnoser's label under the judge's own source.
    runner, store = _with_diagnoser(toy_site, toy_recipe, monkeypatch, "wrong_sum")
    assert runner.run().status == "completed"
    assert [e for e in store.events(runner.run_id) if e.kind == "labels_undeclared"] == []
