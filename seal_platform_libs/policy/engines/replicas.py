"""Rollout-engine replicas as Ray actors, a router that keeps a group on one replica, and weight sync.

:func:`start_replicas` places K :class:`EngineReplica` actors in one placement group (one bundle each:
``grpo.placement.engine_cpus`` / ``engine_gpus``), each building its engine with a picklable ``builder`` the engine's
plugin supplies (grpo builds its ``hf`` or ``vllm`` engine from the policy's config, without weights, and then
pushes them: :mod:`.remote`). The returned :class:`RayEngineClient` satisfies the core's ``RolloutEngine``; it
pickles (actor handles and a tokenizer-bound prompt function), so episodes running in Ray actors use it too.

Routing: a conversation's key is its opening (everything before the first message an engine sampled: the
system prompt, any few-shot examples and the task), which every sample of a GRPO group and every turn of a dialogue
share. A small router actor assigns each new key to the live replica with the fewest keys and remembers it, so a group's
prompt prefix is prefilled (and, with vLLM, prefix-cached) on one replica only, and the groups spread evenly. Routing,
retries and the push bookkeeping are :class:`.routing.ReplicaClient`'s, shared with the replicas that run as local
processes without Ray (:mod:`.local`); this module is the Ray transport.

Weight sync (``update_weights``): the tensors that changed since the last push (torch's in-place version
counters tell; a full fine-tune changes all, a frozen part is never re-sent) are put into the object store
once and every live replica loads them, between its batches, with the new policy version; every Generation
carries the version it was sampled with. On one node the object store is shared memory; across nodes each
replica pulls one copy. With ``grpo.weight_sync: collective`` (or ``auto``, the default, for a model on a GPU) the same
tensors go instead from the driver's model straight to the replicas over a torch.distributed group (driver rank 0,
replicas 1..K; on GPUs: CUDA IPC when colocated on the model's GPU, NCCL on distinct GPUs; else gloo; see
:mod:`.collective`) in size-bounded buckets (:mod:`..weight_sync`), each
replica receiving into its engine between batches; a failed collective push falls back to the object store
(the collective push is :class:`.routing.ReplicaClient`'s, shared with the local replicas).

Failures: a replica that dies (killed, its node lost) is marked dead at the router and its requests are
retried on another replica (same prompt, same seed); with none left, ``generate`` raises
:class:`seal_platform.infra.InfraError`, which executors turn into an infrastructure-failure trajectory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import ray

from seal_platform.types import Generation, Message, SamplingParams

from .. import on_ray
from .routing import ReplicaClient, StickyRouter, routing_key
from .shipping import pack, unpack, with_ties

log = logging.getLogger(__name__)

# --- actors ------------------------------------------------------------------------------------------------


class EngineReplica:
    """One engine replica: any engine with ``generate_ids``, ``load_weights`` and ``close``."""

    def __init__(self, builder: Callable[[], Any], index: int):
        from .collective import ReplicaReceiver

        self.index = index
        self.engine = builder()
        self._receiver = ReplicaReceiver()  # a threaded actor: an abort_receive comes during a receive

    def ready(self) -> dict[str, Any]:
        return {"index": self.index, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "max_model_len": int(getattr(self.engine, "max_model_len", 0) or 0), "dtype": self.engine.dtype}

    def generate_ids(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        return self.engine.generate_ids(prompts, sampling)

    def load_weights(self, box: list[Any], version: int | None) -> int:
        packed, ties = ray.get(box[0])
        self.engine.load_weights(with_ties(unpack(packed), ties), version)
        return int(getattr(self.engine, "policy_version", version or 0))

    def receive_weights(self, address: str, port: int, rank: int, world_size: int, backend: str) -> int:
        """Receive one collective push into the engine (joining the client's group when it changed)."""
        return self._receiver.receive(self.engine, address, port, rank, world_size, backend)

    def abort_receive(self, address: str, port: int) -> None:
        """The client gave up its push at ``address:port`` (a member died): end this replica's receive in it."""
        self._receiver.abort(address, port)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def wake_weights(self) -> None:  # the memory sequence's two wakes (engines without them: nothing)
        if callable(getattr(self.engine, "wake_weights", None)):
            self.engine.wake_weights()

    def wake_kv_cache(self) -> None:
        if callable(getattr(self.engine, "wake_kv_cache", None)):
            self.engine.wake_kv_cache()

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats)

    def close(self) -> None:
        self.engine.close()


# The actor classes, made by calling ray.remote (a class decorator's result is invisible to mypy).
RemoteEngineReplica = ray.remote(max_restarts=0)(EngineReplica)
Router = ray.remote(max_restarts=-1)(StickyRouter)


# --- the client ----------------------------------------------------------------------------------------------


class RayEngineClient(ReplicaClient):
    """A ``RolloutEngine`` (and ``TrainableEngine``) over K replica actors. Thread-safe; picklable."""

    def __init__(self, kind: str, replicas: list[Any], router: Any, prompt_fn: Callable[[list[Message]], list[int]],
                 config: Any, group: Any = None, weight_sync: str = "host", bucket_bytes: int = 256 * 2**20):
        super().__init__(f"{kind}x{len(replicas)}@ray", replicas, prompt_fn, whole_state=kind == "vllm",
                         weight_sync=weight_sync, bucket_bytes=bucket_bytes)
        self.router = router
        self.config = config
        self._group = group
        self._owner = True  # the driver's copy owns the actors (closes them, tracks weight changes)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_owner=False, _tracker=None, _lock=None, _routes={}, _group=None, _pusher=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- the transport ---------------------------------------------------------------------------------

    def _submit(self, index: int, method: str, *args: Any) -> Any:
        return getattr(self.replicas[index], method).remote(*args)

    def _result(self, handle: Any, timeout: float | None = None) -> Any:
        return ray.get(handle, timeout=timeout)

    def _future(self, handle: Any) -> Any:
        return handle.future()

    def _router_call(self, method: str, *args: Any) -> Any:
        return ray.get(getattr(self.router, method).remote(*args))

    def _infra_errors(self) -> tuple[type[BaseException], ...]:
        return on_ray.infra_errors(self.config)

    def _check_owner(self) -> None:
        if not self._owner:
            raise RuntimeError("update_weights is called on the driver's engine, not on a copy in an episode")

    def _push(self, changed: dict[str, Any], ties: dict[str, str], version: int) -> dict[str, float]:
        """The changed tensors go into the object store once; every live replica loads them."""
        started = time.perf_counter()
        box = [ray.put((pack(changed), ties))]
        put_s = time.perf_counter() - started
        self._broadcast("load_weights", box, version)
        return {"put_s": put_s}

    def _sync_address(self) -> str:
        return str(ray.util.get_node_ip_address())

    def _collective_on_gpu(self, model: Any) -> bool:
        return bool(next(model.parameters()).is_cuda) and float(self.config.placement.engine_gpus) > 0

    def close(self) -> None:
        if not self._owner:
            return
        self._owner = False
        if self._pusher is not None:
            self._pusher.close()
        for replica in self.replicas:
            with contextlib.suppress(Exception):  # dead or stuck: killed below
                ray.get(replica.close.remote(), timeout=30)
            ray.kill(replica, no_restart=True)
        ray.kill(self.router, no_restart=True)
        if self._group is not None:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(self._group)
        on_ray.release(self.config)


def start_replicas(kind: str, config: on_ray.OnRay, n: int, builder: Callable[[], Any],
                   prompt_fn: Callable[[list[Message]], list[int]], weight_sync: str = "host",
                   bucket_bytes: int = 256 * 2**20) -> RayEngineClient:
    """K replicas of an engine (``builder()`` runs in each replica's actor), placed per ``config`` (the run's
    Ray cluster and ``grpo.placement``), and the client that routes to them (pushing weights as
    ``weight_sync`` says: ``collective`` or ``host``, see :class:`RayEngineClient`)."""
    on_ray.acquire(config)
    try:
        place = config.placement
        if place.colocate:  # the trainer workers' bundles, shared (engines sleep during the update)
            strategies, group = on_ray.colocated(config, n), None
        else:
            bundles = [{"CPU": place.engine_cpus, "GPU": place.engine_gpus}] * n
            strategies, group = on_ray.placement(
                config, bundles, name=f"seal-engines-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            )
        replicas: list[Any] = [  # actor handles
            RemoteEngineReplica.options(
                num_cpus=place.engine_cpus, num_gpus=place.engine_gpus, max_concurrency=256,
                scheduling_strategy=strategies[i],
            ).remote(builder, i)
            for i in range(n)
        ]
        infos = ray.get([r.ready.remote() for r in replicas])
        router = Router.remote(n)
    except BaseException:
        on_ray.release(config)
        raise
    client = RayEngineClient(kind, replicas, router, prompt_fn, config, group, weight_sync=weight_sync,
                             bucket_bytes=bucket_bytes)
    client.set_engine_dtype([info["dtype"] for info in infos])
    return client


__all__ = ["EngineReplica", "RayEngineClient", "Router", "routing_key", "start_replicas"]
