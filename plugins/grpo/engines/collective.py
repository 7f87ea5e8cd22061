"""Collective weight sync for the rollout engines (``grpo.weight_sync: collective``; the group and the bucket
format are :mod:`..weight_sync`'s).

Engine side, :func:`receive_into`: one push received into a running engine on its worker thread, between
batches, so no generation sees a half-loaded model, and the push's version becomes the engine's policy
version (what every later Generation carries):

* ``hf``: each bucket's tensors are copied into the engine's model in place (a peft model's adapters too,
  starting a new adapter version);
* ``vllm``: the buckets are streamed, as they arrive, into vLLM's in-place ``reload_weights`` (checkpoint
  names; the tied output layer comes last under its own name, which vLLM's reload of a tied Llama needs),
  then the prefix cache is reset. A sleeping engine (``sleep_mode``) is woken in the same worker step, so it
  never serves the weights it slept with (after a level-2 sleep: its weight memory first, the KV cache once
  the push is in). A LoRA policy's adapters are vLLM LoRA requests, not reloaded
  weights: those engines keep the host path.

Client side, :class:`ReplicaPusher` (used by both replica transports, Ray actors and local processes, through
:class:`.routing.ReplicaClient`): the driver (rank 0) and the live replicas (ranks 1..K) form one group,
kept while the live set is unchanged; each push sends the tensors the caller chose straight from the
trainer's model. Its backend: gloo when the model is on the CPU, else ``auto``: the members compare their GPUs'
UUIDs when the group forms (:func:`..ipc_sync.choose_backend`): CUDA IPC when every replica is on the model's
GPU (colocated), NCCL when every member has a GPU of its own, and gloo through host memory, with a logged
warning naming the GPU-sharing members, for a mixed membership (NCCL refuses two ranks on one GPU).
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

log = logging.getLogger(__name__)


def receive_into(engine: Any, group: Any) -> int:
    """Receive one push over ``group`` (a :class:`~..weight_sync.SyncGroup`) into ``engine``; its version."""
    if getattr(engine, "name", "") == "vllm":
        if getattr(engine, "_lora", None):
            raise NotImplementedError("vLLM serves LoRA adapters as LoRA requests, not over a sync group")
        return int(engine.call_in_worker(lambda: _into_vllm(engine, group)))
    return int(engine.call_in_worker(lambda: _into_module(engine, group)))


def _into_module(engine: Any, group: Any) -> int:
    from ..lora import adapter_name, is_lora
    from ..weight_sync import Incoming, load_into

    incoming = Incoming(group)
    try:
        load_into(engine.model, incoming)
    finally:
        incoming.drain()
    if is_lora(engine.model):
        engine._adapter_pushes += 1
        engine.adapter_version = adapter_name(engine._adapter_pushes)
    engine.policy_version = incoming.version
    return incoming.version


def _into_vllm(engine: Any, group: Any) -> int:
    from ..weight_sync import Incoming

    incoming = Incoming(group)
    try:
        llm = engine.llm
        engine.wake_for_weights()
        weights = engine.loadable(incoming, incoming.ties)
        if engine.settings.in_process:
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        else:  # vLLM's engine core in its own process: the buckets cross in one shared-memory file
            from .vllm_worker import load_through_shared_memory

            load_through_shared_memory(llm, dict(weights))
        engine.weights_loaded()
        llm.reset_prefix_cache()
    finally:
        incoming.drain()
    engine.policy_version = incoming.version
    return incoming.version


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# Per-operation timeout (seconds) of the replicas' group: a bucket broadcast, or the rendezvous. A member that
# died mid-push leaves the others waiting this long at most (the driver falls back to the object store).
REPLICA_GROUP_TIMEOUT_S = 120.0


class ReplicaReceiver:
    """What a replica actor keeps: its membership of the client's group (re-joined when the group changes)."""

    def __init__(self) -> None:
        self.group: Any = None
        self.key: tuple[Any, ...] | None = None

    def receive(self, engine: Any, address: str, port: int, rank: int, world_size: int, backend: str) -> int:
        from ..weight_sync import SyncGroup

        key = (address, port, rank, world_size, backend)
        if self.key != key:
            self.close()
            self.group = SyncGroup(address, port, rank, world_size, backend=backend,
                                   timeout_s=REPLICA_GROUP_TIMEOUT_S)
            self.key = key
        return receive_into(engine, self.group)

    def close(self) -> None:
        group, self.group, self.key = self.group, None, None
        if group is not None:
            group.close()


class ReplicaPusher:
    """The driver's side: pushes to the live replicas over one group (driver rank 0, hosting the store).

    Transport-agnostic: the replicas are reached through a :class:`.routing.ReplicaClient` (Ray actors or
    local processes), whose ``receive_weights`` call on replica ``i`` joins the group and returns once the
    push is in (each replica runs :class:`ReplicaReceiver`); ``client._sync_address()`` is the address the
    replicas reach the driver's store at."""

    def __init__(self, bucket_bytes: int, timeout_s: float = REPLICA_GROUP_TIMEOUT_S):
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.group: Any = None
        self.key: tuple[Any, ...] | None = None

    def forms_group(self, live: list[int], on_gpu: bool) -> bool:
        """Whether the next push to ``live`` builds a new group (the caller probes the replicas first: a
        rendezvous with a dead member would wait for the whole timeout)."""
        return self.key is None or self.key[:2] != (tuple(live), "auto" if on_gpu else "gloo")

    def push(self, client: Any, live: list[int], changed: dict[str, Any], ties: dict[str, str],
             version: int, on_gpu: bool) -> dict[str, float]:
        """Send ``changed`` (name -> tensor of the trainer's model) to ``client``'s replicas ``live``; every
        replica receives into its engine. Raises when any member fails (the caller falls back and re-probes)."""
        from ..weight_sync import SyncGroup, push

        started = time.perf_counter()
        backend = "auto" if on_gpu else "gloo"  # auto: ipc, nccl or gloo from the members' GPUs
        if self.key is None or self.key[:2] != (tuple(live), backend):
            self.close()
            self.key = (tuple(live), backend, client._sync_address(), free_port())
        address, port = self.key[2], self.key[3]
        # the receives first: each returns once its replica has the whole push
        handles = [client._submit(i, "receive_weights", address, port, j + 1, len(live) + 1, backend)
                   for j, i in enumerate(live)]
        try:
            if self.group is None:
                # on a GPU: the model's (the one colocation is about); nothing changed: the current one
                device = (next(iter(changed.values())).device if changed else None) if on_gpu else "cpu"
                self.group = SyncGroup(address, port, 0, len(live) + 1, host_store=True, backend=backend,
                                       device=device, timeout_s=self.timeout_s)
            stats = push(changed, self.group, version=version, ties=ties, bucket_bytes=self.bucket_bytes)
            for handle in handles:
                client._result(handle, timeout=self.timeout_s)
        except BaseException:
            self.close()
            raise
        stats["seconds"] = time.perf_counter() - started
        return stats

    def close(self) -> None:
        group, self.group, self.key = self.group, None, None
        if group is not None:
            group.close()
