"""Weight pushes from the sharded trainer's GPUs straight into the engine replicas (``grpo.weight_sync: device``;
``auto`` picks it for sharded trainer workers on CUDA with engine replicas).

Without it a step's new weights went trainer rank 0 -> the driver's copy in host memory (gloo) -> the host path
to the replicas (Ray's object store or a shared-memory file, each replica reloading from host memory): float32
through host memory every step. Here the trainer ranks send, as verl, OpenRLHF and vLLM's RLHF example do:

* every trainer rank gathers the sharded parameters bucket by bucket (``full_tensor()``, collective over the
  training group) and casts each bucket to the engines' dtype (bf16) on its own GPU (:func:`.weight_sync.push`);
* **colocated** (``grpo.placement.colocate`` with one replica per trainer rank, seal-gpu4): trainer rank ``r``
  and replica ``r`` form a sync group of two on one GPU, whose backend is CUDA IPC (:mod:`.ipc_sync`: the
  bucket's memory handle crosses, the bytes stay on the GPU);
* **replicas on other GPUs** (seal-gpu8): trainer rank 0 and every live replica form one group, NCCL between
  their distinct GPUs, the same buckets broadcast to all.

Each group's backend is chosen by its members from their GPUs' UUIDs (``backend="auto"``,
:func:`.ipc_sync.choose_backend`), so a placement that is not what the recipe said still gets a working
transport (gloo through host memory, with the reason logged, for a membership neither CUDA IPC nor NCCL can
serve; gloo too on CPU, where the tests run this path). The groups' ``TCPStore`` is served by the driver, which is
no member of them: the payload never passes through it. A replica receives into its engine between batches
(:func:`.engines.collective.receive_into`). A push that fails falls back to the host path through the driver's
copy (which :class:`.distributed.GroupTrainer` keeps in step) and the next push forms new groups.

On CPU (gloo) this is what the tests run; the NCCL and CUDA IPC transports are designed to torch's documented
APIs (``ProcessGroupNCCL`` on a ``TCPStore``, ``torch.multiprocessing.reductions.reduce_tensor``) and have not
run here with vLLM replicas (no GPU with vLLM is lent to this project).
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)


def wants_device_push(weight_sync: str, trainer_on_cuda: bool, replicas: bool, lora: bool) -> bool:
    """Whether a sharded trainer pushes to the engine straight from its ranks: ``device`` always where the engine
    has replicas (on CPU the groups are gloo), ``auto`` when the trainer ranks are on CUDA, never with ``host`` or
    ``collective`` (the driver's copy sends). A LoRA policy's replicas receive merged weights, which the
    driver builds (:mod:`.engines.routing`): its pushes stay the driver's."""
    if not replicas or lora:
        return False
    return weight_sync == "device" or (weight_sync == "auto" and trainer_on_cuda)


def topology(train_workers: int, live: list[int], colocated: bool) -> list[tuple[int, list[int]]]:
    """The sync groups of one push, as ``(sending trainer rank, receiving replica indices)``: colocated with one
    live replica per trainer rank, rank ``r`` sends to ``live[r]`` (a group of two on one GPU: CUDA IPC); else
    rank 0 sends to every live replica (one group)."""
    if not live:
        return []
    if colocated and len(live) == train_workers:
        return [(rank, [index]) for rank, index in enumerate(live)]
    return [(0, list(live))]


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class DevicePush:
    """The driver's side of device pushes: the groups' stores (one per group, served here) for the current
    live set, and one push at a time (:meth:`push`)."""

    def __init__(self, bucket_bytes: int, timeout_s: float = 120.0):
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.key: tuple[Any, ...] | None = None  # the live set and groups the stores below serve
        self.address = ""
        self._stores: list[Any] = []
        self._ports: list[int] = []

    def _groups(self, client: Any, train_workers: int, colocated: bool) -> tuple[list[tuple[int, list[int]]], str]:
        """This push's groups, with stores served for them (new ones when the live set changed)."""
        import torch.distributed as dist

        live = client.live()
        groups = topology(train_workers, live, colocated)
        key = (tuple(live), tuple((r, tuple(i)) for r, i in groups))
        if self.key != key:
            live = client.probe()  # no rendezvous with a replica that died unnoticed
            groups = topology(train_workers, live, colocated)
            self.close()
            self.address = client._sync_address()
            for _rank, indices in groups:
                port = free_port()
                self._stores.append(dist.TCPStore(self.address, port, len(indices) + 1, is_master=True,
                                                  wait_for_workers=False))
                self._ports.append(port)
            self.key = (tuple(live), tuple((r, tuple(i)) for r, i in groups))
        return groups, self.address

    def push(self, trainer: Any, client: Any, version: int, colocated: bool) -> dict[str, float]:
        """Send the trainer group's weights (``trainer``: a :class:`.distributed.GroupTrainer`'s worker group) into
        ``client``'s live replicas, cast to their dtype; returns the push's statistics. Raises when a member
        fails (every replica's receive is then aborted, and the next push forms new groups)."""
        started = time.perf_counter()
        train_workers = trainer.world_size
        groups, address = self._groups(client, train_workers, colocated)
        if not groups:
            raise RuntimeError("no engine replica is alive to push to")
        ports, sizes = [0] * train_workers, [0] * train_workers
        handles: list[tuple[int, int, Any]] = []
        try:  # the receives first (each returns once its replica has the whole push), then the ranks send
            for (rank, indices), port in zip(groups, self._ports):
                ports[rank], sizes[rank] = port, len(indices) + 1
                for j, i in enumerate(indices):
                    handles.append((i, port, client._submit(i, "receive_weights", address, port, j + 1,
                                                            len(indices) + 1, "auto")))
            stats = trainer.push_weights(address, ports, sizes, version, True, self.bucket_bytes, "auto",
                                         client.engine_dtype, self.timeout_s) or {}
            for _, _, handle in handles:
                client._result(handle, timeout=self.timeout_s)
        except BaseException:  # every receive already asked for ends at once (not at the group's timeout)
            for index, port, _ in handles:
                try:
                    client._result(client._submit(index, "abort_receive", address, port), timeout=10.0)
                except Exception as exc:  # gone or stuck: the probe before the next push tells
                    log.info("engine replica %d did not take the push's abort: %s", index, exc)
            self.close()
            raise
        stats["seconds"] = time.perf_counter() - started
        stats["groups"] = float(len(groups))
        return stats

    def close(self) -> None:
        self._stores, self._ports, self.key = [], [], None


def push_to_engine(trainer: Any, engine: Any, version: int) -> bool:
    """``trainer`` (a :class:`.distributed.GroupTrainer`) pushes its weights from its ranks into ``engine``'s
    replicas where :func:`wants_device_push` says so; False when it does not (or the push failed: the caller
    pushes the driver's copy the host way)."""
    from .engines.routing import ReplicaClient
    from .engines.shipping import ChangeTracker

    settings = trainer.settings
    replicas = isinstance(engine, ReplicaClient)  # local or Ray replicas; an in-process engine shares the model
    if not wants_device_push(settings.weight_sync, trainer.on_cuda, replicas, settings.lora is not None):
        return False
    if trainer.device_push is None:
        trainer.device_push = DevicePush(settings.weight_sync_bucket_mb * 2**20)
    engine._check_owner()
    try:
        stats = trainer.device_push.push(trainer.group, engine, version, settings.placement.colocate)
    except Exception:
        log.exception("weight push from the trainer ranks failed; pushing the driver's copy through host memory")
        engine.probe()
        return False
    if engine._pusher is not None:  # the driver's own group (an earlier push) is stale now: formed anew if used
        engine._pusher.close()
    engine._tracker = ChangeTracker()  # a later host push sends everything
    engine.policy_version, engine._asleep = int(version), False
    engine.sync_stats = {"tensors": stats.get("tensors", 0.0), "bytes": stats.get("bytes", 0.0),
                         "buckets": stats.get("buckets", 0.0), "groups": stats["groups"], "put_s": 0.0,
                         "total_s": stats["seconds"]}
    return True
