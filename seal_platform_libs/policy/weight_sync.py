"""Policy weights pushed over a collective group of their own, in size-bounded buckets (``grpo.weight_sync:
collective``).

The sender (the trainer, or rank 0 of a sharded training group) and the receivers (the driver's copy of the
policy, rollout engines) form a :class:`SyncGroup`: a torch.distributed process group built directly on a
``TCPStore``, separate from the default group, so FSDP's own group is untouched (the pattern of vLLM's
``stateless_init_torch_distributed_process_group`` and OpenRLHF's / verl's weight-update groups). Its backend:
NCCL when every member is on a GPU of its own, CUDA IPC over a gloo control group when every member is on the
sender's GPU (colocated: NCCL refuses two ranks on one GPU; :mod:`.ipc_sync`), gloo through host memory
otherwise; ``backend="auto"`` lets the members pick it from their GPUs' UUIDs. One push is:

1. a header, broadcast as bytes: the policy version, the bucket plan (per bucket: a dtype, each tensor's name,
   shape and offset in the flat buffer) and the tied names;
2. every bucket, one broadcast each: the sender concatenates the bucket's tensors (a sharded FSDP2 parameter
   is gathered with ``full_tensor()`` just before, on every training rank at once) into one flat buffer of at
   most ``bucket_bytes`` (a tensor larger than that travels alone); each receiver gets a fresh buffer and
   hands views of it, name by name, to its sink (a module's parameters, or vLLM's weight loader).

Nothing passes through a pipe, the driver or an object store; about one bucket per process is in flight.
Which tensors: parameters (each storage once, tied names in the header), after the first push only trainable
ones (a LoRA policy's adapters; a frozen base is never re-sent).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Protocol

DEFAULT_BUCKET_BYTES = 256 * 2**20
_POLL_S = 0.05  # how often a cancellable wait looks at its cancel event

log = logging.getLogger(__name__)


class SyncAborted(RuntimeError):
    """A push or rendezvous given up (the group's ``cancel`` was set: a member died). The group is unusable; a
    pending gloo operation ends at the group's timeout in gloo's threads, and nothing waits for it."""


def _unless_cancelled(cancel: threading.Event, fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` on a thread of its own, waited for until ``cancel`` is set (then SyncAborted; the thread ends by
    its own timeout): gloo's ``abort`` / ``shutdown`` end no pending operation or rendezvous (torch 2.13)."""
    if cancel.is_set():  # given up already: no thread left waiting in the rendezvous
        raise SyncAborted(f"weight push aborted before {what} (a member of the sync group is gone)")
    result: Future = Future()
    threading.Thread(target=_settle, args=(result, fn), name="seal-weight-sync", daemon=True).start()
    _wait_for(result, cancel, what)
    return result.result()


def _settle(result: Future, fn: Callable[[], Any]) -> None:
    try:
        result.set_result(fn())
    except BaseException as exc:  # handed to the waiter, or dropped with an abandoned rendezvous
        result.set_exception(exc)


def _wait_for(done: Future, cancel: threading.Event, what: str) -> None:
    while not futures.wait([done], timeout=_POLL_S).done:
        if cancel.is_set():
            raise SyncAborted(f"weight push aborted in {what} (a member of the sync group is gone)")


def _wait(work: Any, cancel: threading.Event) -> None:  # a gloo operation's wait, given up on ``cancel``
    done: Future = Future()
    work.get_future().add_done_callback(lambda _: done.set_result(None))
    _wait_for(done, cancel, "a broadcast")
    work.wait()  # its own error, if it failed


def _cancellable(pg: Any, cancel: threading.Event) -> Any:
    """The CUDA IPC control group as :func:`.ipc_sync.ipc_broadcast` uses it, its waits given up on ``cancel``."""
    return SimpleNamespace(
        broadcast=lambda t, root: SimpleNamespace(wait=functools.partial(_wait, pg.broadcast(t, root), cancel)),
        barrier=lambda: SimpleNamespace(wait=functools.partial(_wait, pg.barrier(), cancel)))


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    offset: int
    numel: int


@dataclass
class Bucket:
    """Tensors of one dtype travelling as one flat buffer."""

    dtype: str
    slots: list[Slot] = field(default_factory=list)
    numel: int = 0


def _itemsize(dtype: str) -> int:
    import torch

    return int(getattr(torch, dtype).itemsize)


def plan_buckets(metas: Sequence[tuple[str, str, tuple[int, ...]]], bucket_bytes: int) -> list[Bucket]:
    """Group ``(name, dtype, shape)`` into buckets of one dtype and at most ``bucket_bytes`` each (a larger
    tensor gets a bucket of its own). Deterministic: every rank plans the same buckets from the same list."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, not {bucket_bytes}")
    done: list[Bucket] = []
    open_: dict[str, Bucket] = {}
    for name, dtype, shape in metas:
        numel = 1
        for d in shape:
            numel *= int(d)
        size = _itemsize(dtype)
        bucket = open_.get(dtype)
        if bucket is not None and bucket.slots and (bucket.numel + numel) * size > bucket_bytes:
            done.append(bucket)
            bucket = None
        if bucket is None:
            bucket = open_[dtype] = Bucket(dtype)
        bucket.slots.append(Slot(name, tuple(int(d) for d in shape), bucket.numel, numel))
        bucket.numel += numel
    done.extend(b for b in open_.values() if b.slots)
    return done


class SyncGroup:
    """A process group for weight pushes, apart from the default one: ``rank`` 0 sends, the others receive.

    ``host_store``: this member runs the ``TCPStore`` at ``address:port`` (the driver, whose address every
    member knows); the others connect to it. ``backend``: ``nccl``, ``ipc`` (CUDA IPC, every member on the
    sender's GPU), ``gloo``, or ``auto``: every member publishes its ``device``'s GPU UUID in the store and all
    pick the same backend with :func:`.ipc_sync.choose_backend` (a membership it cannot serve on the GPUs
    falls back to gloo on the CPU, the reason logged). Default: nccl when CUDA is available, else gloo; every
    member must pass the same one. ``device``: where this member's buffers live (default: the current CUDA
    device for nccl, ipc and auto with CUDA, else the CPU). Construction blocks until all members joined.
    ``cancel``: an event that, once set (:meth:`abort`, or by its holder), ends this member's waits (rendezvous,
    broadcasts) with :class:`SyncAborted`: a member that died would hold the others for the whole timeout.
    """

    def __init__(self, address: str, port: int, rank: int, world_size: int, *, host_store: bool = False,
                 backend: str | None = None, device: Any = None, timeout_s: float = 600.0,
                 name: str = "seal-weight-sync", cancel: threading.Event | None = None):
        import torch

        self.rank, self.world_size, self.cancel = rank, world_size, cancel
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend not in ("nccl", "ipc", "gloo", "auto"):
            raise ValueError(f"weight sync backend {backend!r}: use nccl, ipc, gloo or auto")
        on_gpu = backend != "gloo" and torch.cuda.is_available()
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu"))
        self.backend = backend
        self.pg: Any = None
        join = functools.partial(self._join, address, port, host_store, backend, timedelta(seconds=timeout_s), name)
        # a member that dies before it joins would hold the others here for the whole timeout
        _unless_cancelled(cancel, join, "the rendezvous") if cancel is not None else join()

    def _join(self, address: str, port: int, host_store: bool, backend: str, timeout: timedelta, name: str) -> None:
        import torch
        import torch.distributed as dist

        self._store = dist.TCPStore(address, port, self.world_size, is_master=host_store, timeout=timeout,
                                    wait_for_workers=False)
        if backend == "auto":
            backend = self._agree(dist.PrefixStore(name + "/devices", self._store))
            if backend == "gloo":  # some member on the CPU, or a mixed membership: through host memory
                self.device = torch.device("cpu")
        store = dist.PrefixStore(name, self._store)
        if backend in ("gloo", "ipc"):  # ipc: gloo carries the handles, the payload stays on the GPU
            pg: Any = dist.ProcessGroupGloo(store, self.rank, self.world_size, timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            pg = dist.ProcessGroupNCCL(store, self.rank, self.world_size, options)
        self.backend, self.pg = backend, pg

    def _agree(self, store: Any) -> str:
        """Every member's GPU through the store, then the backend they all pick from the same list."""
        from .ipc_sync import choose_backend, gpu_uuid

        store.set(str(self.rank), gpu_uuid(self.device) or "")
        gpus = [store.get(str(r)).decode() or None for r in range(self.world_size)]
        backend, why = choose_backend(gpus)
        if self.rank == 0:
            (log.warning if backend == "gloo" and None not in gpus else log.info)(
                "weight-sync group of %d: %s (%s)", self.world_size, backend, why)
        return backend

    def broadcast(self, tensor: Any) -> None:
        cancel = self.cancel
        if cancel is not None and cancel.is_set():
            raise SyncAborted("weight push aborted (a member of the sync group is gone)")
        if self.backend == "ipc" and tensor.is_cuda:
            from .ipc_sync import ipc_broadcast

            pg = self.pg if cancel is None else _cancellable(self.pg, cancel)
            ipc_broadcast(pg, self.rank, tensor, self.world_size)
        elif cancel is not None and self.backend in ("gloo", "ipc"):
            _wait(self.pg.broadcast(tensor, 0), cancel)
        else:  # NCCL: the host does not wait for the peers here; abort() ends a pending collective
            self.pg.broadcast(tensor, 0).wait()

    def abort(self) -> None:
        """Give up this group (a member died): this member's pending and later waits end with SyncAborted
        (gloo, CUDA IPC: within 50 ms, through ``cancel``; NCCL: the communicator is aborted). Thread-safe."""
        if self.cancel is not None:
            self.cancel.set()
        if self.backend == "nccl" and self.pg is not None:
            with contextlib.suppress(Exception):  # already torn down
                self.pg.abort()

    def close(self) -> None:
        """Leave the group. An aborted one on a thread of its own: gloo's destructor waits for a pending
        operation (an abandoned bucket) until the group's timeout, and would hold the caller that long."""
        box, self.pg = [self.pg], None
        if self.cancel is not None and self.cancel.is_set():
            threading.Thread(target=_release, args=(box,), name="seal-weight-sync-release", daemon=True).start()
        else:
            _release(box)


def _release(box: list[Any]) -> None:
    pg = box.pop()  # the last reference: the group goes when this returns
    if pg is not None and hasattr(pg, "shutdown"):
        with contextlib.suppress(Exception):  # already torn down
            pg.shutdown()


def sync_tensors(model: Any, everything: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameters to push (each storage once; ``everything=False``: trainable ones only, e.g. a LoRA
    policy's adapters) and the tied names (name left out -> the name it is tied to)."""
    first: dict[int, str] = {}
    named: dict[str, Any] = {}
    ties: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        kept = first.setdefault(id(param), name)
        if kept != name:
            ties[name] = kept
        elif everything or param.requires_grad:
            named[name] = param
    return named, {n: k for n, k in ties.items() if k in named}


def _full(tensor: Any) -> Any:
    """The whole tensor: an FSDP2 (DTensor) shard is all-gathered (collective over the training group)."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if callable(full) else tensor).detach()


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


class BucketSender(Protocol):  # what push sends over: a SyncGroup's rank 0, or a wrapper of one
    device: Any
    def broadcast(self, tensor: Any) -> Any: ...


def push(named: dict[str, Any], group: BucketSender | None, *, version: int, ties: dict[str, str] | None = None,
         bucket_bytes: int = DEFAULT_BUCKET_BYTES, cast: str | None = None) -> dict[str, float]:
    """Send ``named`` (name -> tensor, possibly FSDP2-sharded) to every receiver of ``group``.

    Every rank of a sharded training group calls it with the same names at once (the shards are gathered
    bucket by bucket); only the rank holding the group (the sender, its rank 0) passes it, the others pass
    None. ``cast``: a dtype to send the floating-point tensors in (the engines', e.g. ``bfloat16``: each bucket
    is cast on the sender's device); default: each tensor's own. Returns the push's counts and seconds."""
    import torch

    started = time.perf_counter()
    metas = [(n, cast if cast and t.is_floating_point() else _dtype_name(t), tuple(t.shape)) for n, t in named.items()]
    buckets = plan_buckets(metas, bucket_bytes)
    sent = 0
    if group is not None:
        _send_header(group, {"version": int(version), "ties": ties or {},
                             "buckets": [[b.dtype, [[s.name, list(s.shape)] for s in b.slots]] for b in buckets]})
    for bucket in buckets:
        dtype = getattr(torch, bucket.dtype)
        parts = [_full(named[s.name]).reshape(-1) for s in bucket.slots]
        if group is None:
            continue
        flat = torch.cat([p.to(device=group.device, dtype=dtype) for p in parts])
        group.broadcast(flat)
        sent += flat.numel() * flat.element_size()
    return {"tensors": float(len(named)), "buckets": float(len(buckets)), "bytes": float(sent),
            "seconds": time.perf_counter() - started}


def _send_header(group: BucketSender, header: dict[str, Any]) -> None:
    import torch

    data = torch.frombuffer(bytearray(json.dumps(header).encode()), dtype=torch.uint8)
    group.broadcast(torch.tensor([data.numel()], dtype=torch.int64, device=group.device))
    group.broadcast(data.to(group.device))


class Incoming:
    """One push as a receiver sees it: the header is read at construction (``version``, ``ties``); iterate
    to receive the buckets, which yields ``(name, tensor)`` in bucket order and then every tied name with its
    kept tensor. Iterate to the end exactly once: the buckets are collective calls the sender is making."""

    def __init__(self, group: SyncGroup):
        import torch

        self.group = group
        size = torch.zeros(1, dtype=torch.int64, device=group.device)
        group.broadcast(size)
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=group.device)
        group.broadcast(data)
        header = json.loads(data.cpu().numpy().tobytes().decode())
        self.version = int(header["version"])
        self.ties: dict[str, str] = dict(header["ties"])
        self.buckets = [(dtype, [(n, tuple(shape)) for n, shape in slots]) for dtype, slots in header["buckets"]]
        self.names = [n for _, slots in self.buckets for n, _ in slots]
        self.received = 0
        self._stream: Iterator[tuple[str, Any]] | None = None

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        if self._stream is not None:
            raise RuntimeError("a weight push can be received once")
        self._stream = self._receive()
        return self._stream

    def _receive(self) -> Iterator[tuple[str, Any]]:
        import torch

        kept: dict[str, Any] = {}
        targets = set(self.ties.values())
        for dtype, slots in self.buckets:
            numel = sum(_numel(shape) for _, shape in slots)
            flat = torch.empty(numel, dtype=getattr(torch, dtype), device=self.group.device)
            self.group.broadcast(flat)
            self.received += 1
            offset = 0
            for name, shape in slots:
                n = _numel(shape)
                tensor = flat[offset:offset + n].view(shape)
                offset += n
                if name in targets:
                    kept[name] = tensor
                yield name, tensor
        for name, target in self.ties.items():
            if target in kept:
                yield name, kept[target]

    def drain(self) -> None:
        """Receive whatever is left (a sink that failed or stopped midway), so that the group stays in step."""
        stream = self._stream if self._stream is not None else iter(self)
        for _ in stream:
            pass


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def load_into(module: Any, incoming: Incoming) -> int:
    """Copy a push into ``module``'s own tensors, in place (a model shared with an engine sees the new weights
    at once). Unknown names fail the push, after it has been received in full. Returns the tensors copied."""
    import torch

    params = module.state_dict(keep_vars=True)
    unknown = [n for n in incoming.names if n not in params]
    if unknown:
        incoming.drain()
        raise KeyError(f"the receiving model has no tensors named {unknown[:5]}: the sender's policy is not "
                       "the receiver's")
    copied = 0
    with torch.no_grad():
        for name, tensor in incoming:
            target, kept = params[name], incoming.ties.get(name)
            if kept is not None and kept in params and params[kept].data_ptr() == target.data_ptr():
                continue  # tied here too: already copied under the name it is tied to
            target.data.copy_(tensor)
            copied += 1
    return copied


def receive(group: SyncGroup, sink: Callable[[Incoming], Any]) -> tuple[int, Any]:
    """Receive one push into ``sink`` (e.g. ``functools.partial(load_into, model)``); its version and result."""
    incoming = Incoming(group)
    try:
        result = sink(incoming)
    finally:
        incoming.drain()
    return incoming.version, result
