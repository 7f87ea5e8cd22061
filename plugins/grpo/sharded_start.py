"""How a sharded trainer rank gets its models without a full copy on its device (verl's start-up sequence).

Rank 0 alone reads the checkpoint (or builds the random policy) into host memory; every rank builds the
architecture on the meta device (no storage), shards it with FSDP2's ``fully_shard`` and receives its own
shards from rank 0 (``set_model_state_dict`` with ``broadcast_from_rank0``, as verl's
``fsdp2_load_full_state_dict``). No rank but 0 ever holds the whole policy, and rank 0 holds it in host memory
only. The frozen KL reference is built the same way from the same host copy, in ``grpo.ref_dtype``.
On CPU with gloo this is what the tests run; on CUDA with NCCL it is designed to torch's documented API and has
run on no GPU here.
"""

from __future__ import annotations

from typing import Any

import torch

from seal_platform_libs.policy.memory_phases import empty_cache
from seal_platform_libs.policy.reference import reference_dtype


def start_models(options: Any, rank: int, device: torch.device) -> tuple[Any, Any, Any, Any]:
    """``(model, ref_model, tokenizer, grpo)`` for one rank (``options``: the group's
    :class:`~.sharded.WorkerOptions`): the sharded policy and reference (None without the KL term) on
    ``device``, the tokenizer (None for a built model) and the ``grpo`` settings the trainer runs with (autocast
    off where FSDP's mixed precision casts instead). Collective: every rank calls it at once."""
    grpo = options.grpo
    full, tokenizer = _load_full(options) if rank == 0 else (None, _load_tokenizer(options))
    model = _skeleton(options, None)
    mp_policy = None
    if device.type == "cuda" and grpo.autocast != "off" and next(model.parameters()).dtype == torch.float32:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        half = torch.float16 if grpo.autocast == "float16" else torch.bfloat16
        mp_policy = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
        grpo = grpo.model_copy(update={"autocast": "off"})  # FSDP casts the gathered parameters instead
    shard(model, mp_policy)
    fill_from_rank0(model, full, device)
    ref = None
    if grpo.kl_coef > 0:
        ref = _skeleton(options, reference_dtype(grpo.ref_dtype, device))
        ref.requires_grad_(False)
        shard(ref, mp_policy)
        fill_from_rank0(ref, full, device)
    del full
    empty_cache()  # what the loading and sharding left in the allocator's cache goes back to the device
    return model, ref, tokenizer, grpo


def _load_full(options: Any) -> tuple[Any, Any]:
    """Rank 0: the whole policy in host memory (read from ``policy.model``, or built), and its tokenizer."""
    from seal_platform_libs.policy.loading import load_policy

    torch.manual_seed(options.seed)  # a random_init policy is the one the single-process trainer gets
    if options.build_model is not None:
        model = options.build_model()
        model.eval()
        return model, None
    return load_policy(options.policy.model_copy(update={"device": "cpu"}))


def _load_tokenizer(options: Any) -> Any:
    from seal_platform_libs.policy.loading import load_tokenizer

    return None if options.build_model is not None else load_tokenizer(options.policy)


def _skeleton(options: Any, dtype: str | None) -> Any:
    """The policy's architecture on the meta device (``dtype``: a torch dtype name; None: the policy's)."""
    from seal_platform_libs.policy.loading import empty_policy

    if options.build_model is None:
        return empty_policy(options.policy, dtype)
    with torch.device("meta"):  # a builder that picks its own device ignores this (and costs a full copy)
        model = options.build_model()
    if dtype is not None:
        model.to(getattr(torch, dtype))
    model.eval()
    return model


def shard(model: Any, mp_policy: Any | None) -> None:
    """``fully_shard`` each transformer block (the classes the model names in ``_no_split_modules``), then the
    root; gradients are summed over ranks."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    block_names = set(getattr(model, "_no_split_modules", None) or [])
    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


def fill_from_rank0(model: Any, full: Any | None, device: torch.device) -> None:
    """Give a sharded meta-device ``model`` storage on ``device`` and rank 0's weights: rank 0 holds ``full``
    (the whole model in host memory), the other ranks None. The parameters go through torch's
    ``set_model_state_dict(..., StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))`` (each
    rank keeps its shards only, as verl's ``fsdp2_load_full_state_dict``); the buffers are not in the state
    dict when they are not persistent (rotary ``inv_freq``), and ``to_empty`` left them uninitialised, so rank
    0 broadcasts its own. The model's dtype is kept (rank 0's tensors are cast to it)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model.to_empty(device=device)
    state: dict[str, Any] = {}  # tensors (torch types it as its checkpoint ValueType)
    if full is not None:
        dtypes = {name: p.dtype for name, p in model.named_parameters(remove_duplicate=False)}
        dtypes.update({name: b.dtype for name, b in model.named_buffers()})
        state = {k: v.to(dtypes.get(k, v.dtype)) for k, v in full.state_dict().items()}
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    sources = dict(full.named_buffers()) if full is not None else {}
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if full is not None:
                buffer.copy_(sources[name])
            dist.broadcast(buffer, src=0)
