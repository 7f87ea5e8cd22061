"""Weight updates for a vLLM engine whose engine core runs in its own process (``engine.vllm.in_process: false``).

Calls into vLLM's engine-core process travel msgpack-encoded over a socket, so the in-process way of
reloading (handing ``reload_weights`` an iterator of tensors) cannot cross: a generator does not serialise,
and tensors would be copied into the message. Instead the engine is built with :class:`SharedWeightsLoader`
as its ``worker_extension_cls`` (vLLM's documented hook for RLHF weight loading), the driver writes the
tensors once into a shared-memory file (:mod:`.buckets`), and only the file's description (plain data) goes
through ``collective_rpc``; the worker maps the file and runs the same in-place ``reload_weights``.
"""

from __future__ import annotations

from typing import Any

EXTENSION = "seal_platform_libs.policy.engines.vllm_worker.SharedWeightsLoader"


class SharedWeightsLoader:
    """Mixed into vLLM's worker class (in the engine-core process): loads weights from a shared-memory file."""

    def seal_load_bucket(self, bucket: dict[str, Any]) -> int:
        """Reload the bucket's tensors in place (checkpoint-format names); the number of tensors loaded."""
        from seal_platform_libs.policy.engines import buckets

        named = buckets.read(bucket)
        self.reload_weights(weights_iterator=iter(named.items()), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return len(named)

    def seal_model_children(self) -> list[str]:
        """:func:`model_children` of this worker's model."""
        return model_children(self)


def model_children(worker: Any) -> list[str]:
    """The top-level module and parameter names of a vLLM worker's model (run in the worker)."""
    model = worker.model_runner.get_model()
    return [name for name, _ in model.named_children()] + [name for name, _ in model.named_parameters(recurse=False)]


def load_through_shared_memory(llm: Any, named: dict[str, Any]) -> None:
    """Load ``named`` into ``llm`` (engine core in its own process, built with :data:`EXTENSION`)."""
    from . import buckets

    bucket = buckets.write(named)
    try:
        llm.collective_rpc("seal_load_bucket", args=(bucket.to_dict(),))
    finally:
        bucket.remove()
