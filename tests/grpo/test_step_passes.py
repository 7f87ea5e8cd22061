"""The forward passes a GRPO step runs without gradient (KL reference, old log-probs), as
``skipping.no_grad_passes`` predicts them for the benchmarks' roofline: checked against the passes the trainer
really makes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.skipping import no_grad_passes  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

# Three groups of two; distinct lengths so that every pass names its sample.
LENGTHS = [[40, 41], [42, 43], [44, 45]]


def make_samples(advantages: list[float]) -> list[Sample]:
    out = []
    for g, lengths in enumerate(LENGTHS):
        for j, n in enumerate(lengths):
            ids = [5 + (7 * i + n) % 500 for i in range(n)]
            out.append(Sample(id=f"{g}-{j}", group=str(g), input_ids=ids, positions=list(range(10, n)),
                              advantage=advantages[2 * g + j]))
    return out


def record_no_grad(model, into: list[int]):
    """A hook recording the length of every sample a no-grad forward of ``model`` runs (one per call)."""
    def hook(module, args, kwargs):
        if not torch.is_grad_enabled():
            into.append(int(kwargs["input_ids"].shape[-1]))
    return model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("case", [
    dict(kl_coef=0.05, advantages=[1, -1, 0.5, -0.5, 1, -1]),
    dict(kl_coef=0.05, advantages=[0, 0, 1, -1, 0, 0]),  # a first mini-batch of zeros stays at the reference
    dict(kl_coef=0.05, advantages=[1, -1, 0, 0, 1, -1], epochs_per_step=2),
    dict(kl_coef=0.0, advantages=[1, -1, 0, 0, 1, -1]),  # no KL: no reference pass, zero advantages skipped
])
def test_predicted_no_grad_passes_are_the_ones_run(tokenizer, new_tiny_model, case):
    case = dict(case)
    advantages = case.pop("advantages")
    settings = GRPOSettings(lr=1e-3, mini_batch_tasks=1, micro_batch_size=1, pack_sequences=True, **case)
    trainer = GRPOTrainer.with_reference(new_tiny_model(), settings, pad_id=tokenizer.pad_token_id)
    assert (trainer.ref_model is None) == (settings.kl_coef == 0)
    for step in range(2):  # the first step starts at the reference, the second does not
        samples = make_samples(advantages)
        predicted = no_grad_passes(trainer.mini_batches(samples), settings, trainer.policy_is_reference)
        policy_runs: list[int] = []
        reference_runs: list[int] = []
        hooks = [record_no_grad(trainer.model, policy_runs)]
        if trainer.ref_model is not None:
            hooks.append(record_no_grad(trainer.ref_model, reference_runs))
        try:
            trainer.step(samples)
        finally:
            for h in hooks:
                h.remove()
        assert sorted(policy_runs) == sorted(len(x.input_ids) for x in predicted["old"]), step
        assert sorted(reference_runs) == sorted(len(x.input_ids) for x in predicted["reference"]), step
        if settings.kl_coef == 0:
            assert predicted["reference"] == []
        elif step == 1:  # off the reference nothing is skipped (k3): every sample's reference log-probs are run
            assert len(predicted["reference"]) == len(samples)
