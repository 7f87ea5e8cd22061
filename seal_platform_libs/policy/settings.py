"""The runtime's part of the optimizer's settings section: trainer ranks, LoRA, engine replicas on Ray, weight sync.

The policy runtime reads these from the ``grpo`` section (:data:`RUNTIME_SECTION`; an optimizer built on the
runtime extends :class:`RuntimeSettings`, as grpo's ``GRPOSettings`` does, and registers it under that
name, or the runtime uses the defaults). Only pydantic and the core's settings base are imported here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from seal_platform.config import Section

RUNTIME_SECTION = "grpo"  # the settings section whose model extends RuntimeSettings


# The linear layers of Llama / Qwen2 / Mistral-style decoders: attention and MLP projections (what vLLM
# serves LoRA on; the embeddings and the LM head stay frozen and unadapted).
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class PlacementSettings(Section):
    """``settings.grpo.placement``: where grpo's Ray actors (engine replicas, trainer workers) go when the recipe
    enables the Ray cluster (``settings.ray.enabled``; the ray_backend plugin). Ignored without it."""

    colocate: bool = Field(
        default=False,
        description="Trainer workers and engine replicas share GPUs (one placement group; engines sleep "
        "during the update). False: separate bundles.",
    )
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        default="PACK", description="Placement-group strategy of the engine (and trainer) bundles."
    )
    trainer_cpus: float = Field(default=1.0, ge=0.0, description="CPUs reserved per trainer worker (FSDP rank).")
    trainer_gpus: float = Field(
        default=0.0, ge=0.0, description="GPUs per trainer worker (0.5 with 0.5 per engine: colocated)."
    )
    engine_cpus: float = Field(default=1.0, ge=0.0, description="CPUs reserved per engine replica.")
    engine_gpus: float = Field(default=0.0, ge=0.0, description="GPUs per engine replica (fractions colocate).")


class LoRASettings(Section):
    """``settings.grpo.lora``: train low-rank adapters (peft) on a frozen base instead of every weight.

    The reference policy of the KL term is the same model with its adapters switched off (no second copy);
    checkpoints hold the adapters, the optimizer state and what identifies the base model.
    """

    rank: int = Field(
        default=16, ge=1, le=4096, description="r: rank of each adapter's A (r x in) and B (out x r) matrices."
    )
    alpha: float = Field(default=32.0, gt=0.0, description="lora_alpha: the adapter's output is scaled by alpha / r.")
    dropout: float = Field(
        default=0.0, ge=0.0, lt=1.0,
        description="lora_dropout on the adapter's input. It acts only in train mode, which the trainer uses "
        "only with gradient_checkpointing, where it is refused (old and new log-probs would not match): keep 0.",
    )
    target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS),
        description="Names (suffixes) of the linear modules that get adapters, or ['all-linear'] (peft: every "
        "linear layer but the output head).",
    )

    @model_validator(mode="after")
    def _check(self) -> LoRASettings:
        if not self.target_modules:
            raise ValueError(
                "settings.grpo.lora.target_modules is empty: name the modules to adapt (e.g. q_proj, v_proj)"
            )
        return self


class RuntimeSettings(Section):
    """The runtime's fields of the optimizer's section (``settings.grpo``): how many processes train, whether
    LoRA adapters train, and how engine replicas are placed and fed new weights."""

    train_workers: int = Field(
        default=1, ge=1, le=4096,
        description="Worker processes sharing the policy update (torch FSDP2, one shard each; NCCL on CUDA, gloo "
        "on CPU). 1: the single-process trainer. Checkpoints of N > 1 workers are sharded (DCP) and resume with "
        "any worker count.",
    )
    lora: LoRASettings | None = Field(
        default=None,
        description="LoRA adapters on a frozen base (rank, alpha, dropout, target_modules); null: full "
        "fine-tuning. E.g. settings.grpo.lora.rank=16 turns it on with the other defaults.",
    )
    replicas: int = Field(
        default=1, ge=1, le=1024,
        description="Replicas of grpo's rollout engine (hf or vllm) on Ray, each an actor (needs "
        "settings.ray.enabled). A group's samples go to one replica, so its prompt prefix is cached once. "
        "Without Ray: settings.engine.gpus / settings.engine.replicas (local processes, by default one per GPU).",
    )
    weight_sync: Literal["auto", "device", "collective", "host"] = Field(
        default="auto",
        description="How new weights reach the policy's other copies after an update where they live in other "
        "processes (settings.grpo.train_workers > 1: trainer rank 0 to the driver's copy; settings.grpo.replicas on "
        "Ray, or local replicas without Ray (settings.engine.gpus / settings.engine.replicas): the trainer to every "
        "engine replica). auto (the default): device where sharded trainer workers on CUDA push to engine replicas; "
        "otherwise collective, except pushes to engine replicas from a policy held in host memory, which go the host "
        "way (measured on a 2-core CPU: 2-2.5x faster there; docs/scaling.md). device: the sharded trainer ranks push "
        "to the engine replicas themselves, cast to the engines' dtype on their GPUs: CUDA IPC from each trainer rank "
        "to the replica colocated with it (settings.grpo.placement.colocate), else NCCL from trainer rank 0 to every "
        "replica (gloo on CPU); the driver's copy is not on the way (seal_platform_libs/policy/device_push.py). "
        "collective: pushed over a torch.distributed group of their own (NCCL between distinct GPUs, CUDA IPC between "
        "processes on one GPU, gloo otherwise) in flat buffers of at most weight_sync_bucket_mb, one dtype each, "
        "received straight into the receiver's parameters (seal_platform_libs/policy/weight_sync.py). host: the full "
        "state dict through the worker pipe, Ray's object store or (local replicas) one shared-memory file (the "
        "earlier path, kept for comparison; also the fallback when a collective push fails). In-process engines need "
        "neither (the hf engine shares the model; vllm copies it in memory).",
    )
    weight_sync_bucket_mb: int = Field(
        default=256, ge=1, le=65_536,
        description="Most megabytes (MiB) per weight-sync bucket (settings.grpo.weight_sync: collective); a larger "
        "tensor travels alone.",
    )
    placement: PlacementSettings = Field(
        default_factory=PlacementSettings,
        description="Where engine replicas and trainer workers go on Ray (colocate, strategy, CPUs and GPUs each).",
    )

def check_lora_composes(settings: RuntimeSettings) -> None:
    """LoRA trains in one process: sharded training (grpo.train_workers > 1, FSDP2) does not take adapters yet."""
    workers = getattr(settings, "train_workers", 1) or 1
    if settings.lora is not None and workers > 1:
        raise ValueError(
            f"settings.grpo.lora cannot be combined with settings.grpo.train_workers = {workers} yet: sharded (FSDP2) "
            "training does not wrap the policy with adapters. Use settings.grpo.train_workers: 1 with LoRA (a 7B base "
            "with rank-32 adapters fits one 80 GB GPU, see docs/scaling.md), or full fine-tuning (settings.grpo.lora: "
            "null) to shard."
        )
