"""The memory backends: ``bfcl_eval``'s own ``MemoryAPI_kv`` (core + archival key-value memory with BM25
key search) and ``MemoryAPI_rec_sum`` (one text memory maintained by recursive summarisation).

We use the classes' tool methods and their context dump unchanged, and keep the memory snapshot in memory
(a dict) instead of BFCL's result-folder files. A model's call reaches only the methods its backend's tool
docs list, with keyword arguments decoded from JSON; anything a method raises comes back to the agent as an
``Error during execution: ...`` observation.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .data import tool_docs

_CLASSES = {
    "kv": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_kv", "MemoryAPI_kv"),
    "rec_sum": ("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_rec_sum", "MemoryAPI_rec_sum"),
}
_STATE = {"kv": ("core_memory", "archival_memory"), "rec_sum": ("memory",)}


class MemoryBackend:
    """One memory instance and the calls allowed on it."""

    def __init__(self, backend: str, snapshot: dict[str, Any] | None = None):
        import importlib

        module, name = _CLASSES[backend]
        self.backend = backend
        self.instance = getattr(importlib.import_module(module), name)()
        self.allowed = {doc["name"] for doc in tool_docs(backend)}
        if snapshot:
            for attr in _STATE[backend]:
                setattr(self.instance, attr, copy.deepcopy(snapshot[attr]))

    def snapshot(self) -> dict[str, Any]:
        return {attr: copy.deepcopy(getattr(self.instance, attr)) for attr in _STATE[self.backend]}

    def context(self) -> str:
        """The memory text BFCL puts into the system prompt (core memory, or the whole rec_sum memory)."""
        return self.instance._dump_core_memory_to_context()

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        if name not in self.allowed:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(sorted(self.allowed))}"
        try:
            result = getattr(self.instance, name)(**arguments)
        except Exception as exc:  # the agent's arguments are untrusted: any failure is an observation
            return f"Error during execution: {type(exc).__name__}: {exc}"
        try:
            return json.dumps(result, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(result)
