"""Sleep mode of the vLLM engine (CUDA): a colocated engine gives its GPU memory to the trainer's update.

Level 1 copies the weights to host memory and back; level 2 (``engine.vllm.sleep_level``, the default)
drops them -- vLLM keeps only the model's buffers, e.g. rotary tables, on the host -- and the next weight
push, always the whole state for a vLLM engine, allocates and fills them before the KV cache comes back, as
vLLM's RLHF guide describes (``wake_up(tags=["weights"])``, load, ``wake_up(tags=["kv_cache"])``). A LoRA
policy sleeps at level 1: its base weights are loaded once and never pushed.

:class:`VLLMSleep` is a mixin of :class:`.vllm.VLLMEngine` (it uses its ``llm``, ``settings``, ``_lora``,
``_on_cuda`` and ``call_in_worker``); no-ops without CUDA or without ``sleep_mode``.
"""

from __future__ import annotations

from typing import Any


class VLLMSleep:
    llm: Any
    settings: Any
    _lora: Any
    _on_cuda: bool
    _weights_dropped: bool = False  # asleep at level 2: only a weight push wakes the engine

    call_in_worker: Any  # QueuedEngine's (annotation only: the engine's own method is the one called)

    def sleep_level(self) -> int:
        """The vLLM sleep level :meth:`sleep` uses: ``sleep_level`` of the settings, but 1 for a LoRA policy
        (its base weights are loaded once and never pushed again, so they must survive the sleep)."""
        return 1 if self._lora else int(self.settings.sleep_level)

    def sleep(self) -> None:
        """Free the GPU memory while a colocated trainer updates (``sleep_mode`` on CUDA; else nothing).

        Level 1 copies the weights to host memory and back; level 2 drops them (vLLM keeps only the model's
        buffers, e.g. rotary tables, on the host): the next weight push allocates them again and fills them,
        and only then is the KV cache allocated again (:meth:`wake_for_weights`, :meth:`weights_loaded`).
        Until that push the engine serves nothing: a request fails with a clear error."""
        if self._on_cuda and self.settings.sleep_mode:
            level = self.sleep_level()
            self.call_in_worker(lambda: self.llm.sleep(level=level))
            self._weights_dropped = level == 2

    def wake_up(self) -> None:
        """Back from a level-1 :meth:`sleep` with the weights it slept with. After a level-2 sleep there are no
        weights to wake with: a weight push (``update_weights``/``load_weights``, or a collective push) wakes it."""
        if self._weights_dropped:
            raise RuntimeError("this vLLM engine slept at level 2 (its weights were dropped): push the weights "
                               "to wake it (update_weights), or set settings.engine.vllm.sleep_level: 1")
        if self._on_cuda and self.settings.sleep_mode:
            self.call_in_worker(lambda: self.llm.wake_up())

    def wake_for_weights(self) -> None:
        """On the worker thread, before new weights are loaded: a sleeping engine gets its weight memory back
        (level 2: only the weights, still without the KV cache, so the push needs no room beside it; level 1:
        everything, the old weights included, which the push then overwrites)."""
        if self._on_cuda and self.settings.sleep_mode and self.llm.llm_engine.is_sleeping():
            self.llm.wake_up(tags=["weights"] if self._weights_dropped else None)

    def weights_loaded(self) -> None:
        """On the worker thread, after a push was loaded: after a level-2 sleep, the KV cache comes back and the
        engine schedules again."""
        if self._weights_dropped:
            self.llm.wake_up(tags=["kv_cache"])
            self._weights_dropped = False
