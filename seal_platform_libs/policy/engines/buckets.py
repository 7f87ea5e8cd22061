"""Weights for engines in other processes on this machine, through one shared-memory file per push.

The driver copies the tensors to push into one flat buffer, a file mapped shared (``torch.from_file(...,
shared=True)``) under ``/dev/shm`` (or the temp folder when ``/dev/shm`` is too small, Docker's default being
64 MB); what travels to each process is only the :class:`Bucket` (the file's path and each tensor's name, dtype,
shape and offset). A reader maps the same file and gets views of it, without a copy of its own; the engine then
copies them into its model. So a push costs one host copy whatever the number of readers, and nothing passes
through a pipe or a socket. The driver deletes the file once every reader has loaded it
(:meth:`Bucket.remove`). Used by the local engine replicas (:mod:`.local`) and by a vLLM engine whose engine
core runs in its own process (:mod:`.vllm_worker`). Only torch, lazily.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

_ALIGN = 64  # every tensor starts at a multiple of this many bytes (any dtype's view needs its own alignment)


@dataclass
class Bucket:
    """A shared-memory file holding named tensors, described by plain data (picklable, msgpack-able)."""

    path: str
    nbytes: int
    # name -> [dtype name, shape, byte offset]
    entries: dict[str, list[Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "nbytes": self.nbytes, "entries": self.entries}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bucket:
        return cls(path=str(data["path"]), nbytes=int(data["nbytes"]),
                   entries={str(k): list(v) for k, v in data["entries"].items()})

    def remove(self) -> None:
        """Delete the file (readers that still map it keep their mapping until they drop it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _folder(nbytes: int) -> str:
    shm = "/dev/shm"
    try:
        if os.path.isdir(shm) and shutil.disk_usage(shm).free > nbytes * 1.1 + 2**20:
            return shm
    except OSError:
        pass
    return tempfile.gettempdir()


def _dtype(name: str) -> Any:
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"a weight bucket names an unknown dtype {name!r}")
    return dtype


def write(named: dict[str, Any]) -> Bucket:
    """Copy ``named`` (tensors on any device) into a new shared-memory file; the caller removes it."""
    import torch

    entries: dict[str, list[Any]] = {}
    offset = 0
    for name, tensor in named.items():
        entries[name] = [str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset]
        offset += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
    nbytes = max(offset, _ALIGN)
    path = os.path.join(_folder(nbytes), f"seal-weights-{os.getpid()}-{uuid.uuid4().hex}")
    buffer = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    bucket = Bucket(path, nbytes, entries)
    try:
        with torch.no_grad():
            for name, tensor in named.items():
                start = entries[name][2]
                flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
                buffer[start:start + flat.numel()].copy_(flat)
    except BaseException:
        bucket.remove()
        raise
    return bucket


def read(bucket: Bucket | dict[str, Any]) -> dict[str, Any]:
    """The bucket's tensors, as views of the mapped file (CPU; valid while they are referenced)."""
    import torch

    if isinstance(bucket, dict):
        bucket = Bucket.from_dict(bucket)
    buffer = torch.from_file(bucket.path, shared=True, size=bucket.nbytes, dtype=torch.uint8)
    out = {}
    for name, (dtype_name, shape, offset) in bucket.entries.items():
        dtype = _dtype(dtype_name)
        count = 1
        for n in shape:
            count *= int(n)
        size = count * torch.empty((), dtype=dtype).element_size()
        out[name] = buffer[int(offset):int(offset) + size].view(dtype).view([int(n) for n in shape])
    return out
