"""Driving a sharded GRPO training group (the ranks are :mod:`.sharded`'s :class:`~.sharded.TrainerWorker`).

Two ways to drive workers:

* :class:`TrainerWorker` is one rank. The Ray placement wraps it as an actor (``ray.remote(TrainerWorker)``),
  one per GPU bundle, all constructed with the same rendezvous address and port, and calls the same method on
  every actor at once (every method except ``close`` is collective).
* :class:`LocalTrainerGroup` starts N local processes (``torch.multiprocessing``, spawn) that each hold a
  :class:`TrainerWorker` and drives them over pipes: what the grpo plugin uses when
  ``grpo.train_workers > 1`` and no Ray placement is asked for.
* :class:`GroupTrainer` is what :class:`~.run.GRPORun` holds when ``grpo.train_workers > 1``: one of those
  groups and the driver's full copy of the policy.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_libs.policy.on_ray import OnRay
from seal_platform_libs.policy.trainer_group import TrainerGroup

from .samples import Sample
from .settings import GRPOSettings
from .sharded import TrainerWorker, WorkerOptions, save_single_process
from .trainer import build_optimizer


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host`` (for the rendezvous of a local group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --- a local group of worker processes -------------------------------------------------------------------------


def _serve(rank: int, world_size: int, address: str, port: int, options: WorkerOptions, conn: Any) -> None:
    """A worker process's loop: build the worker, then run ``(method, args)`` requests until ``close``."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        worker = TrainerWorker(rank, world_size, address, port, options)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            method, args = conn.recv()
        except EOFError:  # the driver is gone
            break
        if method == "close":
            worker.close()
            conn.send(("ok", None))
            break
        try:
            conn.send(("ok", getattr(worker, method)(*args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class WorkerError(RuntimeError):
    """A worker process raised or died; the message holds its traceback."""


class LocalTrainerGroup(TrainerGroup):
    """N :class:`TrainerWorker` processes on this machine, driven from the calling process over pipes.

    Methods mirror :class:`TrainerWorker` 's and return rank 0's result
    (:class:`~seal_platform_libs.policy.trainer_group.TrainerGroup`). Use as a context manager or call
    :meth:`close`.
    """

    def __init__(self, world_size: int, options: WorkerOptions, *, address: str = "127.0.0.1",
                 port: int | None = None, timeout_s: float = 600.0):
        import torch.multiprocessing as mp

        self.world_size = world_size
        self.timeout_s = timeout_s
        port = port or free_port(address)
        ctx = mp.get_context("spawn")
        self._conns, self._procs = [], []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(rank, world_size, address, port, options, child), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        try:
            self._gather()
        except BaseException:
            self._kill()
            raise

    def _gather(self) -> list[Any]:
        results, errors = [], []
        for rank, conn in enumerate(self._conns):
            if not conn.poll(self.timeout_s):
                errors.append(f"rank {rank}: no answer within {self.timeout_s:.0f} s")
                continue
            try:
                status, value = conn.recv()
            except EOFError:
                errors.append(f"rank {rank}: the worker process died (exit code {self._procs[rank].exitcode})")
                continue
            if status == "error":
                errors.append(f"rank {rank}:\n{value}")
            results.append(value)
        if errors:
            self._kill()
            raise WorkerError("training worker failed: " + "\n".join(errors))
        return results

    def _call(self, method: str, *args: Any) -> Any:
        if not self._conns:
            raise WorkerError("the training worker group is closed")
        for conn in self._conns:
            conn.send((method, args))
        return self._gather()[0]

    @property
    def updates(self) -> int:
        return int(self._call("__getattribute__", "updates"))  # an attribute of the worker, read in its process

    def close(self) -> None:
        """Stop the worker processes (politely, then by force after 30 s)."""
        if not self._conns:
            return
        try:
            for conn in self._conns:
                conn.send(("close", ()))
            for conn in self._conns:
                if conn.poll(30):
                    conn.recv()
        except (OSError, EOFError):
            pass
        for proc in self._procs:
            proc.join(timeout=30)
        self._kill()

    def _kill(self) -> None:
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []


# --- what the grpo plugin holds -------------------------------------------------------------------------------


class GroupTrainer:
    """The trainer :class:`~.run.GRPORun` holds when ``grpo.train_workers > 1``: a training group doing the
    updates, and the driver's full copy of the policy (``model``: what the rollout engine samples from and what
    ``model.safetensors`` checkpoints hold), overwritten with the group's weights at start and after every step.

    The group is a :class:`LocalTrainerGroup` (worker processes on the driver's machine) or, when the recipe
    turns Ray on (``ray``: an :class:`~.on_ray.OnRay`, the run's Ray cluster and ``grpo.placement``), a
    :class:`~.ray_trainers.RayTrainerGroup` (one actor per rank in a placement group, possibly on other nodes);
    both run the same :class:`TrainerWorker`."""

    def __init__(self, model: Any, settings: GRPOSettings, policy: PolicySettings | None, *, temperature: float = 1.0,
                 pad_id: int = 0, seed: int = 0, ray: OnRay | None = None):
        self.model = model
        self.settings = settings
        self.device = next(model.parameters()).device
        self.updates = 0
        options = WorkerOptions(grpo=settings, policy=policy or PolicySettings(), temperature=temperature,
                                pad_id=pad_id, seed=seed)
        self.group: TrainerGroup
        if ray is not None:
            from seal_platform_libs.policy.ray_trainers import RayTrainerGroup

            self.group = RayTrainerGroup(TrainerWorker, settings.train_workers, options, ray)
        else:
            self.group = LocalTrainerGroup(settings.train_workers, options)
        self._ray = ray is not None
        self.on_cuda = self.group.device_type() == "cuda"
        self.device_push: Any = None  # pushes from the ranks straight to engine replicas (.device_push)
        self._sync_group: Any = None
        self._sync_at: tuple[str, int] | None = None
        self.sync_stats: dict[str, float] = {}
        self.sync(everything=True)

    @torch.no_grad()
    def sync(self, everything: bool = False) -> None:
        """Bring the group's weights into the driver's model, in place (the engine's references stay valid):
        pushed by rank 0 over a weight-sync group (``grpo.weight_sync: collective``; ``everything``: every
        parameter, else the trainable ones) or gathered and sent through the worker pipe / Ray (``host``)."""
        if self.settings.weight_sync == "host":
            self.model.load_state_dict(self.group.full_state_dict(), strict=True)
            return
        self._receive(everything)

    def _receive(self, everything: bool) -> None:
        """One collective push from rank 0 into the driver's model. The driver hosts the group's store and is
        its rank 1. A driver's copy in host memory (the recipes') makes the group gloo: each bucket crosses to
        the host once, no full state dict is gathered, piped or pickled. A copy on a GPU makes it ``auto``
        (:func:`.ipc_sync.choose_backend`): CUDA IPC on rank 0's GPU, NCCL on another one, gloo if rank 0
        is on the CPU."""
        import threading

        from seal_platform_libs.policy.weight_sync import SyncGroup, load_into, receive

        if self._sync_at is None:
            address = _driver_address() if self._ray else "127.0.0.1"
            self._sync_at = (address, free_port("0.0.0.0" if self._ray else address))
        address, port = self._sync_at
        outcome: dict[str, Any] = {}
        device = next(self.model.parameters()).device
        backend = "auto" if device.type == "cuda" else "gloo"

        def receiver() -> None:
            try:
                if self._sync_group is None:
                    self._sync_group = SyncGroup(address, port, 1, 2, host_store=True, backend=backend,
                                                 device=device)
                outcome["received"] = receive(self._sync_group, lambda incoming: load_into(self.model, incoming))
            except BaseException as exc:  # raised in the caller
                outcome["error"] = exc

        thread = threading.Thread(target=receiver, name="grpo-weight-sync", daemon=True)
        thread.start()
        try:
            stats = self.group.push_weights(address, port, 2, self.updates, everything,
                                            self.settings.weight_sync_bucket_mb * 2**20, backend)
        except BaseException:
            self._sync_group, self._sync_at = None, None  # the receiver may still wait: a fresh group next time
            raise
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        self.sync_stats = dict(stats or {})

    def push_to_engine(self, engine: Any, version: int) -> bool:
        """Push the new weights from the ranks straight into ``engine``'s replicas (``grpo.weight_sync``: device,
        or auto on CUDA; :mod:`seal_platform_libs.policy.device_push`); False when the driver's copy is to be pushed
        instead."""
        from seal_platform_libs.policy.device_push import push_to_engine

        return push_to_engine(self, engine, version)

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One step's update on the group; the driver's model then holds the new weights."""
        metrics = self.group.step(samples)
        self.updates += int(metrics.get("updates", 0))
        self.sync()
        return metrics

    # the trainer side of the hybrid-engine memory sequence (.memory_phases), on every worker

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` in every worker (no-op on CPU)."""
        self.group.empty_cache()

    def offload(self) -> None:
        """The workers' parameter shards and optimizer states to host memory (``grpo.trainer_offload``)."""
        self.group.offload()

    def onload(self) -> None:
        """Back from :meth:`offload` (nothing if nothing was offloaded)."""
        self.group.onload()

    def save_sharded(self, directory: Path) -> None:
        """The group's DCP checkpoint in ``directory``."""
        self.group.save(directory)

    def load_sharded(self, directory: Path) -> None:
        """Restore a DCP checkpoint (any worker count) into the group and the driver's model."""
        self.updates = int(self.group.load(directory)["updates"])
        self.sync(everything=True)

    def load_single_process(self, trainer_file: Path) -> None:
        """Resume from a single-process trainer's checkpoint: the driver's model already holds its weights
        (``model.safetensors``); ``trainer.pt`` holds the AdamW state keyed by parameter index. The driver
        writes both as a (one-shard) DCP checkpoint in a temporary directory, which the workers load like any
        sharded checkpoint (DCP reshards it)."""
        import tempfile

        saved = torch.load(trainer_file, map_location="cpu", weights_only=True)
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, self.settings)
        optimizer.load_state_dict(saved["optimizer"])
        with tempfile.TemporaryDirectory(prefix="seal-grpo-resume-", dir=Path(trainer_file).parent) as tmp:
            save_single_process(Path(tmp), self.model, optimizer, int(saved.get("updates", 0)))
            del optimizer
            self.load_sharded(Path(tmp))

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def close(self) -> None:
        if self.device_push is not None:
            self.device_push.close()
        self.group.close()
        if self._sync_group is not None:
            self._sync_group.close()
            self._sync_group = None


def _driver_address() -> str:
    """This (the driver's) node's address as the Ray cluster sees it: where remote ranks find the store."""
    import ray

    return str(ray.util.get_node_ip_address())
