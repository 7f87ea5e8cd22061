"""evaluation.benchmarks: a run evaluates more than one benchmark at the same steps; rows are keyed by
benchmark and `seal-platform show` and `compare` list them side by side."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli, load_recipe
from seal_platform.loop import Runner
from seal_platform.planning import check_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore

OOD = "evaluation.benchmarks=[{environment: toy, split: ood, name: toy-ood, max_tasks: 4}]"


def _plan(recipe, overrides):
    config, issues, path = load_recipe(str(recipe), overrides)
    assert not issues, issues
    host = make_plugin_manager(allow=config.plugins.allow, block=config.plugins.block, required=config.named_plugins())
    return config, host, path


def test_extra_benchmarks_are_evaluated_stored_and_shown_side_by_side(toy_site, toy_recipe):
    config, host, path = _plan(toy_recipe, ["training.steps=2", "evaluation.every=1", OOD])
    store = RunStore(config.store_url())
    runner = Runner(prepare(config, host, str(path)), host, store, recipe=str(path))
    runner.run()
    rows = store.evaluations(runner.run_id)
    by_bench = {}
    for row in rows:
        by_bench.setdefault(row.benchmark, set()).add(row.step)
    assert by_bench == {"toy": {0, 1, 2}, "toy-ood": {0, 1, 2}}
    assert {r.n_tasks for r in rows if r.benchmark == "toy-ood"} == {4}
    # The split asked for, whatever the plugin's EvalResult says (the toy plugin always says "eval").
    assert {r.split for r in rows if r.benchmark == "toy-ood"} == {"ood"}
    shown = CliRunner().invoke(cli, ["show", runner.run_id, "--store", config.store_url()], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "evaluations on toy-ood" in shown.output and "benchmarks side by side" in shown.output


def test_compare_lists_every_benchmark_as_its_own_block(toy_site, toy_recipe):
    """Each run's column holds its final score on the training environment AND on every extra benchmark,
    each read from that benchmark's own rows (not merged into the environment's)."""
    ids, store = [], None
    for steps in (1, 2):
        config, host, path = _plan(toy_recipe, [f"training.steps={steps}", OOD])
        store = RunStore(config.store_url())
        runner = Runner(prepare(config, host, str(path)), host, store, recipe=str(path))
        runner.run()
        ids.append(runner.run_id)
    result = CliRunner().invoke(cli, ["compare", *ids, "--store", config.store_url(), "--json"])
    assert result.exit_code == 0, result.output
    rows = {(r["eval_set"], r["category"]): r["values"] for r in json.loads(result.output)["rows"]}
    assert {s for s, _ in rows} == {"toy:eval", "toy-ood:ood"}
    for i, run_id in enumerate(ids):
        final = max(r.step for r in store.evaluations(run_id))
        for bench, split in (("toy", "eval"), ("toy-ood", "ood")):
            stored = {
                r.category: r.pass_rate for r in store.evaluations(run_id) if r.benchmark == bench and r.step == final
            }
            assert stored
            for cat, rate in stored.items():
                assert rows[(f"{bench}:{split}", cat)][i] == pytest.approx(rate)
            assert rows[(f"{bench}:{split}", "average")][i] == pytest.approx(sum(stored.values()) / len(stored))
    shown = CliRunner().invoke(cli, ["compare", *ids, "--store", config.store_url()], terminal_width=200)
    assert shown.exit_code == 0 and "toy-ood:ood" in shown.output and "toy:eval" in shown.output


def test_unknown_or_duplicate_benchmarks_are_recipe_errors(toy_site, toy_recipe):
    config, host, _ = _plan(toy_recipe, ["evaluation.benchmarks=[nowhere, toy]"])
    plan, issues = check_recipe(config, host)
    assert plan is None
    text = " ".join(str(i) for i in issues)
    assert "evaluation.benchmarks[0]: no loaded plugin registers environment 'nowhere'" in text
    assert "evaluation.benchmarks[1]: the name 'toy' is taken" in text


# A benchmark plugin: environment "twice" (the toy's tasks), whose evaluate runs RESULT with ``one(task)``
# at hand: a fresh trajectory of ``task``.
TWICE = '''
from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec
from seal_platform.types import EvalResult, Trajectory

import toy_plugin


@hookimpl
def register_environments():
    return [EnvironmentSpec(
        "twice", lambda ctx: toy_plugin.ToyEnvironment(ctx.settings_for("toy", toy_plugin.ToySettings))
    )]


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    def one(task, **fields):
        return Trajectory(task_id=task.id, category=task.category, group=f"twice:{task.id}", **fields)
    RESULT
'''


@pytest.mark.parametrize("result, said", [
    # Two results for the first task, none for the last: the count is right, the tasks are not.
    ("return [one(tasks[0]), *[one(t) for t in tasks[:-1]]]",
     "evaluate of plugin 'twice' returned 4 trajectories for 4 task(s); it must return one per task"),
    ("return [one(t) for t in tasks] + [one(tasks[0])]",
     "more than one, or one not asked for, for task(s) ['ood-0']"),
    ('return EvalResult(split="ood", per_category={"big": 50.0}, n_tasks=len(tasks) + 1)',
     "evaluate of plugin 'twice' returned an EvalResult of 5 task(s) for 4 task(s)"),
    # Ids built from the task: unique in one evaluation, but the evaluation at step 1 repeats step 0's.
    ("return [one(t, id=f'twice-{t.id}') for t in tasks]",
     "evaluate of plugin 'twice' returned trajectories whose ids are already in the run store: ['twice-ood-0' (run "),
])
def test_a_benchmark_s_evaluation_is_checked_as_the_run_s_own_is(toy_site, toy_recipe, monkeypatch, result, said):
    import sys

    from seal_platform.errors import PluginError, StoreError

    from .conftest import make_dist

    make_dist(toy_site, "seal-twice", "0.1.0", {"twice": "twice_plugin"},
              {"twice_plugin.py": TWICE.replace("RESULT", result)})
    sys.modules.pop("twice_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    config, host, path = _plan(toy_recipe, [
        "plugins.allow=[toy,twice]", "training.steps=1", "evaluation.every=1",
        "evaluation.benchmarks=[{environment: twice, split: ood, name: twice-ood, max_tasks: 4}]"])
    store = RunStore(config.store_url())
    runner = Runner(prepare(config, host, str(path)), host, store, recipe=str(path))
    with pytest.raises((PluginError, StoreError)) as raised:
        runner.run()
    assert type(raised.value) is PluginError and said in str(raised.value), repr(raised.value)
    stored = {(row.benchmark, row.step) for row in store.evaluations(runner.run_id)}
    # Nothing of the refused evaluation is stored: the last one refused, the ids' case at step 1.
    assert ("twice-ood", 0) not in stored or said.startswith("evaluate of plugin 'twice' returned trajectories whose")
    assert ("twice-ood", 1) not in stored


BROKEN = '''
from seal_platform import hookimpl
from seal_platform.registry import EnvironmentSpec

import toy_plugin


def build(ctx):
    FAILURE


@hookimpl
def register_environments():
    return [EnvironmentSpec("broken", build)]


@hookimpl
def evaluate(ctx, environment, engine, tasks, step):
    raise AssertionError("never reached: the benchmark is refused at set-up")
'''


@pytest.mark.parametrize("failure, said", [
    ('raise RuntimeError("no such dataset")', "no such dataset"),
    ("return toy_plugin.ToyEnvironment(ctx.settings_for('toy', toy_plugin.ToySettings))",
     "listing the tasks of split 'nowhere' of plugin 'broken' failed"),
])
def test_a_broken_benchmark_is_refused_at_set_up_before_the_model_and_any_step(toy_site, toy_recipe, monkeypatch,
                                                                               failure, said):
    """With evaluation.before_training off the first evaluation comes after training: a benchmark whose
    factory fails, or that lacks its split, used to end the run only there. It is built at set-up now."""
    import sys

    from seal_platform.errors import PluginError

    from .conftest import make_dist

    # A module name of its own: test_plugins' "broken_plugin" (one that fails at import) must not find this one
    # already imported in the same session.
    make_dist(toy_site, "seal-broken-benchmark", "0.1.0", {"broken": "broken_benchmark_plugin"},
              {"broken_benchmark_plugin.py": BROKEN.replace("FAILURE", failure)})
    sys.modules.pop("broken_benchmark_plugin", None)
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    config, host, path = _plan(toy_recipe, [
        "plugins.allow=[toy,broken]", "training.steps=3", "evaluation.every=3", "evaluation.before_training=false",
        "evaluation.benchmarks=[{environment: broken, split: nowhere}]"])
    store = RunStore(config.store_url())
    runner = Runner(prepare(config, host, str(path)), host, store, recipe=str(path))
    with pytest.raises(PluginError) as raised:
        runner.run()
    assert said in str(raised.value), repr(raised.value)
    toy = next(plugin for name, plugin in host.pm.list_name_plugin() if name == "toy")
    assert toy.engines_built == 0  # refused before the model load
    assert store.steps(runner.run_id) == []  # and before any step
