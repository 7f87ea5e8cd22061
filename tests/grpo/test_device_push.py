"""Weight pushes from the sharded trainer ranks straight into the engine replicas (grpo.weight_sync: device,
seal_platform_libs/policy/device_push.py): which pushes take it, the groups it forms, and on CPU (gloo standing in for
NCCL and CUDA IPC) a real push from 2 trainer ranks into 2 hf replica processes, cast to the engines' dtype."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from seal_platform_libs.policy.device_push import topology, wants_device_push  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from tests.grpo.checks import scores_equal_the_trainers  # noqa: E402


def test_device_push_is_chosen_for_sharded_trainers_on_cuda_with_replicas():
    # auto: the GPU recipes (trainer ranks on CUDA, replicas) push from the ranks; on CPU the driver's copy goes
    assert wants_device_push("auto", trainer_on_cuda=True, replicas=True, lora=False)
    assert not wants_device_push("auto", trainer_on_cuda=False, replicas=True, lora=False)
    # device: asked for, also on CPU (gloo); never without replicas (an in-process engine) or for LoRA
    assert wants_device_push("device", trainer_on_cuda=False, replicas=True, lora=False)
    assert not wants_device_push("device", trainer_on_cuda=True, replicas=False, lora=False)
    assert not wants_device_push("auto", trainer_on_cuda=True, replicas=True, lora=True)
    for other in ("host", "collective"):
        assert not wants_device_push(other, trainer_on_cuda=True, replicas=True, lora=False)
    assert GRPOSettings().weight_sync == "auto"


def test_gpu_recipes_take_the_device_push():
    """seal-gpu4 and seal-gpu8 run sharded trainer ranks on CUDA with engine replicas: weight_sync auto (or
    device) sends from the ranks, the replicas' GPUs deciding CUDA IPC (colocated) or NCCL (split)."""
    from pathlib import Path

    from seal_platform.config import load_recipe_data

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    for name, colocated in (("seal-gpu4", True), ("seal-gpu8", False)):
        grpo = GRPOSettings.model_validate(load_recipe_data(recipes / f"{name}.yaml")["settings"]["grpo"])
        assert grpo.train_workers == 4 and grpo.replicas == 4 and grpo.placement.colocate is colocated
        assert wants_device_push(grpo.weight_sync, trainer_on_cuda=True, replicas=True, lora=grpo.lora is not None)


def test_topology_pairs_colocated_ranks_and_replicas_else_rank0_sends_to_all():
    assert topology(4, [0, 1, 2, 3], colocated=True) == [(0, [0]), (1, [1]), (2, [2]), (3, [3])]
    assert topology(4, [0, 1, 2, 3], colocated=False) == [(0, [0, 1, 2, 3])]
    assert topology(4, [0, 2, 3], colocated=True) == [(0, [0, 2, 3])]  # a replica died: one group from rank 0
    assert topology(2, [], colocated=False) == []


# Two gloo trainer ranks and two replica processes start (~21 s of a worker): `make test-slow` runs it. What
# `make test` keeps of the path: the choice and topology of the device push (above), the cast push into bf16
# replicas (tests/grpo/test_replica_start.py) and two trainer ranks stepping as one process
# (tests/grpo/test_distributed.py).
@pytest.mark.slow
def test_two_trainer_ranks_push_bf16_into_two_replicas_split_and_colocated(tokenizer, tiny_model_dir):
    """A real step on 2 gloo trainer ranks, then GRPORun's push: the ranks send (the driver's copy is not on the
    way) to 2 hf replica processes, each bucket cast to the engines' dtype (bf16: the bytes on the wire are
    2 per parameter); what the replicas hold then equals the trainer's weights rounded to bf16, bit for bit.
    Split placement: one group, rank 0 to both; colocated: one group per rank and replica."""
    from test_trainer import make_trajectories

    from seal_platform_libs.policy.engines.local import start_local_replicas
    from seal_platform_libs.policy.engines.settings import EngineSettings
    from seal_platform_libs.policy.loading import PolicySettings, load_policy
    from seal_platform_plugins.grpo.run import GRPORun

    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    model, _ = load_policy(policy)
    settings = GRPOSettings(train_workers=2, weight_sync="device", kl_coef=0.0, lr=1e-3, adam_eps=1e-6,
                            mini_batch_tasks=1, micro_batch_size=2, weight_sync_bucket_mb=1)
    run = GRPORun(model, tokenizer, settings, apatch=None, policy=policy)
    client = start_local_replicas("hf", model, tokenizer, EngineSettings(), [None, None], seed=0,
                                  weight_sync="device", bucket_bytes=2**20)
    try:
        assert run.trainer.on_cuda is False and client.engine_dtype == "float32"
        client.set_engine_dtype(["bfloat16", "bfloat16"])  # what vLLM replicas report on a GPU
        n_params = sum(p.numel() for p in model.parameters())
        for seed, colocated in ((0, False), (1, True)):
            run.trainer.settings = settings.model_copy(
                update={"placement": settings.placement.model_copy(update={"colocate": colocated})})
            metrics = run.optimize(client, make_trajectories(tokenizer, seed=seed), {})
            assert metrics["updates"] >= 1
            stats = client.sync_stats
            assert stats["groups"] == (2 if colocated else 1)
            assert stats["bytes"] == 2 * n_params  # bf16 on the wire (rank 0's group), no float32 copy
            assert client.policy_version == run.trainer.updates
            rounded = copy.deepcopy(model)  # the driver's copy (synced from rank 0) as bf16 makes it
            with torch.no_grad():
                for p in rounded.parameters():
                    p.copy_(p.to(torch.bfloat16).to(p.dtype))
            assert any(not torch.equal(a, b) for a, b in zip(rounded.parameters(), model.parameters()))
            scores_equal_the_trainers(client, rounded)
    finally:
        client.close()
        run.trainer.close()
