"""Defects a command-line audit found in the listings and the recipe checks: `runs` before the first run (no
store yet, or an empty one), `config validate` without a RECIPE, and a section such as
`rollout.dynamic_sampling` given a single value. (`show` at 80 columns: tests/core/test_narrow_tables.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.config import validate_core
from seal_platform.recipe_keys import DEFAULT_RECIPE


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def no_store_named(monkeypatch, tmp_path):
    """A fresh directory where no run was made: runs/store.sqlite does not exist and nothing names another."""
    monkeypatch.delenv("SEAL_PLATFORM_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- 2. `runs` before the first run ---------------------------------------------------------------------


def test_runs_before_the_first_run_lists_none_and_makes_no_store(runner, no_store_named):
    listed = runner.invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == []
    table = runner.invoke(cli, ["runs"])
    assert table.exit_code == 0, table.output
    [hint] = table.output.strip().splitlines()  # one line, not an empty table
    assert hint.startswith("no runs yet in ") and "runs/store.sqlite" in hint, hint
    assert hint.endswith("start one with: seal-platform run [RECIPE]"), hint
    assert list(no_store_named.iterdir()) == []  # a listing makes no store (nor its folder)


def test_runs_of_an_empty_store_hints_how_to_start_one(runner, tmp_path):
    from seal_platform.store import RunStore

    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    RunStore(url).close()
    table = runner.invoke(cli, ["runs", "--store", url])
    assert table.exit_code == 0, table.output
    assert table.output == f"no runs yet in {url}; start one with: seal-platform run [RECIPE]\n"
    listed = runner.invoke(cli, ["runs", "--store", url, "--json"])
    assert listed.exit_code == 0 and json.loads(listed.output) == [], listed.output


def test_a_store_named_but_missing_is_an_error_for_runs_as_for_show(runner, no_store_named, monkeypatch):
    # A path given with --store (or in $SEAL_PLATFORM_STORE) that does not exist is likely a typo: `runs`
    # says so, as `show` does, and creates nothing.
    typo = no_store_named / "stroe.sqlite"
    for cmd in (["runs"], ["runs", "--json"], ["show", "x"]):
        result = runner.invoke(cli, [*cmd, "--store", str(typo)])
        assert result.exit_code == 2 and f"no run store at {typo}" in result.output, (cmd, result.output)
    monkeypatch.setenv("SEAL_PLATFORM_STORE", str(typo))
    for cmd in (["runs"], ["runs", "--json"], ["show", "x"]):
        result = runner.invoke(cli, cmd)
        assert result.exit_code == 2 and f"no run store at {typo}" in result.output, (cmd, result.output)
    assert list(no_store_named.iterdir()) == []


# --- 3. `config validate` without a RECIPE ----------------------------------------------------------------


def test_config_validate_defaults_its_recipe_as_config_show_does(runner, monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    result = runner.invoke(cli, ["config", "validate"])
    assert result.exit_code == 0, result.output
    assert f"{DEFAULT_RECIPE}.yaml: ok (config hash" in result.output, result.output
    shown = runner.invoke(cli, ["config", "show"])
    assert shown.exit_code == 0 and yaml.safe_load(shown.output)["name"], shown.output
    # Overrides alone apply to the default recipe, as `run training.steps=2` does.
    for command in ("validate", "show"):
        bad = runner.invoke(cli, ["config", command, "training.steps=-1"])
        assert bad.exit_code in (1, 2) and "override 'training.steps=-1'" in bad.output, (command, bad.output)
        assert "not found" not in bad.output, bad.output
    good = runner.invoke(cli, ["config", "validate", "training.steps=2"])
    assert good.exit_code == 0 and f"{DEFAULT_RECIPE}.yaml: ok" in good.output, good.output


# --- 4. a section given a single value --------------------------------------------------------------------


def test_dynamic_sampling_given_true_or_false_says_what_it_takes(runner, toy_recipe, toy_site):
    result = runner.invoke(cli, ["config", "validate", str(toy_recipe), "rollout.dynamic_sampling=false"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert ("override 'rollout.dynamic_sampling=false': rollout.dynamic_sampling: this is a section, not a single "
            "value (got False): it takes the keys enabled, max_rounds, tasks_per_round") in text, text
    assert "to turn it off, give rollout.dynamic_sampling.enabled=false" in text, text
    assert "valid dictionary" not in text and "DynamicSamplingConfig" not in text, text

    # In a recipe file: its line, and the same advice; `run` refuses it alike.
    data = yaml.safe_load(toy_recipe.read_text())
    data["rollout"]["dynamic_sampling"] = True
    recipe = Path(toy_recipe).with_name("ds.yaml")
    recipe.write_text(yaml.safe_dump(data))
    for cmd, status in ((["config", "validate", str(recipe)], 1), (["run", str(recipe), "--quiet"], 2)):
        result = runner.invoke(cli, cmd)
        text = " ".join(result.output.split())
        assert result.exit_code == status, result.output
        assert f"{recipe}:" in text and "rollout.dynamic_sampling: this is a section" in text, text
        assert "to turn it on, give rollout.dynamic_sampling.enabled=true" in text, text
        assert "'enabled: true' under 'dynamic_sampling:'" in text and "valid dictionary" not in text, text


def test_any_section_given_a_single_value_lists_its_keys():
    config, issues = validate_core({"environment": "toy", "rollout": {"dynamic_sampling": None}, "training": 3})
    assert config is None
    by_key = {issue.where: issue for issue in issues}
    assert set(by_key) == {"rollout.dynamic_sampling", "training"}, issues
    assert "it takes the keys enabled, max_rounds, tasks_per_round" in by_key["rollout.dynamic_sampling"].what
    assert by_key["rollout.dynamic_sampling"].fix == ("give its keys, e.g. rollout.dynamic_sampling.enabled=VALUE, "
                                                      "or leave it out for their defaults")
    assert "(got 3): it takes the keys steps, epochs" in by_key["training"].what
