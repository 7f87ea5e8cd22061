"""Input defects a user audit found in the command line: mistyped `run` options, plugin settings written
without `settings.`, and the store `run` writes to under SEAL_PLATFORM_STORE."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner():
    return CliRunner()


# --- 1. an argument that looks like an option but is none of `run`'s ------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--resum", "X"], "no such option: --resum (did you mean --resume?)"),
        (["run", "smarthome-embedded", "--quite"], "no such option: --quite (did you mean --quiet?)"),
        (
            ["run", "smarthome-embedded", "training.steps=1", "--no-reprot"],
            "no such option: --no-reprot (did you mean --no-report?)",
        ),
        (["run", "--resume", "X", "--take-over"], "no such option: --take-over (did you mean --takeover?)"),
    ],
)
def test_run_refuses_a_mistyped_option_with_the_closest_one(runner, argv, message):
    result = runner.invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "not found" not in result.output and "not of the form" not in result.output


def test_run_refuses_an_unknown_option_listing_its_options(runner):
    result = runner.invoke(cli, ["run", "--zzzzzzzz"])
    assert result.exit_code == 2, result.output
    assert "no such option: --zzzzzzzz" in result.output and "--resume" in result.output
    assert "./--zzzzzzzz" in result.output  # how to name a recipe file that starts with '-'


@pytest.mark.parametrize(
    "argv", [["run", "--ray-address", "head:6379"], ["run", "seal-ray", "--ray-address=head:6379"]]
)
def test_run_reports_the_removed_ray_address_option_with_its_replacement(runner, argv):
    # docs/scaling.md, "Migrating recipes": `run --ray-address ADDR` -> the ray plugin's settings.
    result = runner.invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert "--ray-address" in result.output
    assert "settings.ray.enabled=true settings.ray.address=head:6379" in result.output
    assert "not found" not in result.output
    docs = (REPO / "docs" / "scaling.md").read_text()
    assert "| `run --ray-address ADDR` | `run RECIPE settings.ray.enabled=true settings.ray.address=ADDR` |" in docs


# --- 2. a plugin's settings written as a top-level key -----------------------------------------------------


@pytest.mark.parametrize(("override", "meant"), [
    ("grpo.overlong_filter=true", "settings.grpo.overlong_filter"),
    ("grpo.train_layrs=3", "settings.grpo.train_layers"),
    ("grpo.lora.rank=8", "settings.grpo.lora.rank"),
    ("policy.model=HuggingFaceTB/SmolLM2-135M-Instruct", "settings.policy.model"),
])
def test_a_plugin_section_at_the_top_level_names_its_settings_key(runner, override, meant):
    result = runner.invoke(cli, ["config", "validate", "smarthome-embedded", override])
    assert result.exit_code != 0
    assert f"did you mean {meant!r}?" in result.output, result.output
    assert "remove it or check its spelling" not in result.output
    if "lora" not in meant and "layrs" not in override:  # the hint is a real key (LoRA: not with train_layers)
        fixed = runner.invoke(cli, ["config", "validate", "smarthome-embedded", f"settings.{override}"])
        assert fixed.exit_code == 0, fixed.output


def test_a_plugin_section_at_the_top_level_of_a_recipe_file(runner, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"extends": "smarthome-embedded",
                                      "grpo": {"overlong_filter": True, "train_layers": 10}}))
    result = runner.invoke(cli, ["config", "validate", str(recipe)])
    assert result.exit_code != 0
    assert "did you mean 'settings.grpo.overlong_filter', 'settings.grpo.train_layers'?" in result.output, result.output


def _readme_keys() -> list[tuple[str, str]]:
    """Every backticked `section.key: value` or `section.key` of the README and of the default run's page (the
    README's details) whose section is a plugin's."""
    from seal_platform.planning import plugin_host_for

    sections = set(plugin_host_for(None).settings_models())
    found = []
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "default-run.md").read_text()
    for key, value in re.findall(r"`((?:settings\.)?[a-z_]+(?:\.[a-z_]+)+)(?:: ([^`]+))?`", text):
        if key.removeprefix("settings.").split(".")[0] in sections:
            found.append((key, value))
    return found


def test_the_readme_writes_plugin_settings_as_recipe_keys(runner):
    keys = _readme_keys()
    assert ("settings.grpo.overlong_filter", "true") in keys and ("settings.grpo.train_layers", "10") in keys
    shorthand = [key for key, _ in keys if not key.startswith("settings.")]
    assert not shorthand, f"README keys without settings.: {shorthand}"
    for key, value in [
        ("settings.grpo.overlong_filter", "true"),
        ("settings.grpo.train_layers", "10"),
        ("settings.grpo.logits_chunk_tokens", "1024"),
        ("settings.grpo.checkpoint_keep_attention", "true"),
    ]:
        assert (key, value) in keys or (key, "") in keys, key
        result = runner.invoke(cli, ["config", "validate", "smarthome-embedded", f"{key}={value}"])
        assert result.exit_code == 0, result.output
    # train_workers > 1 is a full fine-tune (smarthome-embedded trains a few layers): valid on seal-embedded.
    result = runner.invoke(cli, ["config", "validate", "seal-embedded", "settings.grpo.train_workers=2"])
    assert result.exit_code == 0, result.output


# --- 3. the store `run` writes to ------------------------------------------------------------------------------


def _toy(tmp_path: Path, **extra) -> Path:
    recipe = {
        "name": "toy", "seed": 7, "environment": "toy", "runs_dir": str(tmp_path / "runs"),
        "plugins": {"allow": ["toy"]},
        "training": {"steps": 1, "tasks_per_step": 2, "group_size": 2, "checkpoint_every": 1},
        "rollout": {"engine": "toy-engine", "workers": 1}, "evaluation": {"every": 1, "max_tasks": 2},
        "stages": {"evolve_interface": "toy", "reweight": "toy", "optimize": "toy"},
        "settings": {"toy": {"n_tasks": 4}}, **extra,
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _run_ids(store: Path) -> list[str]:
    from seal_platform.store import RunStore

    if not store.exists():
        return []
    opened = RunStore(f"sqlite:///{store}", read_only=True, create=False)
    try:
        return [row.id for row in opened.list_runs()]
    finally:
        opened.close()


def test_run_writes_to_the_store_seal_platform_store_names(runner, toy_site, tmp_path, monkeypatch):
    env_store = tmp_path / "elsewhere" / "c.sqlite"
    env_store.parent.mkdir()
    monkeypatch.setenv("SEAL_PLATFORM_STORE", str(env_store))
    result = runner.invoke(cli, ["run", str(_toy(tmp_path)), "--quiet", "--no-report"])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    assert _run_ids(env_store) == [run_id]
    assert not (tmp_path / "runs" / "store.sqlite").exists()
    # ... where `runs` and `show` (which read SEAL_PLATFORM_STORE) find it.
    listed = runner.invoke(cli, ["runs", "--json"])
    assert listed.exit_code == 0 and run_id in listed.output, listed.output
    assert runner.invoke(cli, ["show", run_id]).exit_code == 0


def test_run_store_precedence(runner, toy_site, tmp_path, monkeypatch):
    # --store > SEAL_PLATFORM_STORE > the recipe's store: > <runs_dir>/store.sqlite
    recipe_store, env_store, option_store = (tmp_path / f"{n}.sqlite" for n in ("recipe", "env", "option"))
    recipe = _toy(tmp_path, store=str(recipe_store))
    first = runner.invoke(cli, ["run", str(recipe), "--quiet", "--no-report"])
    assert first.exit_code == 0, first.output
    assert len(_run_ids(recipe_store)) == 1
    monkeypatch.setenv("SEAL_PLATFORM_STORE", str(env_store))
    second = runner.invoke(cli, ["run", str(recipe), "--quiet", "--no-report"])
    assert second.exit_code == 0, second.output
    assert len(_run_ids(env_store)) == 1 and len(_run_ids(recipe_store)) == 1
    third = runner.invoke(cli, ["run", str(recipe), "--store", str(option_store), "--quiet", "--no-report"])
    assert third.exit_code == 0, third.output
    assert len(_run_ids(option_store)) == 1 and len(_run_ids(env_store)) == 1
    monkeypatch.delenv("SEAL_PLATFORM_STORE")
    plain = _toy(tmp_path)
    fourth = runner.invoke(cli, ["run", str(plain), "--quiet", "--no-report"])
    assert fourth.exit_code == 0, fourth.output
    assert len(_run_ids(tmp_path / "runs" / "store.sqlite")) == 1
    assert "SEAL_PLATFORM_STORE" in runner.invoke(cli, ["run", "--help"]).output
