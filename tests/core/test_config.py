"""Recipes: validation of core keys and plugin sections, overrides, all errors at once."""

from __future__ import annotations

import pytest
import yaml

from seal_platform.config import RunConfig, apply_overrides, parse_override, resolve_recipe_path
from seal_platform.errors import ConfigError
from seal_platform.planning import check_recipe, load_recipe
from seal_platform.plugins import make_plugin_manager


def _write(tmp_path, data, name="r.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_overrides_are_parsed_as_yaml_values():
    assert parse_override("training.steps=3") == (["training", "steps"], 3)
    assert parse_override("settings.grpo.lr=1e-5") == (["settings", "grpo", "lr"], 1e-5)
    assert parse_override("diagnosis.diagnosers=[bfcl, llm_judge]") == (
        ["diagnosis", "diagnosers"],
        ["bfcl", "llm_judge"],
    )
    assert parse_override("stages.reweight=null") == (["stages", "reweight"], None)
    data = apply_overrides({"training": {"steps": 1}}, ["training.steps=4", "settings.bfcl.categories=[a]"])
    assert data == {"training": {"steps": 4}, "settings": {"bfcl": {"categories": ["a"]}}}
    for bad in ("training.steps", "=3", "training..steps=1"):
        with pytest.raises(ConfigError, match="key.sub=value"):
            parse_override(bad)
    with pytest.raises(ConfigError, match="holds a value, not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])
    # With a problems list, each bad override is one problem and the others still apply.
    problems: list = []
    data = apply_overrides({"seed": 1}, ["seed.x=2", "=3", "training.steps=4"], problems=problems)
    assert data == {"seed": 1, "training": {"steps": 4}}
    assert [(p.where, p.source) for p in problems] == [
        ("seed.x", "override 'seed.x=2'"),
        ("(override)", "override '=3'"),
    ]
    assert "'seed' holds a value, not a section" in str(problems[0]) and "key.sub=value" in str(problems[1])


def test_a_bad_override_is_one_of_the_problems_listed_not_the_only_one(tmp_path):
    path = _write(tmp_path, {"environment": "toy", "training": {"steps": 1}})
    config, issues, _ = load_recipe(str(path), ["training.steps.x=1", "seed=abc", "colour=blue"])
    assert config is None
    assert [i.source for i in issues] == [
        "override 'training.steps.x=1'",
        "override 'seed=abc'",
        "override 'colour=blue'",
    ]


def test_every_core_error_is_reported_with_its_place(tmp_path):
    path = _write(tmp_path, {"environment": "toy", "seed": "abc", "training": {"stepz": 3, "group_size": 0},
                             "rollout": {"temperature": -1}, "colour": "blue"})
    config, issues, _ = load_recipe(str(path), [])
    assert config is None
    where = {i.where: i for i in issues}
    assert set(where) == {"seed", "training.stepz", "training.group_size", "rollout.temperature", "colour"}
    assert where["colour"].what == "unknown key" and "spelling" in where["colour"].fix
    assert "got 'abc'" in where["seed"].what


def test_missing_environment_is_reported():
    _config, issues = RunConfig.model_validate, None
    from seal_platform.config import validate_core

    config, issues = validate_core({})
    assert config is None and [i.where for i in issues] == ["environment"]


def test_plugin_sections_and_names_are_checked_against_loaded_plugins(toy_site, tmp_path):
    path = _write(tmp_path, {
        "environment": "nope", "plugins": {"allow": ["toy"]},
        "rollout": {"engine": "warp-drive"},
        "stages": {"optimize": "grpo-missing", "reweight": "toy"},
        "diagnosis": {"diagnosers": ["toy", "oracle"]},
        "settings": {"toy": {"n_tasks": "many", "colour": 1}, "bfcl": {"x": 1}},
    })
    config, issues, _ = load_recipe(str(path), [])
    assert not issues
    host = make_plugin_manager(allow=config.plugins.allow)
    plan, issues = check_recipe(config, host)
    assert plan is None
    where = sorted(i.where for i in issues)
    assert where == ["diagnosis.diagnosers", "environment", "rollout.engine", "settings.bfcl",
                     "settings.toy.colour", "settings.toy.n_tasks", "stages.optimize"]
    text = "\n".join(map(str, issues))
    assert "registered environments: toy" in text and "registered engines: toy-engine" in text
    assert "plugin 'grpo-missing' is not installed" in text


def test_valid_recipe_resolves_settings_with_defaults(toy_site, toy_recipe):
    config, issues, _ = load_recipe(str(toy_recipe), ["settings.toy.start_skill=0.5"])
    host = make_plugin_manager(allow=["toy"])
    plan, issues = check_recipe(config, host)
    assert not issues
    assert plan.settings["toy"].start_skill == 0.5 and plan.settings["toy"].skill_step == 0.1
    assert plan.primary_diagnoser == "toy" and plan.env_owner == "toy"


def test_config_hash_changes_with_any_value(toy_recipe):
    a, _, _ = load_recipe(str(toy_recipe), [])
    b, _, _ = load_recipe(str(toy_recipe), ["seed=8"])
    c, _, _ = load_recipe(str(toy_recipe), [])
    assert a.config_hash() == c.config_hash() != b.config_hash()


def test_bad_yaml_and_missing_recipe_are_clear(tmp_path):
    path = _write(tmp_path, "training: [1, 2\n")
    with pytest.raises(ConfigError, match=r"r.yaml:\d+:\d+: not valid YAML"):
        load_recipe(str(path), [])
    with pytest.raises(ConfigError, match="not found: give a path to a YAML file or one of the shipped recipes"):
        resolve_recipe_path("no-such-recipe")
    path = _write(tmp_path, "- a\n- b\n", "list.yaml")
    with pytest.raises(ConfigError, match="a recipe is a YAML mapping"):
        load_recipe(str(path), [])


def test_shipped_recipes_parse_and_ablations_differ_only_in_switches():
    from seal_platform.config import load_recipe_data, validate_core
    from seal_platform.recipe_keys import RECIPES_DIR

    recipes = {p.stem: p for p in RECIPES_DIR.glob("*.yaml")}
    assert {"seal", "seal-embedded", "vanilla-grpo", "seal-no-env-adaptation", "seal-no-reweighting",
            "seal-static-weights"} <= set(recipes)
    configs = {}
    for name, path in recipes.items():
        config, issues = validate_core(load_recipe_data(path))
        assert not issues, (name, [str(i) for i in issues])
        configs[name] = config
    assert configs["vanilla-grpo"].stages.reweight is None and configs["vanilla-grpo"].stages.evolve_interface is None
    assert configs["seal-no-env-adaptation"].stages.reweight == "grpo"
    assert configs["seal-no-env-adaptation"].training == configs["seal"].training


def test_extends_merges_and_detects_cycles(tmp_path):
    from seal_platform.config import load_recipe_data

    _write(tmp_path, {"environment": "toy", "training": {"steps": 3, "group_size": 4}}, "base.yaml")
    child = _write(tmp_path, {"extends": "base", "training": {"steps": 1}, "stages": {"reweight": None}}, "child.yaml")
    data = load_recipe_data(child)
    assert data == {"environment": "toy", "training": {"steps": 1, "group_size": 4}, "stages": {"reweight": None}}
    _write(tmp_path, {"extends": "b.yaml"}, "a.yaml")
    _write(tmp_path, {"extends": "a.yaml"}, "b.yaml")
    with pytest.raises(ConfigError, match="goes round in a circle"):
        load_recipe_data(tmp_path / "a.yaml")


def test_alias_bombs_deep_nesting_and_huge_seeds_are_refused_with_one_paragraph(tmp_path):
    import time

    from click.testing import CliRunner

    from seal_platform.cli import cli

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("environment: toy\nsettings:\n  engine:\n    vllm:\n      extra_args:\n" +
                    "".join(f"        {line}\n" for line in lines))
    assert len(bomb.read_bytes()) < 1000  # a few hundred bytes, 10^9 values once expanded
    deep = tmp_path / "deep.yaml"
    deep.write_text("environment: toy\nsettings: " + "[" * 600 + "]" * 600 + "\n")
    seed = tmp_path / "seed.yaml"
    seed.write_text(f"environment: toy\nseed: {2**64}\n")
    loop = tmp_path / "loop.yaml"  # an alias inside the value it names: infinite (it used to hang, memory growing)
    loop.write_text("environment: toy\nsettings:\n  a: &a [1, {b: *a}]\n")
    runner = CliRunner()
    for path, words in ((bomb, "alias bomb"), (deep, "nested"), (seed, "seed"), (loop, "infinite")):
        started = time.perf_counter()
        for cmd in (["config", "validate", str(path)], ["run", str(path), "--quiet"]):
            result = runner.invoke(cli, cmd)
            assert result.exit_code != 0 and words in result.output, (cmd, result.output[-500:])
            assert "Traceback" not in result.output
        assert time.perf_counter() - started < 20
    ok = tmp_path / "ok.yaml"  # ordinary anchors and aliases still work
    ok.write_text("environment: toy\ntraining: &t {steps: 2}\nevaluation: {every: 1}\n"
                  "settings: {x: &x [1, 2], y: [*x, *x, {z: *x}]}\n")
    from seal_platform.config import load_recipe_data

    assert load_recipe_data(ok)["training"] == {"steps": 2}


def test_misspelt_keys_get_a_suggestion_and_name_their_source(tmp_path):
    base = _write(tmp_path, "environment: toy\nrollout:\n  temprature: 0.5\n", name="base.yaml")
    path = _write(tmp_path, "extends: base.yaml\nname: t\ntraining:\n  steps: 2\n  stepz: 3\n")
    config, issues, _ = load_recipe(str(path), ["trainng.steps=2", "seed=x"])
    assert config is None
    by_where = {i.where: i for i in issues}
    assert set(by_where) == {"training.stepz", "rollout.temprature", "trainng", "seed"}
    # In the recipe file, at the key's line; in the recipe it extends, at that file's line.
    assert by_where["training.stepz"].source == f"{path}:5"
    assert by_where["training.stepz"].fix == "did you mean 'training.steps'?"
    assert by_where["rollout.temprature"].source == f"{base}:3"
    assert by_where["rollout.temprature"].fix == "did you mean 'rollout.temperature'?"
    # From the command line: the override, never the file.
    assert by_where["trainng"].source == "override 'trainng.steps=2'"
    assert by_where["trainng"].fix == "did you mean 'training'?"
    assert by_where["seed"].source == "override 'seed=x'"
    assert str(by_where["trainng"]) == ("override 'trainng.steps=2': trainng: unknown key (did you mean "
                                        "'training'?)")
    # Nothing close: no guess.
    _, issues, _ = load_recipe(str(path), ["zzzzzz=1"])
    assert [i.fix for i in issues if i.where == "zzzzzz"] == ["remove it or check its spelling"]


def test_plugin_setting_typos_get_suggestions_from_the_plugins_model(toy_site, toy_recipe):
    from seal_platform.planning import plan_recipe

    with pytest.raises(ConfigError) as caught:
        plan_recipe(str(toy_recipe), ["settings.toy.n_taskz=3", "settings.toyy.x=1"])
    message = str(caught.value)
    assert "problem(s) in the recipe" in message and "and its command-line overrides" in message
    assert ("override 'settings.toy.n_taskz=3': settings.toy.n_taskz: unknown key (did you mean "
            "'settings.toy.n_tasks'?)") in message
    assert (
        "override 'settings.toyy.x=1': settings.toyy: no loaded plugin owns this section (did you mean 'settings.toy'?"
        in message
    )
    # The same key misspelt in the file is blamed on the file, at its line.
    text = toy_recipe.read_text().replace("n_tasks:", "n_taskz:")
    toy_recipe.write_text(text)
    line = 1 + text.splitlines().index(next(ln for ln in text.splitlines() if "n_taskz" in ln))
    with pytest.raises(ConfigError) as caught:
        plan_recipe(str(toy_recipe))
    assert f"{toy_recipe}: 1 problem(s) in the recipe" in str(caught.value)
    assert f"{toy_recipe}:{line}: settings.toy.n_taskz: unknown key (did you mean 'settings.toy.n_tasks'?)" in str(
        caught.value
    )


def test_plugin_sections_refuse_unknown_keys_unless_their_model_says_otherwise():
    from pydantic import BaseModel, ConfigDict

    from seal_platform.config import RunConfig, validate_settings

    class Inner(BaseModel):
        depth: int = 1

    class Loose(BaseModel):  # says nothing about unknown keys
        alpha: float = 0.5
        inner: Inner = Inner()
        many: list[Inner] = []

    class Open(BaseModel):  # lets them through on purpose
        model_config = ConfigDict(extra="allow")
        alpha: float = 0.5

    class NestedOpen(BaseModel):  # a nested model that lets them through: the author's choice holds
        inner: Open = Open()

    models = {"loose": Loose, "open": Open, "nested": NestedOpen}

    def problems(settings: dict) -> list[str]:
        _, issues = validate_settings(RunConfig(environment="toy", settings=settings), models)
        return [issue.where for issue in issues]

    assert problems({"loose": {"alpha": 1.0, "inner": {"depth": 2}, "many": [{"depth": 3}]}}) == []
    assert problems({"loose": {"alpah": 3}}) == ["settings.loose.alpah"]
    assert problems({"loose": {"inner": {"detph": 2}}}) == ["settings.loose.inner.detph"]
    assert problems({"loose": {"many": [{"depth": 1}, {"dpeth": 2}]}}) == ["settings.loose.many.1.dpeth"]
    settings, issues = validate_settings(RunConfig(environment="toy", settings={"open": {"beta": 2}}), models)
    assert issues == [] and settings["open"].model_extra == {"beta": 2}
    assert problems({"nested": {"inner": {"beta": 2}}}) == []
