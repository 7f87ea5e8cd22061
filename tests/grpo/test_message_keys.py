"""grpo's messages (planning problems, memory-plan advice, exceptions, log lines) name recipe keys as a user
types them in a recipe or on the command line: the plugins' sections live under ``settings:``, so the key is
``settings.grpo.lora``, ``settings.policy.model``, ``settings.engine.vllm.gpu_memory_utilization``, never the
bare ``grpo.lora`` (top-level keys such as ``rollout.overlap`` stay as they are)."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from seal_platform.config import RunConfig
from seal_platform_libs.policy import lora
from seal_platform_libs.policy.devices import problems
from seal_platform_libs.policy.engines.settings import EngineSettings
from seal_platform_libs.policy.loading import PolicySettings, model_dir
from seal_platform_libs.policy.memory_plan import plan
from seal_platform_libs.policy.packing import check_packable
from seal_platform_plugins.grpo import staleness
from seal_platform_plugins.grpo.plugin import check_config
from seal_platform_plugins.grpo.settings import GRPOSettings, LoRASettings

# A key of one of grpo's sections (grpo, policy, engine, apatch) not reached through `settings.`.
BARE_KEY = re.compile(r"(?<![\w.])(?:grpo|policy|engine|apatch)\.[a-z_][\w.]*")
FULL_KEY = re.compile(r"settings\.(?:grpo|policy|engine)\.[a-z_]")
RAY = SimpleNamespace(name="ray", address=None)  # the run's cluster as check_config/check_machine get it


def bare_keys(texts: list[str]) -> list[str]:
    return sorted({f"{m.group(0)!r} in {text!r}" for text in texts for m in BARE_KEY.finditer(text)})


def test_the_scan_tells_a_bare_key_from_a_full_one():
    assert bare_keys(["set grpo.lora as the run did", "(grpo.placement.engine_gpus 1)"])
    assert not bare_keys(["set settings.grpo.lora: null", "rollout.overlap: false", "recipes/seal-lora.yaml"])


def _planning_texts() -> list[str]:
    """Every problem, note and piece of advice grpo's planning gives for a handful of bad recipes."""
    texts: list[str] = []

    def memory(config: RunConfig, grpo: GRPOSettings, engine: EngineSettings, gpus: int, on_ray: bool) -> None:
        policy = PolicySettings(model="Qwen/Qwen2.5-7B-Instruct", device="cuda")
        result = plan(config, {"grpo": grpo, "policy": policy, "engine": engine}, gpus=gpus, gpu_memory=24,
                      on_ray=on_ray)
        texts.extend([*result.problems, *result.notes, *(p.setting for g in result.gpus for p in g.parts)])

    vllm = RunConfig(environment="bfcl", stages={"optimize": "grpo"}, rollout={"engine": "vllm"})
    starved = EngineSettings.model_validate({"vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 131072}})
    memory(vllm, GRPOSettings(kl_coef=0.001), starved, 2, False)  # full fine-tune, a KV cache too small
    memory(vllm, GRPOSettings(lora={"rank": 64}), EngineSettings(), 1, False)
    memory(vllm, GRPOSettings(train_workers=4, replicas=4, placement={"trainer_gpus": 1, "engine_gpus": 1}),
           EngineSettings(), 4, True)  # more GPUs than given
    memory(vllm, GRPOSettings(train_workers=2, placement={"trainer_gpus": 0}), EngineSettings(), 2, True)
    texts += problems(vllm, PolicySettings(device="cpu"), True,
                      GRPOSettings(train_workers=2, placement={"engine_gpus": 1.0, "trainer_gpus": 0.0}), RAY)
    texts += [str(i) for i in check_config(vllm, {"grpo": GRPOSettings(replicas=2)}, None)]
    texts += [str(i) for i in check_config(vllm, {"engine": EngineSettings(replicas=2)}, RAY)]
    overlap = RunConfig.model_validate({"environment": "bfcl", "rollout": {"overlap": True},
                                        "stages": {"optimize": "grpo"}})
    texts += [str(i) for i in staleness.overlap_issues(overlap, GRPOSettings(placement={"colocate": True}),
                                                       EngineSettings(), ray=False)]
    texts += [
        str(i)
        for i in staleness.overlap_issues(
            overlap, GRPOSettings(max_staleness=4, placement={"colocate": True}), EngineSettings(), ray=True
        )
    ]
    return texts


def test_planning_problems_and_memory_plan_advice_name_keys_under_settings():
    texts = _planning_texts()
    assert sum(bool(FULL_KEY.search(t)) for t in texts) >= 12  # the scan saw the messages that name keys
    assert any("settings.grpo.placement.engine_gpus is 1.0" in t for t in texts)
    assert any("settings.engine.vllm.gpu_memory_utilization" in t for t in texts)
    assert bare_keys(texts) == []


def _raised(call) -> str:
    with pytest.raises((ValueError, FileNotFoundError, ValidationError)) as caught:
        call()
    return str(caught.value)


def test_exceptions_and_log_lines_name_keys_under_settings(tiny_policy, tmp_path, caplog):
    (tmp_path / "no-config").mkdir()
    texts = [
        _raised(lambda: GRPOSettings(lora={"rank": 8, "dropout": 0.1}, gradient_checkpointing=True)),
        _raised(lambda: GRPOSettings(train_layers=2, lora={"rank": 8})),
        _raised(lambda: GRPOSettings(lora={"rank": 8}, train_workers=2)),
        _raised(lambda: LoRASettings(target_modules=[])),
        _raised(lambda: EngineSettings(gpus=[1, 1])),
        _raised(lambda: model_dir(PolicySettings(model=str(tmp_path / "missing")))),
        _raised(lambda: model_dir(PolicySettings(model=str(tmp_path / "no-config")))),
        _raised(lambda: staleness.screen([], 0, 0, "bogus")),
        _raised(lambda: check_packable(SimpleNamespace(config=SimpleNamespace(layer_types=["linear_attention"])))),
    ]
    model, _ = tiny_policy
    texts.append(_raised(lambda: lora.wrap(type(model)(model.config), LoRASettings(target_modules=["no_such_proj"]))))
    with caplog.at_level(logging.WARNING, logger="seal_platform_libs.policy.lora"):
        lora.wrap(type(model)(model.config), LoRASettings(target_modules=["q_proj", "no_such_proj"]))
    texts.append(caplog.text)
    assert all(FULL_KEY.search(t) for t in texts), [t for t in texts if not FULL_KEY.search(t)]
    assert bare_keys(texts) == []
