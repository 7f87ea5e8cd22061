"""The GPU memory plan of a recipe: what each GPU holds in each phase of a run, checked before the run.

``seal-platform plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]`` prints it (registered by
the grpo plugin's ``register_commands``); ``run`` performs the same check before loading anything on CUDA
(grpo's ``check_machine`` calls :func:`plan` with this machine's GPUs: one implementation for both). Figures in
GiB (2^30 bytes), for decoder-only transformers of the Llama/Qwen family (N and the block and root sizes are
counted on the architecture itself when the model's ``config.json`` is on disk: :func:`.model_shape.counted_params`;
the activation formulas stay those of a dense model). ``docs/scaling.md`` ("Memory plan") has the worked figures.

Phases (a GPU needs the largest of its phases; every part says in which phases it is held)
    load: the trainer ranks build the model on the meta device; rank 0 reads the checkpoint into host memory
        and broadcasts it tensor by tensor; each rank keeps its shard (torch's ``set_model_state_dict`` with
        ``broadcast_from_rank0``, as verl's ``fsdp2_load_full_state_dict``), then ``empty_cache``.
    start-up: the engines start beside the loaded trainer (the trainer is built first: ``start_run``, then the
        engine). vLLM's start-up rule: the memory free on its GPU when it starts must be at least
        ``gpu_memory_utilization`` x the GPU (the ``free`` check of vLLM's worker); a plan that breaks it is
        refused, whatever the later phases need.
    push: after an update, the hybrid-engine sequence (``memory_phases.to_rollout_mode``: empty cache, wake
        weights, push, offload (``grpo.trainer_offload``), empty cache, wake KV cache); every trainer rank
        gathers one full tensor at a time and casts it into a bf16 bucket. The engines wake their KV cache
        inside the push (vLLM: ``wake_up(tags=["weights"])``, load, ``wake_up(tags=["kv_cache"])``), before the
        trainer empties its cache, so this phase counts the whole engine and the trainer's push buffers.
    rollout: engines generate; the trainer holds only its resident states.
    update: the trainer computes (gradients, gathered FSDP buffers, activations, logits); colocated engines in
        sleep mode hold only their residue.

trainer rank (full fine-tune, FSDP2 over W ranks; W = 1 is the single-process trainer)
    master weights (policy dtype, b bytes) N b / W, every phase; AdamW moments 2 N b / W from the first update
    on (torch creates them at the first step: not in load/start-up); gradients N b / W, update;
    KL reference (``grpo.kl_coef`` > 0): sharded workers in ``grpo.ref_dtype`` (auto: bf16 on CUDA), 2 N / W,
    on the GPU in the load and update phases only with ``grpo.ref_offload``; the single-process trainer in the
    policy's dtype, N b; ``grpo.trainer_offload`` (colocated, sharded) takes weights and moments off the GPU
    in the rollout phase; compute copies in the update: W = 1 on CUDA with float32 weights, autocast's
    bf16 copies of the weights, 2 N; W > 1, FSDP's gathered bf16 root + two blocks and their unsharded
    float32 gradients (2 R + 4 B_l + 4 B_l + 4 R), and AdamW's foreach temporary at the step, N b / W (FSDP2's
    DTensor parameters get no fused kernel; the single-process trainer's fused AdamW makes none);
    load (W > 1): one full tensor broadcast from rank 0, the largest (the embedding, V x h x b);
    push (engines in other processes): the gathered largest tensor (V x h x b) and its bf16 bucket
    (max(V x h x 2, ``grpo.weight_sync_bucket_mb``));
    activations of one micro-batch of T = ``grpo.max_tokens_per_micro_batch`` tokens (packed or padded),
    bf16: without checkpointing T x L x (10 h + 4 i) x 2 B; with it T x L x h x 2 B (each block's input;
    twice with ``checkpoint_keep_attention``) + T x (10 h + 4 i) x 2 B (one block recomputed);
    logits: chunked (``grpo.logits_chunk_tokens`` = C, on by default, the sharded path included) C x V x
    19 B at a time; unchunked (null) all the micro-batch's loss tokens at once, min(T, micro_batch_size x
    ``grpo.response_window_tokens``) x V x 22 B (bf16 logits, their float32 copy kept for backward, the
    entropy metric's float32 copy, log-softmax and product: 1-4k loss tokens of a 152k vocabulary, 3-12 GiB).
    The two byte counts are the peaks of live tensors :func:`.objective.chunked_logprobs` and the unchunked
    path allocate (``tests/grpo/test_memory_plan.py`` counts them on the CPU);
    LoRA instead of weights, moments, gradients and reference: a frozen base N x b (also the reference:
    adapters off) and the adapters P = sum over targeted projections of r x (in + out) per layer, float32:
    16 P; pushing to replicas (plain models of the base), merged copies of every targeted projection, made
    at once (``lora.merged_weights``: L x sum of in x out, x b), and a bf16 bucket;
    per process: 1 GiB of CUDA context, and 2 GiB the caching allocator keeps reserved but free (``empty_cache``
    runs after sharding and after every update; the device check (B) of ``benchmarks/gpu_checks.sh`` bounds
    what stays reserved by 2 GiB).
vLLM replica (started from the checkpoint folder or with dummy weights; no transformers model in its process)
    its own CUDA context, 1 GiB, outside its budget; ``engine.vllm.gpu_memory_utilization`` x the GPU: bf16
    weights 2 N, about 1 GiB of activations and CUDA graphs, the rest KV cache (2 x L x kv heads x head dim x
    2 B per token), which must hold at least one sequence of ``max_model_len`` tokens; a push received from
    another GPU (NCCL) lands in a bucket of max(V x h x 2, the bucket size) first.
    Sleep mode (colocated, ``engine.vllm.sleep_mode``) frees weights (level 2 drops them, level 1 copies them
    to host memory) and KV cache; the context, activations and graphs stay: the sleep residue, 2 GiB.
driver copy
    with ``grpo.train_workers`` > 1 the driver keeps a full copy of the policy (the weight-sync source) on
    ``policy.device``: N x b on GPU 0 unless ``settings.policy.device: cpu``, every phase.

What each figure assumes: the code as issue 49 leaves it: sharded ranks start from the meta device with
rank 0's broadcast, the reference in ``grpo.ref_dtype``, ``empty_cache`` after sharding and every update
(load, reference, allocator figures); replicas start from the checkpoint folder or dummy weights and receive
bf16 pushes, over CUDA IPC from the trainer rank on their GPU or over NCCL from another GPU (engine and push
figures); chunked log-probs on the sharded path too (logits). Measured: the logits byte counts (on the CPU,
against the code) and nothing else yet; the 1 GiB contexts, 1 GiB vLLM overhead, 2 GiB allocator reserve and
2 GiB sleep residue are estimates until ``benchmarks/gpu_checks.sh``'s memory checks run on a GPU.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .model_shape import Shape, shape_for

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
            # Sharded workers hold it in grpo.ref_dtype (auto: bf16 on CUDA), in host memory between steps with
            # grpo.ref_offload; the single-process trainer in the policy's dtype.
            ref = getattr(grpo, "ref_dtype", "auto") if fsdp else policy_dtype
            ref = "bfloat16" if ref == "auto" else ref
            away = fsdp and getattr(grpo, "ref_offload", False)
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
    # The engines wake their KV cache inside the push (vLLM: wake_up(tags=["weights"]), load, wake_up(tags=
    # ["kv_cache"])), while the trainer still holds its push buffers: the push phase counts it awake.
    awake = kv_awake = (START, PUSH, ROLLOUT) if sleeping else ALL
    # Engines start after the trainer has loaded: nothing of theirs exists in the load phase.
    no_load = tuple(p for p in ALL if p != LOAD)
    parts = [Part("vLLM CUDA context (outside its budget)", CONTEXT_GIB, "-", no_load),
             Part("vLLM weights (bf16)", weights, setting, tuple(p for p in awake if p != LOAD)),
             Part("vLLM activations, CUDA graphs (kept asleep)", VLLM_OVERHEAD_GIB, setting, no_load),
             Part(f"vLLM KV cache ({int(max(kv, 0) * GIB / shape.kv_bytes_per_token()):,} tokens)", max(kv, 0.0),
                  setting, tuple(p for p in kv_awake if p != LOAD))]
    if receives:
        parts.append(Part("push: a received bucket (NCCL)", receives / GIB, "settings.grpo.weight_sync_bucket_mb",
                          (PUSH,)))
    for part in parts:
        part.holder = holder
    return parts, kv


def plan(config: Any, settings: dict[str, Any], gpus: int, gpu_memory: float, nodes: int = 1,
         on_ray: bool = False) -> MemoryPlan:
    """The memory plan of ``config`` (with its plugins' validated ``settings``) on ``nodes`` machines of ``gpus``
    GPUs of ``gpu_memory`` GiB each; ``on_ray``: the run's cluster is Ray (engine replicas and trainer workers
    are actors placed per ``grpo.placement``)."""
    from .engines.settings import EngineSettings, local_devices
    from .policy import PolicySettings
    from .settings import GRPOSettings

    grpo = settings.get("grpo") or GRPOSettings()
    policy = settings.get("policy") or PolicySettings()
    engine = settings.get("engine") or EngineSettings()
    shape = shape_for(policy.model)
    place = grpo.placement
    world = grpo.train_workers
    replicas = grpo.replicas
    vllm = config.rollout.engine == "vllm"
    colocate = bool(on_ray and place.colocate)
    total = gpus * nodes
    devices = [GPU(index=k % gpus, node=k // gpus) for k in range(total)]
    result = MemoryPlan(policy.model, shape, devices, gpu_memory)
    policy_on_gpu = policy.device.startswith("cuda") or policy.device == "auto"
    dtype = policy.resolved_dtype()
    # Where the trainer ranks go: Ray actors (trainer_gpus each) or local ranks cuda:0..W-1 (W > 1), or the
    # driver's own device (W = 1).
    trainer_gpus: list[int] = []
    if world > 1:
        trainer_gpus = list(range(world))
    elif policy_on_gpu:
        trainer_gpus = [0]
    if on_ray and world > 1 and place.trainer_gpus == 0:
        trainer_gpus = []
        result.notes.append("trainer actors without GPUs (settings.grpo.placement.trainer_gpus 0): the update runs on their CPUs")
    engine_gpus: list[int] = []
    in_process = False
    if vllm:
        if on_ray and replicas >= 1 and place.engine_gpus > 0:
            start = 0 if colocate else len(trainer_gpus)
            engine_gpus = [start + r for r in range(replicas)]
        elif not on_ray:  # one in-process engine beside the trainer, or a local replica per GPU (engine.gpus)
            local = local_devices(engine, gpus)
            in_process = local is None
            engine_gpus = ([0] if policy_on_gpu else []) if local is None else [d for d in local if d is not None]
    needed = max([*trainer_gpus, *engine_gpus, -1]) + 1
    if needed > total:
        result.problems.append(
            f"the placement needs {needed} GPUs ({len(trainer_gpus)} for trainer ranks, {len(engine_gpus)} for "
            f"vLLM replicas{', shared' if colocate else ''}) but {nodes} node(s) x {gpus} = {total} are given: "
            "set settings.grpo.train_workers / settings.grpo.replicas, or settings.grpo.placement.colocate: true")
        return result
    # Trainer ranks push weights to engines in other processes (the driver's copy, replicas) after each update.
    pushes = world > 1 or (bool(engine_gpus) and not in_process)
    for rank, k in enumerate(trainer_gpus):
        holder = f"trainer rank {rank}" if world > 1 else "trainer"
        devices[k].holders.append(holder)
        devices[k].parts += trainer_parts(shape, grpo, dtype, world, pushes=pushes, holder=holder, colocated=colocate)
    max_len = engine.vllm.max_model_len or 32768
    sleeping = colocate and engine.vllm.sleep_mode
    bucket = max(shape.vocab * shape.hidden * 2, grpo.weight_sync_bucket_mb * 2**20)
    for r, k in enumerate(engine_gpus):
        holder = f"vLLM replica {r}" if len(engine_gpus) > 1 else "vLLM"
        devices[k].holders.append(holder)
        # A replica beside a trainer rank receives over CUDA IPC (no copy of its own); one on a GPU of its own
        # receives over NCCL, into a bucket (LoRA too: replicas receive merged weights).
        receives = bucket if pushes and k not in trainer_gpus else 0
        parts, kv = engine_parts(shape, engine.vllm, gpu_memory, sleeping and k in trainer_gpus, receives, holder)
        devices[k].parts += parts
        if kv * GIB < max_len * shape.kv_bytes_per_token():
            result.problems.append(
                f"GPU {k}: vLLM gets {engine.vllm.gpu_memory_utilization:.2f} x {gpu_memory:g} GiB, which after its "
                f"weights ({2 * shape.params() / GIB:.1f} GiB) leaves {max(kv, 0):.1f} GiB of KV cache, less than "
                f"one sequence of settings.engine.vllm.max_model_len {max_len} tokens "
                f"({max_len * shape.kv_bytes_per_token() / GIB:.1f} GiB): raise settings.engine.vllm.gpu_memory_utilization "
                "or lower settings.engine.vllm.max_model_len")
    if world > 1:
        if policy_on_gpu:
            devices[0].holders.append("driver copy")
            devices[0].parts.append(Part(f"driver's full policy copy ({dtype}, weight-sync source)",
                                         shape.params() * _dtype_bytes(dtype) / GIB, "settings.policy.device: cpu",
                                         holder="driver"))
        else:
            result.notes.append("the driver's full policy copy (weight-sync source) is in host memory "
                                f"({shape.params() * _dtype_bytes(dtype) / GIB:.1f} GiB)")
        result.notes.append(f"start-up: rank 0 reads the checkpoint into host memory "
                            f"({shape.params() * _dtype_bytes(dtype) / GIB:.1f} GiB) and broadcasts it; the other "
                            "ranks build the model on the meta device")
    for gpu in devices:
        phases = gpu.phases()
        name = max(PHASES, key=lambda p: phases[p])
        if phases[name] > gpu_memory:
            largest = max((p for p in gpu.parts if name in p.phases), key=lambda p: p.gib)
            result.problems.append(
                f"GPU {gpu.index} of node {gpu.node} ({', '.join(gpu.holders)}) would need {phases[name]:.1f} GiB "
                f"of {gpu_memory:g} in the {LABELS[name]} phase: the largest part is {largest.what} "
                f"({largest.gib:.1f} GiB); change {largest.setting}")
    # vLLM's start-up rule, replica by replica in the order they start.
    share = engine.vllm.gpu_memory_utilization * gpu_memory
    own = ("give the engines GPUs of their own (settings.grpo.placement.colocate: false)" if on_ray else
           "give the engines GPUs of their own (settings.engine.gpus)")
    names = [f"vLLM replica {r}" if len(engine_gpus) > 1 else "vLLM" for r in range(len(engine_gpus))]
    for r, k in enumerate(engine_gpus):
        gpu, holder = devices[k], names[r]
        before = {p.holder for p in gpu.parts} - set(names[r:])  # the trainer, and replicas started earlier
        held = gpu.held_at_start(before)
        check = EngineStart(gpu.index, gpu.node, holder, gpu_memory - held - CONTEXT_GIB, share)
        result.engine_starts.append(check)
        if not check.met:
            result.problems.append(
                f"GPU {gpu.index} of node {gpu.node}: {holder} would not start: vLLM needs the free memory at its "
                f"start ({check.free_gib:.1f} GiB: {gpu_memory:g} less {held:.1f} held by {', '.join(sorted(before))} "
                f"and its own CUDA context) to be at least "
                f"settings.engine.vllm.gpu_memory_utilization x the GPU ({share:.1f} GiB): lower "
                f"settings.engine.vllm.gpu_memory_utilization, or {own}")
    if not any(g.parts for g in devices):
        result.notes.append("nothing of this recipe runs on a GPU (settings.policy.device and the engine are on the CPU)")
    return result


def _span(phases: tuple[str, ...]) -> str:
    if phases == ALL:
        return "always"
    if phases == tuple(p for p in ALL if p != LOAD):
        return "from engine start"
    return ", ".join(phases)


def _groups(gpus: list[GPU]) -> list[list[GPU]]:
    """GPUs in use, those holding the same parts together (their tables would be identical)."""
    groups: dict[Any, list[GPU]] = {}
    for gpu in gpus:
        if gpu.parts:
            key = tuple((p.what, round(p.gib, 6), p.phases) for p in gpu.parts)
            groups.setdefault(key, []).append(gpu)
    return list(groups.values())


def render(result: MemoryPlan) -> Any:
    """A rich renderable: a table per GPU in use (GPUs with the same parts share one), its total in each phase,
    vLLM's start-up rule, notes and problems."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = result.shape
    out: list[Any] = [Text(f"model {result.model}: {s.params() / 1e9:.2f} B parameters, {s.layers} layers, hidden "
                           f"{s.hidden}, MLP {s.intermediate}, {s.kv_heads} KV heads x {s.hd}, vocabulary {s.vocab}",
                           style="bold"),
                      Text("phases: load (trainer ranks load and shard), start-up (engines start beside them), push "
                           "(weights to the engines), rollout, update")]
    starts: dict[tuple[int, int], list[EngineStart]] = {}
    for e in result.engine_starts:
        starts.setdefault((e.node, e.gpu), []).append(e)
    for group in _groups(result.gpus):
        gpu = group[0]
        phases = gpu.phases()
        if len(group) == 1:
            names = f"GPU {gpu.index} (node {gpu.node}): {', '.join(gpu.holders)}"
        else:
            kinds = ", ".join(re.sub(r" \d+$", "", h) for h in gpu.holders)
            names = (f"GPUs {', '.join(str(g.index) for g in group)} (node "
                     f"{', '.join(sorted({str(g.node) for g in group}))}), alike: one {kinds} each")
        table = Table(title=f"{names} - peak {gpu.need():.1f} of {result.capacity_gib:g} GiB", title_justify="left")
        table.add_column("part")
        table.add_column("GiB", justify="right")
        table.add_column("held")
        for part in gpu.parts:
            table.add_row(part.what, f"{part.gib:.2f}", _span(part.phases))
        out.append(table)
        out.append(Text("  per phase (GiB): " + ", ".join(f"{p} {phases[p]:.1f}" for p in PHASES
                                                        if any(p in q.phases for q in gpu.parts))))
        for start in starts.get((gpu.node, gpu.index), []):
            out.append(Text(f"  vLLM start-up rule ({start.holder}): {start.free_gib:.1f} GiB free at its start >= "
                            f"{start.wants_gib:.1f} wanted (gpu_memory_utilization x GPU): "
                            f"{'met' if start.met else 'NOT met'}"))
    unused = [g for g in result.gpus if not g.parts]
    if unused and len(unused) < len(result.gpus):
        out.append(Text(f"unused GPUs: {len(unused)} (every GPU should hold a trainer rank or an engine)", style="yellow"))
    out += [Text(f"note: {n}") for n in result.notes]
    out += [Text(f"does not fit: {p}", style="bold red") for p in result.problems]
    if not result.problems:
        out.append(Text("fits", style="bold green"))
    return Group(*out)


def add_command(cli: Any) -> None:
    """Add ``plan`` to the CLI (through the grpo plugin's ``register_commands``)."""
    import sys

    import click

    @cli.command("plan")
    @click.argument("args", nargs=-1)
    @click.option("--gpus", type=click.IntRange(1, 1024), required=True, help="GPUs per node.")
    @click.option("--gpu-memory", type=click.FloatRange(1, 10_000), required=True, help="GiB per GPU (an 80 GB card: 80).")
    @click.option("--nodes", type=click.IntRange(1, 10_000), default=1, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    def plan_command(args: tuple[str, ...], gpus: int, gpu_memory: float, nodes: int, as_json: bool) -> None:
        """The GPU memory plan of a recipe: plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]

        Prints what each GPU holds under the recipe's placement (trainer ranks, vLLM replicas, the driver's
        copy) and exits 1, naming the largest part and the setting to change, when one would not fit. The
        model's shape comes from settings.policy.model's config.json, or from its name for the Qwen2.5
        (0.5B-7B) and Qwen3 (0.6B-8B) checkpoints. Figures: docs/scaling.md, "Memory plan"."""
        from seal_platform.cli import _split_recipe_args, console
        from seal_platform.config import raise_for
        from seal_platform.planning import check_recipe, load_recipe, plugin_host_for
        from seal_platform.scaleout import cluster_for

        from .on_ray import RAY

        recipe, overrides = _split_recipe_args(args)
        config, issues, path = load_recipe(recipe, overrides)
        if config is None:
            raise_for(issues, str(path))
        host = plugin_host_for(config)
        checked, issues = check_recipe(config, host)
        if checked is None:
            raise_for(issues, str(path))
        cluster = cluster_for(host, checked.config, checked.settings)
        try:
            result = plan(checked.config, checked.settings, gpus, gpu_memory, nodes,
                          on_ray=cluster is not None and cluster.name == RAY)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if as_json:
            click.echo(json.dumps(result.to_dict(), indent=2))
        else:
            console.print(render(result))
        if result.problems:
            sys.exit(1)
