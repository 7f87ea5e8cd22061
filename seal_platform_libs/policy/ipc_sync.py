"""CUDA IPC transport for weight pushes between processes on one GPU, and the choice of a sync group's backend.

NCCL refuses a communicator in which two ranks sit on the same GPU ("Duplicate GPU detected"), so a
:class:`~.weight_sync.SyncGroup` whose members share a GPU (a trainer rank and the vLLM replica colocated with
it, as in ``seal-gpu4``) cannot use it. Those groups use the ``ipc`` backend instead, the answer of verl,
OpenRLHF and SkyRL's colocated modes: control messages travel over a gloo group on the host, the payload
stays on the GPU. For each broadcast the sender (rank 0) shares its CUDA buffer with
``torch.multiprocessing.reductions.reduce_tensor`` (a picklable rebuild function and its arguments: a CUDA
IPC memory handle, offsets, an event), broadcasts those bytes over gloo, and every receiver rebuilds a tensor
viewing the sender's memory, copies it into its own buffer, synchronizes and drops the view; all members then
pass a gloo barrier before the sender returns, so the sender never frees or reuses a bucket still being read.

The buffer is shared once per receiver, each receiver reading its own share. torch counts a share's readers
with a counter in shared memory: 1 when shared, minus 1 when a reader drops its view, and the sender's
memory goes back to its allocator when the counter is 0 after the sender frees it, else waits in torch's
"sent data limbo" until it is. One share read by two receivers leaves the counter at -1, which torch reads
as unsigned (pytorch PR 172060: a huge count, never 0), so every bucket stayed in the limbo for good: on an
H200 with torch 2.11 a sender pushing 1 GiB to two receivers 20 times held 21 GiB (2026-11-27; a colocated
run would have run out of memory within a few steps). One share per receiver brings every counter to 0:
on the same kind of machine the sender then held 1.00 GiB after every one of the 20 pushes (2026-11-27,
``benchmarks/probe_ipc_memory.py``; tests/grpo/test_weight_sync_ipc.py checks the sender's memory).

A CUDA IPC handle names its device by index in the sender's process, and a receiver with another
``CUDA_VISIBLE_DEVICES`` may number the same GPU differently: the sender sends its GPU's UUID with the handle
and the receiver opens it on the local device with that UUID (as verl does); a receiver that cannot see the
sender's GPU fails with a clear error.

:func:`choose_backend` is the rule (a pure function of the members' GPU UUIDs, which the members exchange
through the group's store when built with ``backend="auto"``):

* every member on the sender's GPU -> ``ipc``;
* every member on a GPU of its own -> ``nccl``;
* any member on the CPU -> ``gloo`` (host memory);
* a mixed membership (some members share a GPU, others do not: e.g. the sender's GPU holds one receiver and
  another receiver sits on a second GPU, or two receivers share a GPU the sender is not on) -> ``gloo``
  through host memory, with the reason logged naming the GPU-sharing members: NCCL would refuse the shared
  GPU and CUDA IPC reaches only the sender's.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from seal_platform.errors import PluginError


class IPCSyncError(PluginError):
    """A CUDA IPC weight push cannot work between these processes."""


def gpu_uuid(device: Any) -> str | None:
    """The physical GPU's UUID of ``device`` (a torch device, name or index); None for a CPU device."""
    import torch

    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return str(torch.cuda.get_device_properties(index).uuid)


def choose_backend(gpus: Sequence[str | None]) -> tuple[str, str]:
    """The backend for a group whose member ``r`` is on the GPU with UUID ``gpus[r]`` (None: on the CPU;
    member 0 sends) and why: ``ipc``, ``nccl`` or ``gloo`` (see the module's docstring)."""
    if len(gpus) < 2:
        raise ValueError(f"a weight-sync group needs a sender and at least one receiver, not {len(gpus)} member(s)")
    on_cpu = [r for r, g in enumerate(gpus) if g is None]
    if on_cpu:
        return "gloo", f"member(s) {on_cpu} on the CPU: buckets travel through host memory"
    if all(g == gpus[0] for g in gpus):
        return "ipc", f"all {len(gpus)} members on the sender's GPU {gpus[0]}: CUDA IPC"
    if len(set(gpus)) == len(gpus):
        return "nccl", f"{len(gpus)} members on {len(gpus)} distinct GPUs: NCCL"
    shared = {g: [r for r, h in enumerate(gpus) if h == g] for g in gpus}
    pairs = "; ".join(f"members {rs} share GPU {g}" for g, rs in shared.items() if len(rs) > 1)
    return "gloo", (f"mixed membership ({pairs}; the others are on other GPUs): NCCL refuses two ranks on one "
                    "GPU and CUDA IPC reaches only the sender's GPU, so buckets travel through host memory "
                    "over gloo")


def local_index(uuid: str) -> int:
    """This process's index of the GPU with ``uuid``; a clear error when it cannot see that GPU."""
    import torch

    seen = [gpu_uuid(i) for i in range(torch.cuda.device_count())]
    if uuid not in seen:
        raise IPCSyncError(
            f"CUDA IPC weight push: the sender's GPU {uuid} is not visible in this receiving process (its GPUs: "
            f"{seen or 'none'}; CUDA_VISIBLE_DEVICES decides). CUDA IPC only reaches a GPU both processes see: "
            "build the group with backend='auto' (it picks NCCL or gloo for members on other GPUs) or place "
            "the receiver on the sender's GPU.")
    return seen.index(uuid)


def ipc_broadcast(pg: Any, rank: int, tensor: Any, world_size: int) -> None:
    """Broadcast CUDA ``tensor`` from rank 0 of gloo group ``pg`` (``world_size`` members) to the others'
    ``tensor`` (same shape and dtype), by CUDA IPC. Returns on every rank once every receiver has its copy."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    if rank == 0:
        torch.cuda.synchronize(tensor.device)  # the bucket is written before anyone reads it
        # One share per receiver (receiver r reads entry r - 1): see the module's docstring.
        shares = [reduce_tensor(tensor.detach()) for _ in range(world_size - 1)]
        data = pickle.dumps((gpu_uuid(tensor.device), shares))
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        pg.broadcast(torch.tensor([payload.numel()], dtype=torch.int64), 0).wait()
        pg.broadcast(payload, 0).wait()
    else:
        size = torch.zeros(1, dtype=torch.int64)
        pg.broadcast(size, 0).wait()
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        pg.broadcast(payload, 0).wait()
        # the bytes come from rank 0 of this job's own group (the trainer), never from model output
        uuid, shares = pickle.loads(payload.numpy().tobytes())
        rebuild, args = shares[rank - 1]
        args = list(args)
        if len(args) < 8 or not isinstance(args[6], int):  # another torch's rebuild_cuda_tensor signature
            raise IPCSyncError(f"CUDA IPC weight push: torch {torch.__version__}'s reduce_tensor gave arguments "
                               "this receiver does not know (storage_device expected 7th); use backend='gloo'")
        args[6] = local_index(uuid)  # rebuild_cuda_tensor's storage_device: the sender's GPU, numbered here
        shared = rebuild(*args)
        tensor.copy_(shared)
        torch.cuda.synchronize(tensor.device)
        torch.cuda.synchronize(shared.device)
        del shared  # closes the view (and releases the sender's IPC reference count)
    pg.barrier().wait()  # the sender may free or reuse the bucket only now
