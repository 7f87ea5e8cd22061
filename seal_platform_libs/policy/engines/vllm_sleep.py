"""Sleep mode of the vLLM engine (CUDA): a colocated engine gives its GPU memory to the trainer's update.

The hybrid-engine sequence (:mod:`..memory_phases`) wakes it in two steps: :meth:`VLLMSleep.wake_weights`
(``wake_up(tags=["weights"])``) before the push and :meth:`VLLMSleep.wake_kv_cache`
(``wake_up(tags=["kv_cache"])``) once the push is in and the trainer has emptied its cache (and offloaded), so
the KV cache is allocated last. A push outside that sequence wakes both itself: weights before it, the KV cache
after it.

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
    _asleep: frozenset[str] = frozenset()  # what sleeps now: "weights", "kv_cache"
    _kv_deferred: bool = False  # wake_weights was called: the KV cache waits for wake_kv_cache

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
            self._asleep = frozenset(("weights", "kv_cache"))

    def wake_up(self) -> None:
        """Back from a level-1 :meth:`sleep` with the weights it slept with. After a level-2 sleep there are no
        weights to wake with: a weight push (``update_weights``/``load_weights``, or a collective push) wakes it."""
        if self._weights_dropped:
            raise RuntimeError("this vLLM engine slept at level 2 (its weights were dropped): push the weights "
                               "to wake it (update_weights), or set settings.engine.vllm.sleep_level: 1")
        if self._on_cuda and self.settings.sleep_mode:
            self.call_in_worker(lambda: self.llm.wake_up())
            self._asleep, self._kv_deferred = frozenset(), False

    def wake_weights(self) -> None:
        """The memory sequence's "wake weights" step: the weight memory comes back (level 1: the weights it
        slept with, level 2: room for the push), the KV cache stays asleep until :meth:`wake_kv_cache`, also
        through the push that follows."""
        self.call_in_worker(lambda: self._wake_tag_now("weights"))
        self._kv_deferred = True

    def wake_kv_cache(self) -> None:
        """The memory sequence's last step: the KV cache comes back and the engine schedules again."""
        self._kv_deferred = False
        self.call_in_worker(lambda: self._wake_tag_now("kv_cache"))

    def _wake_tag_now(self, tag: str) -> None:
        if tag in self._asleep:
            self.llm.wake_up(tags=[tag])
            self._asleep = self._asleep - {tag}

    def wake_for_weights(self) -> None:
        """On the worker thread, before new weights are loaded: a sleeping engine gets its weight memory back,
        still without the KV cache, so the push needs no room beside it (level 1: the old weights, which the
        push then overwrites)."""
        self._wake_tag_now("weights")

    def weights_loaded(self) -> None:
        """On the worker thread, after a push was loaded: the engine has weights again; the KV cache comes back
        now, unless the memory sequence wakes it later (:meth:`wake_kv_cache`)."""
        self._weights_dropped = False
        if not self._kv_deferred:
            self._wake_tag_now("kv_cache")
