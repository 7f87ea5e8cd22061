"""The precision policy: master weights, gradients and optimizer states in float32 whatever the compute dtype,
so that an update at the stock recipe's learning rate (1e-6) reaches the weights the engine serves next.
On CPU the update computes in bfloat16 under autocast (grpo.autocast), as it does on CUDA by default."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_trainer import make_trajectories  # noqa: E402

from seal_platform.types import Message, SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines.hf import HFEngine  # noqa: E402
from seal_platform_libs.policy.engines.vllm import engine_dtype  # noqa: E402
from seal_platform_libs.policy.loading import PolicySettings  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

SETTINGS = GRPOSettings(lr=1e-6, kl_coef=0.0, mini_batch_tasks=2, grad_clip=None, autocast="bfloat16")


def _update(model, tokenizer) -> GRPOTrainer:
    trainer = GRPOTrainer(model, SETTINGS, pad_id=tokenizer.pad_token_id)
    trainer.step(build_samples(tokenizer, make_trajectories(tokenizer), settings=SETTINGS))
    return trainer


def _moved_fraction(model, before) -> float:
    moved = total = 0
    for name, p in model.named_parameters():
        moved += int((p.detach() != before[name]).sum())
        total += p.numel()
    return moved / total


def test_master_weights_are_float32_by_default_and_the_engine_dtype_is_independent(tiny_policy):
    model, _ = tiny_policy
    assert PolicySettings().resolved_dtype() == "float32"
    assert PolicySettings(dtype="bfloat16").resolved_dtype() == "bfloat16"
    expected = "bfloat16" if torch.cuda.is_available() else "float32"
    assert engine_dtype("auto", model) == expected  # bfloat16 wherever vLLM runs on CUDA
    assert engine_dtype("bfloat16", model) == "bfloat16"


def test_an_update_at_1e_6_moves_float32_master_weights_and_what_the_engine_serves(new_tiny_model, tokenizer):
    model = new_tiny_model()
    assert next(model.parameters()).dtype == torch.float32
    engine = HFEngine(model, tokenizer, seed=0)
    prompt = [[Message(role="system", content="You are a calculator."), Message(role="user", content="2 + 2?")]]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    served_before = engine.generate(prompt, sampling)[0]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = _update(model, tokenizer)
    # Every weight moved (AdamW's first step moves each by about the learning rate), gradients and the
    # optimizer's moments are float32.
    assert _moved_fraction(model, before) > 0.95
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    states = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].dtype == torch.float32 == s["exp_avg_sq"].dtype for s in states)
    # The engine serves the updated weights: the same sampled tokens now have other log-probs.
    engine.update_weights(model)
    served_after = engine.generate(prompt, sampling)[0]
    assert served_after.token_ids == served_before.token_ids
    assert served_after.logprobs != served_before.logprobs
    engine.close()


def test_bfloat16_master_weights_round_most_of_that_update_away(new_tiny_model, tokenizer):
    """Why the master weights are float32: the same update on bfloat16 weights leaves most of them as they were."""
    model = new_tiny_model().to(torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _update(model, tokenizer)
    assert _moved_fraction(model, before) < 0.1  # measured: 1.8% (float32 master weights: 99.8%)
