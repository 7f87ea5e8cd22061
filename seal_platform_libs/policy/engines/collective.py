"""Collective weight sync for the rollout engines (``grpo.weight_sync: collective``; the group and the bucket
format are :mod:`..weight_sync`'s).

Engine side, :func:`receive_into`: one push received into a running engine on its worker thread, between
batches, so no generation sees a half-loaded model, and the push's version becomes the engine's policy
version (what every later Generation carries). A push given up after its header (a member died) may have
loaded part of its buckets: the engine then holds its requests until a complete load, the push's fallback
(:meth:`.base.QueuedEngine.loading`):

* ``hf``: each bucket's tensors are copied into the engine's model in place (a peft model's adapters too,
  starting a new adapter version);
* ``vllm``: the buckets are streamed, as they arrive, into vLLM's in-place ``reload_weights`` (checkpoint
  names; the tied output layer comes last under its own name, which vLLM's reload of a tied Llama needs),
  then the prefix cache is reset. A sleeping engine (``sleep_mode``) is woken in the same worker step, so it
  never serves the weights it slept with (after a level-2 sleep: its weight memory first, the KV cache once
  the push is in). A LoRA policy's replicas are plain models of its base: they receive its merged weights
  (:func:`..lora.merged_weights`) like any other push.

Every push is cast to the engines' dtype (:attr:`.routing.ReplicaClient.engine_dtype`, what the replicas
reported at start-up) bucket by bucket on the sender's device (:func:`..weight_sync.push`'s ``cast``): a bf16
engine receives bf16, half the bytes of a float32 policy. The CUDA IPC and NCCL backends are designed to
torch's documented APIs and have not run in this project's tests (CPU only: gloo).

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
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .base import QueuedEngine

log = logging.getLogger(__name__)


def receive_into(engine: QueuedEngine, group: Any) -> int:
    """Receive one push over ``group`` (a :class:`~..weight_sync.SyncGroup`) into ``engine``; its version."""
    from .vllm import VLLMEngine

    into = _into_module
    if isinstance(engine, VLLMEngine):
        if engine._lora:
            raise NotImplementedError("vLLM serves LoRA adapters as LoRA requests, not over a sync group")
        into = _into_vllm
    try:
        return int(engine.call_in_worker(lambda: into(engine, group)))
    except BaseException as exc:
        _let_go(exc)
        raise


def _let_go(exc: BaseException) -> None:
    """Drop what the frames of a failed push's traceback hold (its bucket, the pending gloo operation and, through
    it, the group): the exception is kept in reference cycles (a future holding it, whose traceback holds that
    future) until the garbage collector runs, and with it a given-up group whose pending operation keeps the
    other members' waits (and their buckets) alive until the group's timeout."""
    import traceback

    traceback.clear_frames(exc.__traceback__)
    while exc.__context__ is not None:
        exc = exc.__context__
        traceback.clear_frames(exc.__traceback__)


def _into_module(engine: Any, group: Any) -> int:
    from ..lora import adapter_name, is_lora
    from ..weight_sync import Incoming, load_into

    incoming = Incoming(group)  # a push given up before this leaves the weights as they were
    try:
        with engine.loading():  # given up from here on, the model may hold part of the push: held until whole
            load_into(engine.model, incoming)
    finally:
        incoming.drain()
    if is_lora(engine.model):
        engine._adapter_pushes += 1
        engine.adapter_version = adapter_name(engine._adapter_pushes)
    engine.weights_complete(incoming.version)
    return incoming.version


def _into_vllm(engine: Any, group: Any) -> int:
    from ..weight_sync import Incoming

    incoming = Incoming(group)
    try:
        with engine.loading():  # a reload that raises may leave vLLM's model part loaded: held until whole
            llm = engine.llm
            engine.wake_for_weights()
            weights = engine.loadable(incoming, incoming.ties)
            if engine.settings.in_process:
                llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                             "is_checkpoint_format": True})
            else:  # vLLM's engine core in its own process: the buckets cross in one shared-memory file
                from .vllm_worker import load_through_shared_memory

                load_through_shared_memory(llm, dict(weights))
            engine.weights_loaded()
            llm.reset_prefix_cache()
    finally:
        incoming.drain()
    engine.weights_complete(incoming.version)
    return incoming.version


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# Per-operation timeout (seconds) of the replicas' group: a bucket broadcast, or the rendezvous. gloo ends a
# pending operation only by this timeout (its abort / shutdown do not, and a dead peer is not always noticed:
# measured); a member whose process is gone is noticed by the driver at once (its receive call fails), which
# then gives the push up everywhere (see ReplicaPusher), so this bounds only a member that hangs alive.
REPLICA_GROUP_TIMEOUT_S = 120.0


class ReplicaReceiver:
    """What a replica keeps: its membership of the client's group (re-joined when the group changes), and
    the pushes the driver gave up (:meth:`abort`), which end its waits in them at once."""

    def __init__(self) -> None:
        self.group: Any = None
        self.key: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self._cancels: dict[tuple[str, int], threading.Event] = {}  # (address, port) -> set when given up

    def _cancel(self, address: str, port: int) -> threading.Event:
        with self._lock:  # the abort may come before the receive it is about (calls run on threads of their own)
            event = self._cancels.get((address, port))
            if event is None:
                while len(self._cancels) >= 16:
                    self._cancels.pop(next(iter(self._cancels)))
                event = self._cancels[(address, port)] = threading.Event()
            return event

    def receive(self, engine: Any, address: str, port: int, rank: int, world_size: int, backend: str) -> int:
        from ..weight_sync import SyncGroup

        key = (address, port, rank, world_size, backend)
        group = self.group
        if self.key != key:
            self.close()
            group = SyncGroup(address, port, rank, world_size, backend=backend, timeout_s=REPLICA_GROUP_TIMEOUT_S,
                              cancel=self._cancel(address, port))
            self.group, self.key = group, key
        return receive_into(engine, group)

    def abort(self, address: str, port: int) -> None:
        """The driver gave up its push over the group at ``address:port`` (a member died): a receive in it,
        pending or still to come, ends at once with SyncAborted, and the group is left."""
        self._cancel(address, port).set()
        group = self.group
        if group is not None and self.key is not None and self.key[:2] == (address, port):
            group.abort()  # NCCL: the communicator too
            self.close()

    def close(self) -> None:
        group, self.group, self.key = self.group, None, None
        if group is not None:
            group.close()


class ReplicaPusher:
    """The driver's side: pushes to the live replicas over one group (driver rank 0, hosting the store).

    Transport-agnostic: the replicas are reached through a :class:`.routing.ReplicaClient` (Ray actors or
    local processes), whose ``receive_weights`` call on replica ``i`` joins the group and returns once the
    push is in (each replica runs :class:`ReplicaReceiver`); ``client._sync_address()`` is the address the
    replicas reach the driver's store at.

    A member that dies during a push (its receive call fails: a local replica's pipe closes, a Ray actor
    dies) makes the driver give the push up at once: its own wait ends (the group's ``cancel``), every live
    replica is told to end its receive (``abort_receive``), and the push raises; the caller then pushes
    through host memory and the next push forms a new group. gloo itself would hold everyone for
    :data:`REPLICA_GROUP_TIMEOUT_S`."""

    def __init__(self, bucket_bytes: int, timeout_s: float = REPLICA_GROUP_TIMEOUT_S):
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.group: Any = None
        self.key: tuple[Any, ...] | None = None
        self.cancel = threading.Event()  # the current group's: set when a push over it is given up

    def forms_group(self, live: list[int], on_gpu: bool) -> bool:
        """Whether the next push to ``live`` builds a new group (the caller probes the replicas first: a
        rendezvous with a dead member would wait until the member is found dead)."""
        return self.key is None or self.key[:2] != (tuple(live), "auto" if on_gpu else "gloo")

    def push(self, client: Any, live: list[int], changed: dict[str, Any], ties: dict[str, str],
             version: int, on_gpu: bool, cast: str | None = None) -> dict[str, float]:
        """Send ``changed`` (name -> tensor of the trainer's model) to ``client``'s replicas ``live``, each bucket
        cast to ``cast`` (the engines' dtype) on the sender's device before it travels; every replica receives
        into its engine. Raises when any member fails (the caller falls back and re-probes)."""
        from ..weight_sync import SyncGroup, push

        started = time.perf_counter()
        backend = "auto" if on_gpu else "gloo"  # auto: ipc, nccl or gloo from the members' GPUs
        if self.key is None or self.key[:2] != (tuple(live), backend):
            self.close()
            self.key = (tuple(live), backend, client._sync_address(), free_port())
            self.cancel = threading.Event()
        address, port, cancel = self.key[2], self.key[3], self.cancel
        # the receives first: each returns once its replica has the whole push
        handles = [client._submit(i, "receive_weights", address, port, j + 1, len(live) + 1, backend)
                   for j, i in enumerate(live)]
        for handle in handles:  # a receive that fails (its replica died) ends the driver's waits at once
            client._future(handle).add_done_callback(lambda f: self._failed(f, cancel))
        try:
            if self.group is None:
                # on a GPU: the model's (the one colocation is about); nothing changed: the current one
                device = (next(iter(changed.values())).device if changed else None) if on_gpu else "cpu"
                self.group = SyncGroup(address, port, 0, len(live) + 1, host_store=True, backend=backend,
                                       device=device, timeout_s=self.timeout_s, cancel=cancel)
            stats = push(changed, self.group, version=version, ties=ties, bucket_bytes=self.bucket_bytes, cast=cast)
            for handle in handles:
                client._result(handle, timeout=self.timeout_s)
        except BaseException as exc:
            self.give_up(client, live, address, port)
            _let_go(exc)  # this member's bucket and pending operation: its group goes, ending the others' waits
            raise
        stats["seconds"] = time.perf_counter() - started
        return stats

    def _failed(self, future: Any, cancel: threading.Event) -> None:
        if future.cancelled() or future.exception() is not None:
            cancel.set()
            group = self.group
            if group is not None and group.cancel is cancel:
                group.abort()  # NCCL: the communicator (gloo and CUDA IPC stop at the event)

    def give_up(self, client: Any, live: list[int], address: str, port: int, timeout_s: float = 10.0) -> None:
        """Leave the group and make the live replicas leave it too: a receive still waiting in it ends at once
        (without this a survivor waits for :data:`REPLICA_GROUP_TIMEOUT_S` and then serves the fallback)."""
        self.cancel.set()
        self.close()
        handles = [(i, client._submit(i, "abort_receive", address, port)) for i in live]
        for index, handle in handles:
            try:
                client._result(handle, timeout=timeout_s)
            except Exception as exc:  # gone, or stuck: the probe after the failed push tells
                log.info("engine replica %d did not take the push's abort: %s", index, exc)

    def close(self) -> None:
        group, self.group, self.key = self.group, None, None
        if group is not None:
            group.close()
