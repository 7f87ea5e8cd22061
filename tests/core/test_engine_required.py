"""``rollout.engine`` has no default: the engine loads the policy, so a recipe names it. A recipe without one is
refused where a run needs an engine, with the registered engines listed; shipped recipes name theirs, and a
stored run (whose config lists every key) loads as it ran."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.config import RunConfig, load_recipe_data, stored_config

REPO = Path(__file__).resolve().parents[2]


def test_a_recipe_without_an_engine_is_refused_with_the_registered_engines(toy_site, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"environment": "toy", "stages": {"evolve_interface": None, "reweight": None,
                                                                       "optimize": "toy"}}))
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "rollout.engine: not set" in text and "toy-engine" in text, text
    named = CliRunner().invoke(cli, ["config", "validate", str(recipe), "rollout.engine=toy-engine"])
    assert named.exit_code == 0, named.output


def test_every_shipped_recipe_names_its_engine():
    recipes = [*REPO.glob("recipes/*.yaml"), *REPO.glob("examples/*/recipe.yaml")]
    assert len(recipes) > 20
    unnamed = [p.name for p in recipes if not (load_recipe_data(p).get("rollout") or {}).get("engine")]
    assert not unnamed, unnamed


def test_a_stored_run_keeps_its_engine():
    stored = RunConfig(environment="toy", rollout={"engine": "hf"}).model_dump(mode="json")
    assert stored_config(stored).rollout.engine == "hf"
    assert RunConfig(environment="toy").rollout.engine is None
