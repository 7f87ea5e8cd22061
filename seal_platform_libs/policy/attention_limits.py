"""What a query of each attention layer sees besides the causal rule: a sliding window (Mistral, Qwen2, Gemma 3,
gpt-oss) or Llama 4's chunks, read from the model's config as transformers' masks apply them.

transformers puts these limits into its attention masks, and packed rows (:mod:`.packing`) run without masks:
per-sequence SDPA builds them itself from :func:`layer_limits` (:func:`causal_mask`), and a model whose layers
have a pattern transformers' own packed masks get wrong is refused there (:func:`attention_patterns`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


def model_config(model: Any) -> Any:
    """``model``'s config (a wrapper such as the LoRA adapters-off reference: its model's), or None."""
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "model"):
        config = getattr(model.model, "config", None)
    return config


def _config_window(config: Any) -> int | None:
    """The sliding window a config declares (None: none, or switched off with ``use_sliding_window``)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def attention_patterns(model: Any) -> frozenset[str]:
    """The attention patterns of ``model``'s layers, as transformers names them in ``config.layer_types``:
    ``full_attention`` (causal over every earlier token), ``sliding_attention`` (the last ``sliding_window``
    tokens), ``chunked_attention`` (Llama 4), ... A config without ``layer_types`` has one pattern for all
    layers: sliding when it declares a window (Mistral), else full."""
    config = model_config(model)
    if config is None:
        return frozenset({"full_attention"})
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    types = getattr(config, "layer_types", None)
    if types:
        return frozenset(types)
    return frozenset({"sliding_attention" if _config_window(config) else "full_attention"})


class LayerLimits(NamedTuple):
    """What a query of one attention layer sees besides the causal rule, in its sequence's own positions (None:
    no such limit). transformers builds these limits into its masks, which packed rows do without."""

    window: int | None = None  # sliding_attention: the last ``window`` positions up to its own
    chunk: int | None = None  # chunked_attention (Llama 4): the positions of its own chunk of ``chunk``

    def narrower_than(self, n_keys: int) -> bool:
        """Whether either limit hides some of ``n_keys`` positions from some query."""
        return any(limit is not None and limit < n_keys for limit in self)


NO_LIMITS = LayerLimits()


def layer_limits(module: Any, sliding_window: int | None = None) -> LayerLimits:
    """The limits of the attention layer ``module``: the ``sliding_window`` its forward passes to the attention
    function when it does (Mistral, Qwen2, Gemma 3), else what its config's ``layer_types[module.layer_idx]``
    says, as transformers' masks apply it (Qwen2-MoE and PhiMoE pass no window; Llama 4's chunks live only in
    the masks). ValueError for a layer type that is none of full, sliding or chunked attention, or a mixed
    ``layer_types`` and no ``layer_idx`` to tell the module's."""
    if sliding_window is not None:
        return LayerLimits(window=int(sliding_window))
    config = getattr(module, "config", None)
    if config is None:
        return NO_LIMITS
    types = getattr(config, "layer_types", None)
    kind = None
    if types:
        index = getattr(module, "layer_idx", None)
        if index is None and len(set(types)) > 1:
            raise ValueError(
                f"packed attention: {type(module).__name__} has no layer_idx, and its config's layer_types "
                f"mix {sorted(set(types))}"
            )
        kind = types[index or 0]
    if kind == "chunked_attention":
        return LayerLimits(chunk=int(config.attention_chunk_size))
    if kind not in (None, "full_attention", "sliding_attention"):
        raise ValueError(f"packed attention: attention layers of type {kind!r} are not supported")
    return LayerLimits(window=_config_window(config) if kind != "full_attention" else None)


def causal_mask(n_queries: int, n_keys: int, limits: LayerLimits = NO_LIMITS, device: Any = None) -> torch.Tensor:
    """The (queries, keys) boolean mask (True: attend) of queries at the last ``n_queries`` of ``n_keys``
    positions: each sees the positions up to its own, within ``limits`` as transformers' overlays put them
    (``sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``; ``chunked_overlay``: same
    ``idx // chunk_size``)."""
    queries = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]
    keys = torch.arange(n_keys, device=device)[None, :]
    allowed = keys <= queries
    if limits.window is not None:
        allowed &= keys > queries - limits.window
    if limits.chunk is not None:
        allowed &= keys // limits.chunk == queries // limits.chunk
    return allowed
