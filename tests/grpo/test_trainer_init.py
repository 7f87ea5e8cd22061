"""Sharded trainer start-up without full copies on every rank, the bf16 KL reference, and the hybrid-engine
memory sequence (seal_platform_libs/policy/memory_phases.py), on CPU with gloo."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from seal_platform_libs.policy.engines.hf import HFEngine  # noqa: E402
from seal_platform_libs.policy.engines.settings import HFEngineSettings  # noqa: E402
from seal_platform_libs.policy.loading import PolicySettings, load_policy  # noqa: E402
from seal_platform_libs.policy.memory_phases import ROLLOUT_STEPS, TRAINER_STEPS  # noqa: E402
from seal_platform_libs.policy.testing import tiny_llama  # noqa: E402
from seal_platform_plugins.grpo.distributed import LocalTrainerGroup, free_port  # noqa: E402
from seal_platform_plugins.grpo.run import GRPORun  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

COMPARED = ("loss", "pg_loss", "kl", "entropy", "grad_norm", "clip_frac", "approx_kl", "ratio_max", "updates",
            "trained_sequences", "trained_tokens")


def logged_tiny_llama(log_dir: str, vocab: int):
    """The tiny Llama (seed 0), recording in ``log_dir`` which rank built it and on which device its
    parameters ended up ("meta": a skeleton without storage; "cpu": a materialised model)."""
    model = tiny_llama(vocab_size=vocab)
    rank = dist.get_rank() if dist.is_initialized() else -1
    with open(Path(log_dir) / f"rank{rank}.log", "a") as f:
        f.write(next(model.parameters()).device.type + "\n")
    return model


def full_weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# Two worker processes start (about 40 s on 2 idle cores).
@pytest.mark.slow
def test_two_ranks_start_from_rank0_weights_alone_and_update_as_one_process(tokenizer, tmp_path):
    """Only rank 0 materialises the policy (the builder's log: rank 1 built meta skeletons only); the sharded
    group's gathered weights are exactly the directly built model's; its first update is the 1-process one."""
    from test_trainer import make_trajectories

    vocab = len(tokenizer)
    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=1, lr=1e-3, adam_eps=1e-6)
    samples = build_samples(tokenizer, make_trajectories(tokenizer), settings=settings)
    direct = tiny_llama(vocab_size=vocab)
    start = full_weights(direct)
    want = GRPOTrainer.with_reference(direct, settings, pad_id=tokenizer.pad_token_id).step(samples)

    options = WorkerOptions(grpo=settings, policy=PolicySettings(), pad_id=tokenizer.pad_token_id, device="cpu",
                            build_model=functools.partial(logged_tiny_llama, str(tmp_path), vocab))
    with LocalTrainerGroup(2, options) as group:
        got_start = group.full_state_dict()
        got = group.step(build_samples(tokenizer, make_trajectories(tokenizer), settings=settings))
        got_after = group.full_state_dict()
    # rank 0 built the model once (cpu) and a skeleton for the policy and the reference; rank 1 skeletons only
    assert sorted((tmp_path / "rank0.log").read_text().split()) == ["cpu", "meta", "meta"]
    assert (tmp_path / "rank1.log").read_text().split() == ["meta", "meta"]
    assert set(got_start) == set(start)
    for name, tensor in start.items():
        assert torch.equal(got_start[name], tensor), name
    for key in COMPARED:
        assert got[key] == pytest.approx(want[key], abs=1e-4, rel=1e-5), key
    after = full_weights(direct)
    assert max(float((got_after[k] - after[k]).abs().max()) for k in after) <= 1e-4
    assert max(float((after[k] - start[k]).abs().max()) for k in after) > 1e-3  # the update moved them


def test_one_rank_from_the_checkpoint_has_its_weights_and_buffers_and_a_bf16_reference(tiny_model_dir, tokenizer):
    """The meta-device start-up on the checkpoint path: the sharded policy's weights and its non-persistent
    buffers (rotary inv_freq, not in the state dict, left uninitialised by to_empty) are the loaded model's
    exactly; grpo.ref_dtype: bfloat16 keeps the reference in bf16, whose log-probs stay within 0.01 of the
    float32 reference's (measured on this tiny model: a largest difference of 2.8e-3)."""
    from test_trainer import make_trajectories

    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    loaded, _ = load_policy(policy)
    settings = GRPOSettings(kl_coef=0.01, micro_batch_size=2, ref_dtype="bfloat16")
    options = WorkerOptions(grpo=settings, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        got = worker.full_state_dict()
        want = loaded.state_dict()
        assert set(got) == set(want)
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor), name
        buffers = dict(worker.model.named_buffers())
        assert any("inv_freq" in name for name in buffers)
        for name, tensor in loaded.named_buffers():
            assert torch.equal(buffers[name], tensor), name
        assert {p.dtype for p in worker.ref_model.parameters()} == {torch.bfloat16}
        assert {p.dtype for p in worker.model.parameters()} == {torch.float32}

        samples = build_samples(tokenizer, make_trajectories(tokenizer), settings=settings)
        worker.trainer.fill_logprobs(worker.ref_model, samples, "ref_logp")
        plain = GRPOTrainer(loaded, settings.model_copy(update={"kl_coef": 0.0}), pad_id=tokenizer.pad_token_id)
        exact = build_samples(tokenizer, make_trajectories(tokenizer), settings=settings)
        plain.fill_logprobs(loaded, exact, "ref_logp")
        diff = max(float((a.ref_logp - b.ref_logp).abs().max()) for a, b in zip(samples, exact))
        assert 0.0 < diff <= 0.01  # bf16 rounding shows, and stays small
    finally:
        worker.close()


def test_the_default_reference_on_cpu_is_the_policys_dtype(tiny_model_dir, tokenizer):
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    options = WorkerOptions(grpo=GRPOSettings(kl_coef=0.01), policy=policy, pad_id=tokenizer.pad_token_id,
                            device="cpu")
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        assert {p.dtype for p in worker.ref_model.parameters()} == {torch.float32}
    finally:
        worker.close()


def test_offload_and_onload_round_trip_parameters_and_optimizer_state_exactly(tiny_model_dir, tokenizer, tmp_path):
    """grpo.trainer_offload on a sharded worker: the storages really go (0 bytes on the device side) and come
    back bit for bit in the same tensor objects; the next update then runs."""
    from test_trainer import make_trajectories

    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    settings = GRPOSettings(kl_coef=0.0, micro_batch_size=2, lr=1e-3)
    options = WorkerOptions(grpo=settings, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        worker.step(build_samples(tokenizer, make_trajectories(tokenizer), settings=settings))
        tensors = [p.detach() for p in worker.model.parameters()]
        tensors += [v for s in worker.trainer.optimizer.state.values() for v in s.values()
                    if isinstance(v, torch.Tensor)]
        assert len(tensors) > len(list(worker.model.parameters()))  # AdamW's moments are there
        local = [getattr(t, "_local_tensor", t) for t in tensors]
        before = [t.clone() for t in local]
        moved = worker.offload()
        assert moved >= sum(t.numel() * t.element_size() for t in local)
        assert all(t.untyped_storage().nbytes() == 0 for t in local)
        assert worker.offload() == 0  # held: nothing moves twice
        assert worker.onload() == moved
        for t, b in zip(local, before):
            assert torch.equal(t, b)
        worker.offload()
        worker.save(tmp_path / "ck")  # a checkpoint of an offloaded trainer brings its state back first
        assert all(t.untyped_storage().nbytes() > 0 for t in local)
        assert worker.load(tmp_path / "ck")["updates"] == worker.updates
        worker.offload()
        metrics = worker.step(build_samples(tokenizer, make_trajectories(tokenizer, seed=1), settings=settings))
        assert metrics["updates"] >= 1  # step brought the state back itself
    finally:
        worker.close()


class RecordingHFEngine(HFEngine):
    """The hf engine (its own copy of the weights), recording the memory calls it receives into ``trace``."""

    def __init__(self, *args, trace: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.trace = trace

    def sleep(self) -> None:
        self.trace.append("engine.sleep")

    def wake_weights(self) -> None:
        self.trace.append("engine.wake_weights")

    def wake_kv_cache(self) -> None:
        self.trace.append("engine.wake_kv_cache")

    def update_weights(self, model, version=None) -> None:
        self.trace.append("engine.update_weights")
        super().update_weights(model, version=version)


@pytest.mark.parametrize("offload", [False, True])
def test_colocated_step_runs_the_memory_sequence_in_order(tiny_policy, offload):
    """GRPORun.optimize with colocated engines (a sleep callable): trainer mode before the update, rollout mode
    after it, each step in the named order, the engine's calls where the sequence puts them; the engine then
    samples with the updated weights."""
    from test_trainer import make_trajectories

    model, tokenizer = tiny_policy
    settings = GRPOSettings(kl_coef=0.0, micro_batch_size=2, lr=1e-3, trainer_offload=offload)
    run = GRPORun(model, tokenizer, settings, apatch=None)
    trace: list[str] = []
    run.phase_trace = trace
    engine = RecordingHFEngine(model, tokenizer, HFEngineSettings(share_model=False), trace=trace)
    try:
        metrics = run.optimize(engine, make_trajectories(tokenizer), {}, sleep=engine.sleep)
        pushed = {k: v.clone() for k, v in engine.model.state_dict().items()}
    finally:
        engine.close()
    assert metrics["updates"] >= 1
    rollout = [s for s in ROLLOUT_STEPS if offload or s != "offload"]
    want = [*TRAINER_STEPS, *rollout]
    want.insert(want.index("sleep") + 1, "engine.sleep")
    want.insert(len(TRAINER_STEPS) + 1 + rollout.index("wake_weights") + 1, "engine.wake_weights")
    want.insert(want.index("push") + 1, "engine.update_weights")
    want.append("engine.wake_kv_cache")
    assert trace == want
    for name, tensor in model.state_dict().items():
        assert torch.equal(pushed[name], tensor), name
