"""Releasing a closed vLLM engine's memory in a long-lived process (notebooks, sweeps, several runs in one
process; issue 23, item 9)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def forget_reload_info(llm: Any) -> None:
    """Drop this engine's layers from vLLM's layerwise-reload registry. ``reload_weights`` records each layer
    in a module-level WeakKeyDictionary whose values still reach the layer (through the parameters' weight
    loaders, bound methods of the layer), so the keys never die: every closed engine whose weights were
    synced kept its whole model (~800 MB for SmolLM2-135M) for the rest of the process."""
    def forget(model: Any) -> int:
        from vllm.model_executor.model_loader.reload import layerwise

        return sum(layerwise.LAYERWISE_INFO.pop(m, None) is not None for m in model.modules())

    try:
        llm.apply_model(forget)
    except Exception as exc:  # best effort: an engine that cannot run it is already unusable
        log.debug("could not clear vLLM's reload registry: %s", exc)
