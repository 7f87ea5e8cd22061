"""grpo's engines as Ray replicas (the run's cluster is Ray): what runs inside each replica actor, and the factory.

The driver puts the policy's config and weights into the object store once; every replica rebuilds the model
from them (no shared file system needed across nodes) and wraps it in the recipe's engine (``hf`` with its
own copy of the weights, or ``vllm``). Routing, weight sync and failure handling are :mod:`.replicas`'.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..on_ray import OnRay


def _model_blob(model: Any) -> dict[str, Any]:
    from .shipping import pack

    return {"config": model.config.to_dict(), "dtype": str(model.dtype).removeprefix("torch."),
            "weights": pack(model.state_dict())}


def build_engine(kind: str, settings: Any, blob_box: list[Any], tokenizer: Any, seed: int | None) -> Any:
    """Inside a replica actor: the model from the shipped config and weights, in the ``kind`` engine."""
    import ray

    from .shipping import unpack

    blob = ray.get(blob_box[0])
    return engine_from_weights(kind, settings, blob["config"], blob["dtype"], unpack(blob["weights"]), tokenizer,
                               seed)


def engine_from_weights(kind: str, settings: Any, config: dict[str, Any], dtype: str, weights: dict[str, Any],
                        tokenizer: Any, seed: int | None) -> Any:
    """The ``kind`` engine over a model rebuilt from its config (``config.to_dict()``), dtype name and state
    dict (a tied output layer may be missing), on CUDA where this process has a GPU. What a replica (a Ray
    actor, or a local process) builds."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = dict(config)
    model_type = config_dict.pop("model_type")
    model_config = AutoConfig.for_model(model_type, **config_dict)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(model_config, torch_dtype=getattr(torch, dtype))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"lm_head.weight"} if getattr(model_config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"replica weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    if kind == "hf":
        from .hf import HFEngine

        return HFEngine(model, tokenizer, settings.hf.model_copy(update={"share_model": True}), seed=seed)
    from .vllm import VLLMEngine

    # A replica is a process of its own already: vLLM's engine core runs inside it, not in a third process.
    return VLLMEngine(model, tokenizer, settings.vllm.model_copy(update={"in_process": True}), seed=seed)


def start_replicated(kind: str, on: OnRay, replicas: int, seed: int, model: Any, tokenizer: Any,
                     settings: Any, weight_sync: str = "host", bucket_bytes: int = 256 * 2**20) -> Any:
    """K = ``grpo.replicas`` replicas of the ``kind`` engine on the run's Ray cluster, behind one routing client."""
    import ray

    from .. import on_ray
    from ..tokens import prompt_ids
    from .replicas import start_replicas

    on_ray.acquire(on)
    try:
        box = [ray.put(_model_blob(model))]
        builder = functools.partial(build_engine, kind, settings, box, tokenizer, seed)
        client = start_replicas(kind, on, replicas, builder, functools.partial(prompt_ids, tokenizer),
                                weight_sync=weight_sync, bucket_bytes=bucket_bytes)
    finally:
        on_ray.release(on)
    client.mark_synced(model)
    return client
