"""Old log-probs are the policy's at the start of the step for every sample the step trains after an update,
also over several epochs (the step metric ``own_pass_ratio_samples`` counts samples whose ratio came from their
own training pass after an update: 0)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402


def test_a_first_mini_batch_skipped_at_the_reference_gets_old_logprobs_of_the_step_start(tokenizer, new_tiny_model):
    """With a k3 KL term the first group (every advantage 0) is skipped in the first epoch (the policy equals the
    reference) and trained in the second, after updates: its old log-probs must be the step's starting policy's,
    not its own pass's (ratio 1) then."""
    from test_trainer import make_trajectories

    settings = GRPOSettings(kl_coef=0.05, kl_estimator="k3", mini_batch_tasks=1, micro_batch_size=2, lr=1e-3,
                            epochs_per_step=2)
    trajs = make_trajectories(tokenizer, rewards=((1.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 1.0)))
    model = new_tiny_model()
    initial = copy.deepcopy(model)
    samples = build_samples(tokenizer, trajs, settings=settings)
    metrics = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id).step(samples)
    # Epoch 1: the zero-advantage group is skipped, the other two update; epoch 2: all three update.
    assert metrics["updates"] == 5 and metrics["trained_sequences"] == 9
    assert metrics["own_pass_ratio_samples"] == 0

    want = build_samples(tokenizer, trajs, settings=settings)
    GRPOTrainer(initial, settings.model_copy(update={"kl_coef": 0.0}), pad_id=tokenizer.pad_token_id).fill_logprobs(
        initial, want, "old_logp")
    for got, expected in zip(samples, want):
        assert torch.allclose(got.old_logp, expected.old_logp, atol=1e-5), got.id
    # The update moved the policy far beyond that tolerance: an own pass in epoch 2 would have shown.
    moved = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), initial.state_dict().values()))
    assert moved > 1e-3
