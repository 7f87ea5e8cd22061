"""The parts of the GPU memory plan (:mod:`.memory_plan`, whose docstring gives every formula): what one trainer
rank or one vLLM replica holds, part by part, and in which phases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model_shape import Shape

GIB = 2**30
CONTEXT_GIB = 1.0  # CUDA context per process and GPU
ALLOCATOR_RESERVE_GIB = 2.0  # reserved-but-free memory a trainer process keeps after empty_cache (check (B))
VLLM_OVERHEAD_GIB = 1.0  # vLLM's activations, sampler and CUDA graphs (kept while it sleeps)
LOGITS_BYTES_CHUNKED = 19  # peak bytes per (loss token x vocabulary entry) of one chunk of chunked log-probs
LOGITS_BYTES_UNCHUNKED = 22  # the same for a micro-batch's logits at once (entropy metric included)

LOAD, START, PUSH, ROLLOUT, UPDATE = "load", "start-up", "push", "rollout", "update"
PHASES = (LOAD, START, PUSH, ROLLOUT, UPDATE)
ALL = PHASES
LABELS = {LOAD: "start-up (trainer load)", START: "start-up (engines start)", PUSH: "weight push",
          ROLLOUT: "rollout", UPDATE: "update"}


@dataclass
class Part:
    what: str
    gib: float
    setting: str  # what to change when this part does not fit
    phases: tuple[str, ...] = ALL  # the phases in which it is held
    holder: str = ""  # the process that holds it ("trainer rank 0", "vLLM replica 1", ...)


@dataclass
class GPU:
    index: int
    node: int
    holders: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    def phase(self, name: str) -> float:
        """GiB held on this GPU in phase ``name``."""
        return sum(p.gib for p in self.parts if name in p.phases)

    def phases(self) -> dict[str, float]:
        return {name: self.phase(name) for name in PHASES}

    def need(self) -> float:
        """Peak GiB: the largest phase."""
        return max(self.phases().values(), default=0.0)

    def held_at_start(self, holders: set[str]) -> float:
        """GiB that ``holders`` (the processes already started on this GPU) hold when an engine starts."""
        return sum(p.gib for p in self.parts if START in p.phases and p.holder in holders)


@dataclass
class EngineStart:
    """vLLM's start-up rule for one replica: free memory when it starts >= gpu_memory_utilization x total."""

    gpu: int
    node: int
    holder: str
    free_gib: float
    wants_gib: float

    @property
    def met(self) -> bool:
        return self.free_gib >= self.wants_gib


@dataclass
class MemoryPlan:
    model: str
    shape: Shape
    gpus: list[GPU]
    capacity_gib: float
    engine_starts: list[EngineStart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "parameters": self.shape.params(), "capacity_gib": self.capacity_gib,
            "gpus": [{"index": g.index, "node": g.node, "holds": g.holders,
                      "parts": [{"what": p.what, "gib": round(p.gib, 2), "phases": list(p.phases), "holder": p.holder}
                                for p in g.parts],
                      "phases": {k: round(v, 2) for k, v in g.phases().items()},
                      "need_gib": round(g.need(), 2)} for g in self.gpus],
            "vllm_start": [{"gpu": e.gpu, "node": e.node, "replica": e.holder, "free_gib": round(e.free_gib, 2),
                            "wants_gib": round(e.wants_gib, 2), "met": e.met} for e in self.engine_starts],
            "notes": self.notes, "problems": self.problems,
        }


def _dtype_bytes(name: str) -> int:
    return 2 if name in ("bfloat16", "float16") else 4


def loss_tokens(grpo: Any) -> int:
    """Most loss tokens of one micro-batch whose logits exist at once on the unchunked path."""
    tokens = grpo.max_tokens_per_micro_batch or 16384
    if grpo.response_window_tokens:
        return min(tokens, grpo.micro_batch_size * grpo.response_window_tokens)
    return tokens


def trainer_parts(shape: Shape, grpo: Any, policy_dtype: str, world: int, on_cuda: bool = True,
                  pushes: bool = False, holder: str = "trainer", colocated: bool = False,
                  sharded: bool | None = None) -> list[Part]:
    """What one trainer rank holds, phase by phase (see the module's formulas); ``pushes``: it sends weights
    to engines in other processes after each update; ``colocated``: engines share its GPU; ``sharded``: an
    FSDP2 worker (default: ``world`` > 1; a 1-rank worker with True)."""
    n, b = shape.params(), _dtype_bytes(policy_dtype)
    fsdp = world > 1 if sharded is None else sharded
    parts: list[Part] = []
    sharding = "more trainer ranks (settings.grpo.train_workers) or LoRA (settings.grpo.lora)"
    after_first_update = (PUSH, ROLLOUT, UPDATE)
    largest = shape.vocab * shape.hidden  # the embedding (and an untied output layer): the largest tensor
    if grpo.lora is not None:
        p = shape.lora_params(grpo.lora.rank, list(grpo.lora.target_modules))
        parts.append(Part(f"frozen base ({policy_dtype}, also the KL reference)", n * b / GIB,
                          "settings.policy.dtype: bfloat16 for the frozen base"))
        parts.append(Part(f"LoRA adapters, gradients, AdamW moments (float32, {p / 1e6:.1f} M)", 16 * p / GIB,
                          "a smaller settings.grpo.lora.rank"))
        if pushes:  # replicas are plain models of the base: they receive merged weights, all merged at once
            merged = shape.projection_params(list(grpo.lora.target_modules)) * b
            bucket = max(largest * 2, grpo.weight_sync_bucket_mb * 2**20)
            parts.append(Part(f"push: merged copies of the adapted weights ({policy_dtype}) and a bf16 bucket",
                              (merged + bucket) / GIB, "fewer settings.grpo.lora.target_modules", (PUSH,)))
    else:
        # grpo.trainer_offload (colocated, sharded): shards and moments in host memory while the engines sample.
        offload = fsdp and colocated and getattr(grpo, "trainer_offload", False)
        held = tuple(p for p in ALL if not (offload and p == ROLLOUT))
        parts.append(Part(f"master weights ({policy_dtype})", n * b / world / GIB, sharding, held))
        parts.append(Part(f"AdamW moments ({policy_dtype}, from the first update)", 2 * n * b / world / GIB, sharding,
                          tuple(p for p in after_first_update if p in held)))
        parts.append(Part(f"gradients ({policy_dtype})", n * b / world / GIB, sharding, (UPDATE,)))
        if grpo.kl_coef > 0:
            # Held in grpo.ref_dtype (auto: bf16 on CUDA) by sharded workers and the single-process trainer alike,
            # in host memory between steps with grpo.ref_offload (on CUDA; .reference).
            ref = getattr(grpo, "ref_dtype", "auto")
            ref = ("bfloat16" if on_cuda else policy_dtype) if ref == "auto" else ref
            away = on_cuda and getattr(grpo, "ref_offload", False)
            parts.append(Part(f"KL reference ({ref}{', offloaded between steps' if away else ''})",
                              n * _dtype_bytes(ref) / world / GIB, "settings.grpo.kl_coef: 0",
                              (LOAD, UPDATE) if away else ALL))
        if fsdp:
            root, block = shape.root_params(), shape.block_params()
            parts.append(Part("FSDP gathered bf16 root + 2 blocks, unsharded float32 grads",
                              (2 * root + 4 * block + 4 * block + 4 * root) / GIB, sharding, (UPDATE,)))
            # FSDP2's parameters are DTensors: AdamW runs its foreach path (no fused kernel), whose
            # sqrt(second moment) is a new tensor the size of the rank's shard.
            parts.append(Part(f"AdamW step: foreach temporary ({policy_dtype})", n * b / world / GIB, sharding,
                              (UPDATE,)))
            parts.append(Part(f"load: one full tensor broadcast from rank 0 (the largest, {policy_dtype})",
                              largest * b / GIB, sharding, (LOAD,)))
        elif on_cuda and b == 4 and grpo.autocast != "off":
            parts.append(Part("autocast's bf16 copies of the weights", 2 * n / GIB,
                              "settings.grpo.train_workers > 1 (FSDP gathers block by block)", (UPDATE,)))
        if pushes:
            bucket = max(largest * 2, grpo.weight_sync_bucket_mb * 2**20)
            parts.append(Part(f"push: the largest tensor gathered ({policy_dtype}) and its bf16 bucket",
                              (largest * b + bucket) / GIB, "settings.grpo.weight_sync_bucket_mb", (PUSH,)))
    tokens = grpo.max_tokens_per_micro_batch or 16384
    h, i, layers = shape.hidden, shape.intermediate, shape.layers
    per_block = (10 * h + 4 * i) * 2
    if grpo.gradient_checkpointing:
        kept = h * 2 * layers * (2 if grpo.checkpoint_keep_attention else 1)
        act = tokens * (kept + per_block)
        what = f"activations, {tokens} tokens, checkpointing"
    else:
        act = tokens * per_block * layers
        what = f"activations, {tokens} tokens, no checkpointing"
    parts.append(Part(what, act / GIB, "settings.grpo.gradient_checkpointing: true, or a smaller "
                      "settings.grpo.max_tokens_per_micro_batch", (UPDATE,)))
    if grpo.logits_chunk_tokens:
        chunk = min(grpo.logits_chunk_tokens, tokens)
        parts.append(Part(f"logits, chunked: {chunk} loss tokens at a time (vocabulary {shape.vocab})",
                          chunk * shape.vocab * LOGITS_BYTES_CHUNKED / GIB,
                          "a smaller settings.grpo.logits_chunk_tokens", (UPDATE,)))
    else:
        count = loss_tokens(grpo)
        parts.append(Part(f"logits, unchunked: {count} loss tokens at once (vocabulary {shape.vocab})",
                          count * shape.vocab * LOGITS_BYTES_UNCHUNKED / GIB,
                          "settings.grpo.logits_chunk_tokens: 1024", (UPDATE,)))
    parts.append(Part("CUDA context", CONTEXT_GIB, "-"))
    parts.append(Part("caching allocator: reserved, free (after empty_cache)", ALLOCATOR_RESERVE_GIB, "-"))
    for part in parts:
        part.holder = holder
    return parts


def engine_parts(shape: Shape, vllm: Any, capacity: float, sleeping: bool, receives: int = 0,
                 holder: str = "vLLM") -> tuple[list[Part], float]:
    """One vLLM replica on a GPU of ``capacity`` GiB; returns its parts and its KV cache in GiB. ``sleeping``:
    it sleeps through the update (colocated, sleep mode); ``receives``: bytes of the bucket a push from
    another GPU lands in (0: none)."""
    share = vllm.gpu_memory_utilization * capacity
    weights = 2 * shape.params() / GIB
    kv = share - weights - VLLM_OVERHEAD_GIB
    setting = "settings.engine.vllm.gpu_memory_utilization"
    # The memory sequence (.memory_phases) wakes a sleeping engine's weights before the push and its KV cache
    # only after it (vLLM: wake_up(tags=["weights"]), push, trainer offload and empty_cache, wake_up(tags=
    # ["kv_cache"])): the push phase has the weights awake, not the KV cache.
    awake = (START, PUSH, ROLLOUT) if sleeping else ALL
    kv_awake = (START, ROLLOUT) if sleeping else ALL
    # Engines start after the trainer has loaded: nothing of theirs exists in the load phase.
    no_load = tuple(p for p in ALL if p != LOAD)
    parts = [Part("vLLM CUDA context (outside its budget)", CONTEXT_GIB, "-", no_load),
             Part("vLLM weights (bf16)", weights, setting, tuple(p for p in awake if p != LOAD)),
             Part("vLLM activations, CUDA graphs (kept asleep)", VLLM_OVERHEAD_GIB, setting, no_load),
             Part(f"vLLM KV cache ({int(max(kv, 0) * GIB / shape.kv_bytes_per_token()):,} tokens)", max(kv, 0.0),
                  setting, tuple(p for p in kv_awake if p != LOAD))]
    if receives:
        parts.append(
            Part(
                "push: a received bucket (NCCL or CUDA IPC)",
                receives / GIB,
                "settings.grpo.weight_sync_bucket_mb",
                (PUSH,),
            )
        )
    for part in parts:
        part.holder = holder
    return parts, kv
