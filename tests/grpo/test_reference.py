"""The single-process trainer's KL reference honours grpo.ref_dtype and grpo.ref_offload as the sharded ranks do."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from seal_platform_libs.policy.reference import ReferenceOffload, reference_dtype  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402


def test_reference_dtype_is_bf16_on_cuda_by_default_and_the_policys_on_cpu():
    assert reference_dtype("auto", torch.device("cuda", 0)) == "bfloat16"
    assert reference_dtype("auto", torch.device("cpu")) is None
    assert reference_dtype("float32", torch.device("cuda", 0)) == "float32"
    assert reference_dtype("bfloat16", torch.device("cpu")) == "bfloat16"


def test_single_process_reference_in_bf16_copies_each_parameter_and_stays_close(tiny_policy):
    """grpo.ref_dtype: bfloat16 gives the single-process trainer a bf16 reference (it was always a float32
    deepcopy): every parameter bf16 and equal to the policy's rounded, ties kept, buffers as they were, the
    policy untouched; its log-probs stay within 0.01 of a float32 reference's."""
    from test_trainer import make_trajectories

    model, tokenizer = tiny_policy
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    settings = GRPOSettings(kl_coef=0.01, micro_batch_size=2, ref_dtype="bfloat16")
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
    ref = trainer.ref_model
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not any(p.requires_grad for p in ref.parameters())
    policy_params = dict(model.named_parameters())
    for name, param in ref.named_parameters():
        assert torch.equal(param, policy_params[name].detach().to(torch.bfloat16)), name
        assert param.data_ptr() != policy_params[name].data_ptr()
    ties = lambda m: len(list(m.parameters())) < len(list(m.named_parameters(remove_duplicate=False)))  # noqa: E731
    assert ties(ref) == ties(model)
    for (name, buf), (_, want) in zip(ref.named_buffers(), model.named_buffers()):
        assert buf.dtype == want.dtype and torch.equal(buf, want), name
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name

    exact = GRPOTrainer.with_reference(model, settings.model_copy(update={"ref_dtype": "float32"}),
                                       pad_id=tokenizer.pad_token_id)
    assert {p.dtype for p in exact.ref_model.parameters()} == {torch.float32}
    got = build_samples(tokenizer, make_trajectories(tokenizer), settings=settings)
    want = build_samples(tokenizer, make_trajectories(tokenizer), settings=settings)
    trainer.fill_logprobs(ref, got, "ref_logp")
    exact.fill_logprobs(exact.ref_model, want, "ref_logp")
    diff = max(float((a.ref_logp - b.ref_logp).abs().max()) for a, b in zip(got, want))
    assert 0.0 < diff <= 0.01  # bf16 rounding shows, and stays small
    assert trainer.step(got)["updates"] > 0


def test_offloaded_reference_waits_in_host_memory_between_steps_and_the_step_is_unchanged(new_tiny_model, tokenizer):
    """grpo.ref_offload (on CUDA; forced here on CPU, where the same in-place storage moves run): between steps the
    reference's storages are empty, during the step they are back, and the step equals one without offload."""
    from test_trainer import make_trajectories

    settings = GRPOSettings(kl_coef=0.05, micro_batch_size=2, lr=1e-3, ref_offload=True)
    plain_model, moved_model = new_tiny_model(0), new_tiny_model(0)
    plain = GRPOTrainer.with_reference(plain_model, settings, pad_id=tokenizer.pad_token_id)
    assert plain.ref_offload.ref_model is None  # on CPU the setting moves nothing
    moved = GRPOTrainer.with_reference(moved_model, settings, pad_id=tokenizer.pad_token_id)
    moved.ref_offload = ReferenceOffload(moved.ref_model, True)
    assert moved.ref_offload.away() > 0
    assert all(p.untyped_storage().nbytes() == 0 for p in moved.ref_model.parameters())

    def batch(seed):
        return build_samples(tokenizer, make_trajectories(tokenizer, seed=seed), settings=settings)

    for seed in (0, 1):  # the second step's KL term reads the reference (the policy has moved)
        want, got = plain.step(batch(seed)), moved.step(batch(seed))
        assert moved.ref_offload.away_now
        assert all(p.untyped_storage().nbytes() == 0 for p in moved.ref_model.parameters())
        for key in ("loss", "kl", "pg_loss", "grad_norm"):
            assert got[key] == want[key], key
    assert want["kl"] > 0
    moved.ref_offload.back()
    for (name, a), b in zip(plain.ref_model.named_parameters(), moved.ref_model.parameters()):
        assert torch.equal(a, b), name
