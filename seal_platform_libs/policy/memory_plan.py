"""The GPU memory plan of a recipe: what each GPU holds in each phase of a run, checked before the run.

``seal-platform plan RECIPE [key=value ...] --gpus N --gpu-memory GiB [--nodes M]`` prints it (registered by
the grpo plugin's ``register_commands``); ``run`` performs the same check before loading anything on CUDA
(grpo's ``check_machine`` calls :func:`plan` with this machine's GPUs: one implementation for both). Figures in
GiB (2^30 bytes), for decoder-only transformers of the Llama/Qwen family (N and the block and root sizes are
counted on the architecture itself when the model's ``config.json`` is on disk: :func:`.model_shape.counted_params`;
the activation formulas stay those of a dense model). ``docs/scaling-internals.md`` ("Memory formulas") has the
worked figures.

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
        gathers one full tensor at a time and casts it into a bf16 bucket, on its GPU (``grpo.weight_sync:
        device``: no host copy); each replica receives it into a bucket of its own. A sleeping engine's weights
        are awake in this phase, its KV cache only after it (vLLM: ``wake_up(tags=["weights"])`` before the
        push, ``wake_up(tags=["kv_cache"])`` after the trainer's offload and ``empty_cache``).
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
    another GPU (NCCL) or from the colocated trainer rank (CUDA IPC) lands in a bucket of max(V x h x 2, the
    bucket size) first.
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

from typing import Any

from .memory_parts import (  # noqa: F401 - re-exported: the plan's names
    ALL,
    ALLOCATOR_RESERVE_GIB,
    CONTEXT_GIB,
    GIB,
    GPU,
    LABELS,
    LOAD,
    LOGITS_BYTES_CHUNKED,
    LOGITS_BYTES_UNCHUNKED,
    PHASES,
    PUSH,
    ROLLOUT,
    START,
    UPDATE,
    VLLM_OVERHEAD_GIB,
    EngineStart,
    MemoryPlan,
    Part,
    _dtype_bytes,
    engine_parts,
    loss_tokens,
    trainer_parts,
)
from .model_shape import shape_for
from .settings import RUNTIME_SECTION


def plan(config: Any, settings: dict[str, Any], gpus: int, gpu_memory: float, nodes: int = 1,
         on_ray: bool = False) -> MemoryPlan:
    """The memory plan of ``config`` (with its plugins' validated ``settings``) on ``nodes`` machines of ``gpus``
    GPUs of ``gpu_memory`` GiB each; ``on_ray``: the run's cluster is Ray (engine replicas and trainer workers
    are actors placed per ``grpo.placement``)."""
    from .engines.settings import EngineSettings, local_devices
    from .loading import PolicySettings

    grpo = settings.get(RUNTIME_SECTION)  # the optimizer's section: RuntimeSettings and the trainer's knobs
    if grpo is None:
        raise ValueError(f"no settings section {RUNTIME_SECTION!r}: the memory plan needs the optimizer's settings")
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
        result.notes.append(
            "trainer actors without GPUs (settings.grpo.placement.trainer_gpus 0): the update runs on their CPUs"
        )
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
        # Every replica receives a push into a bucket of its own on its GPU (.weight_sync.Incoming): over NCCL
        # from a GPU of its own, or copied out of the colocated trainer rank's bucket by CUDA IPC (LoRA too:
        # replicas receive merged weights).
        receives = bucket if pushes else 0
        parts, kv = engine_parts(shape, engine.vllm, gpu_memory, sleeping and k in trainer_gpus, receives, holder)
        devices[k].parts += parts
        if kv * GIB < max_len * shape.kv_bytes_per_token():
            result.problems.append(
                f"GPU {k}: vLLM gets {engine.vllm.gpu_memory_utilization:.2f} x {gpu_memory:g} GiB, which after its "
                f"weights ({2 * shape.params() / GIB:.1f} GiB) leaves {max(kv, 0):.1f} GiB of KV cache, less than one "
                f"sequence of settings.engine.vllm.max_model_len {max_len} tokens "
                f"({max_len * shape.kv_bytes_per_token() / GIB:.1f} GiB): raise "
                "settings.engine.vllm.gpu_memory_utilization or lower settings.engine.vllm.max_model_len"
            )
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
        result.notes.append(
            "nothing of this recipe runs on a GPU (settings.policy.device and the engine are on the CPU)"
        )
    return result
