"""Policy weights through Ray's object store: packing tensors as numpy arrays, finding what changed since the
last push, and tied tensors (what :mod:`.replicas` ships to its engine replicas). Only torch, lazily."""

from __future__ import annotations

from typing import Any


def pack(named: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Tensors as (dtype, numpy array) pairs: numpy arrays travel through the object store without copies."""
    import torch

    out = {}
    for name, tensor in named.items():
        t = tensor.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            out[name] = ("bfloat16", t.view(torch.int16).numpy())
        else:
            out[name] = (str(t.dtype).removeprefix("torch."), t.numpy())
    return out


def unpack(blob: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    import warnings

    import torch

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only arrays from the object store: we only read
        for name, (dtype, array) in blob.items():
            t = torch.from_numpy(array)
            out[name] = t.view(torch.bfloat16) if dtype == "bfloat16" else t
    return out


class ChangeTracker:
    """Which tensors of a state dict changed since the last :meth:`mark` (torch's in-place version counter
    and storage pointer; the first call reports all)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}

    @staticmethod
    def _stamp(tensor: Any) -> tuple[int, int]:
        return (tensor.data_ptr(), tensor._version)

    def changed(self, state: dict[str, Any], everything: bool = False) -> dict[str, Any]:
        """The changed tensors (``everything``: all of them), each storage once: a tensor tied to one listed
        before it (the output layer of a model with ``tie_word_embeddings``, tied to the input embedding) is
        left out; :meth:`ties` names it, so the replica can put it back without it travelling twice."""
        tied = self.ties(state)
        return {name: tensor for name, tensor in state.items()
                if name not in tied and (everything or self._seen.get(name) != self._stamp(tensor))}

    @staticmethod
    def _storage(tensor: Any) -> tuple[Any, ...]:
        return (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)

    @classmethod
    def ties(cls, state: dict[str, Any]) -> dict[str, str]:
        """Name of a tensor left out by :meth:`changed` -> name of the tensor it is tied to."""
        first: dict[tuple[Any, ...], str] = {}
        out = {}
        for name, tensor in state.items():
            kept = first.setdefault(cls._storage(tensor), name)
            if kept != name:
                out[name] = kept
        return out

    def mark(self, state: dict[str, Any]) -> None:
        self._seen = {n: self._stamp(t) for n, t in state.items()}


def with_ties(named: dict[str, Any], ties: dict[str, str]) -> dict[str, Any]:
    """``named`` with every tied tensor put back under its own name (the same tensor, not a copy) where the
    one it is tied to is there. Engines expect them: vLLM's in-place reload of a Llama with tied embeddings
    applies the final norm only when the output layer comes in the same reload."""
    out = dict(named)
    for name, kept in ties.items():
        if kept in out and name not in out:
            out[name] = out[kept]
    return out
