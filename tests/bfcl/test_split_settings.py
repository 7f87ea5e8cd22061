"""``settings.bfcl.train_split`` / ``eval_split`` name splits of the bfcl data (``data.SPLITS``): one it lacks is a
recipe problem, refused by ``config validate`` and ``run`` before the run's row is written (not when the run
first lists its tasks), naming the key and the splits there are. The environment's declared splits
(``EnvironmentSpec.splits``) are the names its ``tasks`` can read under the settings."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.errors import ConfigError
from seal_platform.planning import plan_recipe
from seal_platform_plugins.bfcl import data
from seal_platform_plugins.bfcl.environment import BfclEnvironment
from seal_platform_plugins.bfcl.settings import BfclSettings

RECIPE = "seal-embedded"  # a shipped bfcl recipe


@pytest.fixture(autouse=True)
def _shipped_plugins(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)


def _text(result) -> str:
    return " ".join(result.output.split())  # the console wraps long lines


def test_config_validate_names_the_key_and_the_splits_the_data_has():
    result = CliRunner().invoke(cli, ["config", "validate", RECIPE, "settings.bfcl.train_split=trian",
                                      "settings.bfcl.eval_split=test"])
    assert result.exit_code == 1, result.output
    text = _text(result)
    assert ("settings.bfcl.train_split: Value error, the bfcl data has no split 'trian'; choose from train, eval, "
            "eval_val, eval_test, all") in text, result.output
    assert "settings.bfcl.eval_split: Value error, the bfcl data has no split 'test'; choose from" in text
    ok = CliRunner().invoke(cli, ["config", "validate", RECIPE, "settings.bfcl.train_split=eval_val",
                                  "settings.bfcl.eval_split=eval_test"])
    assert ok.exit_code == 0 and ": ok" in ok.output, ok.output


def test_run_refuses_it_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run would write its folder under ./runs
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(cli, ["run", RECIPE, "settings.bfcl.eval_split=eval_tst", "--store", str(store),
                                      "--quiet"])
    assert result.exit_code == 2, result.output
    assert "settings.bfcl.eval_split: Value error, the bfcl data has no split 'eval_tst'" in _text(result)
    assert not store.exists()  # no run row: not even the store was created
    assert not (tmp_path / "runs").exists()  # and no run folder
    with pytest.raises(ConfigError, match="settings.bfcl.train_split: Value error, the bfcl data has no split 'x'"):
        plan_recipe(RECIPE, ["settings.bfcl.train_split=x"])


def test_the_declared_splits_are_those_tasks_reads():
    plan = plan_recipe(RECIPE, ["settings.bfcl.train_split=eval_val", "settings.bfcl.eval_split=eval_test",
                                "settings.bfcl.limit_per_category=2"])
    spec = plan.host.environments()["bfcl"][1]
    declared = spec.declared_splits(plan.settings)
    assert declared == sorted(data.SPLITS)
    environment = BfclEnvironment(plan.settings["bfcl"])
    try:
        ids = data.split_ids()
        for split in declared:
            tasks = environment.tasks(split)
            assert tasks, split
            read = {"train": "eval_val", "eval": "eval_test"}.get(split, split)
            assert read == "all" or {t.id for t in tasks} <= set(ids[read]), split
    finally:
        environment.close()
    # Settings that bypassed validation: a split tasks cannot read is not declared either.
    unchecked = BfclSettings.model_construct(train_split="nope")
    assert spec.declared_splits({"bfcl": unchecked}) == sorted(set(data.SPLITS) - {"train"})
    with pytest.raises(data.DataError, match="unknown split 'nope'"):
        BfclEnvironment(unchecked).tasks("train")
