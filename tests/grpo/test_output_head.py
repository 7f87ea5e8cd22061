"""Chunked log-probs (grpo.logits_chunk_tokens, on by default) equal the model's own, for architectures whose
forward does more after the output layer: Gemma 2's soft-cap, Cohere's logit_scale, Granite's logits_scaling;
and an architecture with a step the head does not know (HyperCLOVA X multiplies by ``logits_scaling`` where
Granite divides) falls back to the model's own logits instead of training on other ones."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seal_platform_libs.policy.output_head import output_head  # noqa: E402
from seal_platform_libs.policy.testing import ARCHITECTURE_SHAPE, tiny_causal_lm  # noqa: E402
from seal_platform_plugins.grpo.objective import token_logprobs  # noqa: E402
from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402

VOCAB = ARCHITECTURE_SHAPE["vocab_size"]
# Each with its step after the output layer (testing.TINY_ARCHITECTURES), large enough to move every log-prob
# well beyond rounding; HyperCLOVA X's is one the head does not know.
FAMILIES = ["llama", "gemma2", "cohere", "granite", "hyperclovax"]


def samples() -> list[Sample]:
    rng = random.Random(0)
    out = []
    for j, n in enumerate([40, 25]):
        ids = [rng.randrange(3, VOCAB) for _ in range(n)]
        out.append(Sample(id=str(j), group="g", input_ids=ids, positions=list(range(10, n)), advantage=1.0 - 2 * j))
    return out


def own_logprobs(model, sample: Sample) -> torch.Tensor:
    """The model's own log-probs of the sample's loss tokens: its forward's logits, one sequence alone."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([sample.input_ids])).logits[0]
    positions = torch.tensor(sample.positions)
    return token_logprobs(logits[positions - 1], torch.tensor(sample.input_ids)[positions])


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_logprobs_are_the_models_own(family):
    model = tiny_causal_lm(family)
    head = output_head(model, torch.device("cpu"))
    assert (head is None) == (family == "hyperclovax")  # a step the head does not know: no chunks
    got = samples()
    GRPOTrainer(model, GRPOSettings(kl_coef=0.0, logits_chunk_tokens=7), pad_id=0).fill_logprobs(model, got, "old_logp")
    for sample in got:
        assert torch.allclose(sample.old_logp, own_logprobs(model, sample), atol=2e-5, rtol=1e-5), sample.id


@pytest.mark.parametrize("family", ["gemma2", "cohere", "granite"])
def test_chunked_update_equals_unchunked(family):
    """The head's steps are in the backward too: the same gradients as the model's own logits give."""
    def run(chunk):
        model = tiny_causal_lm(family)
        trainer = GRPOTrainer(model, GRPOSettings(kl_coef=0.0, logits_chunk_tokens=chunk, zero_advantage="compute"),
                              pad_id=0)
        grads = capture_grads(trainer)
        trainer.step(samples())
        return grads

    chunked, whole = run(5), run(None)
    assert len(chunked) == len(whole) == 1
    assert any(g.abs().sum() > 0 for g in whole[0])
    for a, b in zip(chunked[0], whole[0]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
