"""The plugin's own tests: the platform's conformance check, the verifier through the hooks as the run loop
calls them, and one `seal-platform run` of recipe.yaml with the scripted engine. Run after
`pip install -e .` (from this folder): `pytest tests`."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("seal_myenv", reason="pip install -e examples/plugin-template")

from click.testing import CliRunner  # noqa: E402
from seal_myenv import plugin  # noqa: E402

from seal_platform.cli import cli  # noqa: E402
from seal_platform.config import RunConfig  # noqa: E402
from seal_platform.conformance import check_environment  # noqa: E402
from seal_platform.context import RunContext  # noqa: E402
from seal_platform.stages import collect_with, evaluate_with  # noqa: E402
from seal_platform.store import RunStore  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipe.yaml"


def test_the_plugin_passes_the_conformance_check():
    findings = check_environment(plugin.NAME, engine=plugin.ScriptedEngine.name)
    assert not [f for f in findings if f.failed], "\n".join(map(str, findings))


def test_episodes_are_verified_per_category(tmp_path):
    ctx = RunContext(config=RunConfig(environment=plugin.NAME), run_id="t", run_dir=tmp_path,
                     settings={plugin.NAME: plugin.MyEnvSettings(n_train=4, n_eval=4)})
    environment = plugin.MyEnvironment(ctx.settings_for(plugin.NAME, plugin.MyEnvSettings))
    engine = plugin.ScriptedEngine()
    trajectories = collect_with(plugin.collect, ctx=ctx, environment=environment, engine=engine,
                                tasks=environment.tasks("train")[:2], interface=environment.pristine_interface(),
                                group_size=2, step=0)
    # the scripted engine calls greet for direct requests only
    assert [(t.category, t.reward) for t in trajectories] == [("direct", 1.0)] * 2 + [("indirect", 0.0)] * 2
    assert trajectories[0].tool_calls[0].result.startswith("Hello, ")
    result = evaluate_with(plugin.evaluate, ctx=ctx, environment=environment, engine=engine,
                           tasks=environment.tasks("eval"), step=0)
    assert result.per_category == {"direct": 100.0, "indirect": 0.0} and result.n_tasks == 4


def test_a_run_of_the_recipe_completes(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    result = CliRunner().invoke(cli, ["run", str(RECIPE), f"runs_dir={tmp_path}", "--store", store_url, "--quiet"])
    assert result.exit_code == 0, result.output
    store = RunStore(store_url)
    [run] = store.list_runs()
    assert run.status == "completed"
    assert len(store.steps(run.id)) == 2
