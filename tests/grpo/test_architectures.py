"""The trainer's exact speed-ups hold on other architectures than Llama: one GRPO step with all of them on
(packed rows with shared prompts, gradient checkpointing, the fused rotary, chunked log-probs) gives the same
loss, gradients and log-probs as with all of them off, on tiny models with sliding windows, chunks, soft-capped
or scaled logits, q/k norms, experts and partial rotary (``testing.TINY_ARCHITECTURES``). Where one speed-up
cannot be exact for an architecture, it is refused or gives way, never approximated."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.testing import ARCHITECTURE_SHAPE, TINY_ARCHITECTURES, tiny_causal_lm  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402

PLAIN = dict(pack_sequences=False, shared_prefix=False, gradient_checkpointing=False, fused_rotary=False,
             logits_chunk_tokens=None)
FAST = dict(pack_sequences=True, shared_prefix=True, gradient_checkpointing=True, fused_rotary=True,
            logits_chunk_tokens=16)
FAST_PADDED = dict(FAST, pack_sequences=False, gradient_checkpointing=False)  # padded rows share prompts too


def samples() -> list[Sample]:
    """Two groups of three rollouts (40-90 tokens) sharing a 24-token prompt each; a tool result (no loss)
    inside every rollout."""
    rng = random.Random(0)
    vocab = ARCHITECTURE_SHAPE["vocab_size"]
    out = []
    for g in range(2):
        prompt = [rng.randrange(3, vocab) for _ in range(24)]
        for j, n in enumerate([90, 40, 70]):
            ids = prompt + [rng.randrange(3, vocab) for _ in range(n - len(prompt))]
            out.append(Sample(id=f"{g}-{j}", group=f"g{g}", input_ids=ids,
                              positions=[p for p in range(24, n) if not 30 <= p < 34], advantage=rng.uniform(-1, 1)))
    return out


def step(architecture: str, options: dict) -> tuple[dict, list, list[Sample]]:
    """One step (KL term on, the policy moved off its reference first): metrics, gradients applied, samples."""
    model = tiny_causal_lm(architecture)
    settings = GRPOSettings(kl_coef=0.05, micro_batch_size=3, mini_batch_tasks=1, zero_advantage="compute", **options)
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
    grads = capture_grads(trainer)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    batch = samples()
    return trainer.step(batch), grads, batch


@pytest.mark.parametrize("architecture", [a for a in TINY_ARCHITECTURES if a != "falcon"])
def test_speed_ups_are_exact_on_each_architecture(architecture):
    plain_metrics, plain_grads, plain = step(architecture, PLAIN)
    assert len(plain_grads) == 2 and any(g.abs().sum() > 0 for g in plain_grads[0])  # one update per group
    for options in (FAST, FAST_PADDED):
        metrics, grads, fast = step(architecture, options)
        for key in ("loss", "pg_loss", "kl", "grad_norm"):
            assert metrics[key] == pytest.approx(plain_metrics[key], rel=1e-4, abs=1e-7), key
        for plain_update, update in zip(plain_grads, grads):
            for a, b in zip(plain_update, update):
                assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)
        for a, b in zip(plain, fast):
            assert torch.allclose(a.old_logp, b.old_logp, atol=2e-5, rtol=1e-5), a.id
            assert torch.allclose(a.ref_logp, b.ref_logp, atol=2e-5, rtol=1e-5), a.id


def test_packing_is_refused_where_attention_bypasses_the_interface():
    """Falcon computes its attention (and masks) itself: a packed row's sequences would see each other, so
    packing is refused at start; its other speed-ups stay exact."""
    with pytest.raises(ValueError, match="FalconForCausalLM computes its attention outside"):
        step("falcon", FAST)
    plain_metrics, plain_grads, _ = step("falcon", PLAIN)
    metrics, grads, _ = step("falcon", FAST_PADDED)
    assert metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=1e-4, abs=1e-7)
    for a, b in zip(plain_grads[0], grads[0]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)
