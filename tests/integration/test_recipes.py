"""Every shipped recipe validates against the installed default plugins (their settings sections included)."""

from __future__ import annotations

import pytest

from seal_platform.planning import load_recipe, plugin_host_for
from seal_platform.config import RECIPES_DIR
from seal_platform.planning import check_recipe

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_shipped_recipe_is_valid(name):
    config, issues, _ = load_recipe(name, [])
    assert not issues, [str(i) for i in issues]
    plan, issues = check_recipe(config, plugin_host_for(config))
    assert not issues, [str(i) for i in issues]


def test_ablations_are_switches_of_the_stock_recipe():
    seal, _, _ = load_recipe("seal", [])
    vanilla, _, _ = load_recipe("vanilla-grpo", [])
    static, _, _ = load_recipe("seal-static-weights", [])
    assert vanilla.stages.evolve_interface is None and vanilla.stages.reweight is None
    assert vanilla.diagnosis.diagnosers == []
    assert static.settings["apatch"]["mode"] == "static" and seal.settings["apatch"]["mode"] == "dynamic"
    for other in (vanilla, static):
        assert other.training == seal.training and other.rollout == seal.rollout
        assert other.settings["grpo"] == seal.settings["grpo"]
