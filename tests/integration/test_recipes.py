"""Every shipped recipe validates against the installed default plugins (their settings sections included)."""

from __future__ import annotations

import pytest

from seal_platform.planning import check_recipe, load_recipe, plugin_host_for
from seal_platform.recipe_keys import RECIPES_DIR

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


@pytest.mark.parametrize("base, prefix", [("seal", "seal-"), ("smarthome-seal", "smarthome-")])
def test_label_controls_change_only_the_primary_diagnoser(base, prefix):
    stock, _, _ = load_recipe(base, [])
    for name, control in (("random-labels", "random_labels"), ("fixed-label", "fixed_label")):
        config, _, _ = load_recipe(prefix + name, [])
        assert config.diagnosis.primary == control
        assert config.diagnosis.diagnosers == [*stock.diagnosis.diagnosers, control]
        assert config.model_copy(update={"name": stock.name, "diagnosis": stock.diagnosis}) == stock


def test_smarthome_ablations_match_the_stock_ones():
    """The CPU ablation set switches the same stages and settings as the paper's ablations of `seal`."""
    stock, _, _ = load_recipe("smarthome-seal", [])
    for name in ("vanilla-grpo", "no-env-adaptation", "no-reweighting", "static-weights"):
        paper, _, _ = load_recipe(
            "seal" if name == "seal" else (name if name == "vanilla-grpo" else f"seal-{name}"), []
        )
        cpu, _, _ = load_recipe(f"smarthome-{name}", [])
        assert (cpu.stages.evolve_interface is None) == (paper.stages.evolve_interface is None)
        assert (cpu.stages.reweight is None) == (paper.stages.reweight is None)
        assert cpu.settings["apatch"]["mode"] == paper.settings["apatch"]["mode"]
        assert bool(cpu.diagnosis.diagnosers) == bool(paper.diagnosis.diagnosers)
        assert cpu.training == stock.training and cpu.settings["grpo"] == stock.settings["grpo"]
