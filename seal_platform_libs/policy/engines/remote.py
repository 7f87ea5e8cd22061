"""grpo's engines as Ray replicas (the run's cluster is Ray): what runs inside each replica actor, and the factory.

The driver ships the policy's :class:`.spec.PolicySpec` (config, checkpoint folder, dtype: no weights); every
replica builds the recipe's engine from it (``hf`` with empty parameters in the engine's dtype, or ``vllm``
from the checkpoint folder or with dummy weights), and the driver then pushes the trainer's weights to all of
them, as after every update. Routing, weight sync and failure handling are :mod:`.replicas`'.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .spec import PolicySpec

if TYPE_CHECKING:  # pragma: no cover
    from ..on_ray import OnRay


def build_engine(kind: str, settings: Any, spec: PolicySpec, tokenizer: Any, seed: int | None) -> Any:
    """The ``kind`` engine of a replica (a Ray actor, or a local process) over the policy ``spec`` describes,
    on CUDA where this process has a GPU, before any weights: the caller pushes them next.

    ``hf``: the model with empty parameters in ``engine.hf.dtype`` (auto: bfloat16 on CUDA, else the policy's
    dtype). ``vllm``: vLLM builds its own model, from the checkpoint folder when this process sees it, else
    with dummy weights; no transformers model is made here."""
    import torch

    from .settings import engine_dtype

    if kind == "hf":
        from .hf import HFEngine
        from .spec import empty_model

        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        model = empty_model(spec, engine_dtype(settings.hf.dtype, spec), device)
        return HFEngine(model, tokenizer, settings.hf.model_copy(update={"share_model": True}), seed=seed)
    from .vllm import VLLMEngine

    # A replica is a process of its own already: vLLM's engine core runs inside it, not in a third process.
    return VLLMEngine(spec, tokenizer, settings.vllm.model_copy(update={"in_process": True}), seed=seed)


def start_replicated(kind: str, on: OnRay, replicas: int, seed: int, model: Any, tokenizer: Any,
                     settings: Any, weight_sync: str = "host", bucket_bytes: int = 256 * 2**20) -> Any:
    """K = ``grpo.replicas`` replicas of the ``kind`` engine on the run's Ray cluster, behind one routing client,
    holding ``model``'s current weights (pushed once they are built)."""
    from .. import on_ray
    from ..tokens import prompt_ids
    from .replicas import start_replicas

    on_ray.acquire(on)
    try:
        builder = functools.partial(build_engine, kind, settings, PolicySpec.of(model), tokenizer, seed)
        client = start_replicas(kind, on, replicas, builder, functools.partial(prompt_ids, tokenizer),
                                weight_sync=weight_sync, bucket_bytes=bucket_bytes)
    finally:
        on_ray.release(on)
    return client.first_push(model)  # the replicas' first weights: policy version 0
