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
            stored = {r.category: r.pass_rate for r in store.evaluations(run_id) if r.benchmark == bench and r.step == final}
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
