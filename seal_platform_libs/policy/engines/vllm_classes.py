"""Keeping an in-process vLLM engine from changing the policy's own model classes.

vLLM serves many architectures through its Transformers modeling backend (in vLLM 0.32: OLMo 1-3, GPT-NeoX,
GPTBigCode, Phi, Starcoder2, SmolLM3, Seed-OSS, GLM, ...), which decorates the transformers class of the
model's decoder *in place* for torch.compile: ``support_torch_compile`` replaces that class's ``__init__`` and
``__call__``. With the engine in this process the class is also the policy's. The policy's instances, made
before, lack the attribute the new ``__call__`` reads, so the trainer's next forward failed (``'Olmo2Model'
object has no attribute 'do_not_compile'``); an instance made after would be built by vLLM's ``__init__``.

:class:`PolicyClasses` notes the ``__init__`` and ``__call__`` of the transformers classes a policy is made of
before vLLM builds (or reloads) its model, and puts back any that changed. The engine's own instance then runs
through ``torch.nn.Module.__call__``: its ``forward`` directly, as vLLM's ``__call__`` does when it does not
compile (on CPU the engine is eager: the same calls); on CUDA that engine loses vLLM's compilation of the
decoder, which ``engine.vllm.in_process: false`` keeps (its engine core builds the model in its own process).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_ABSENT = object()
_PATCHED = ("__init__", "__call__")


class PolicyClasses:
    """The transformers classes of ``model``'s modules (with their transformers bases)."""

    def __init__(self, model: Any):
        import torch

        seen: set[type] = set()
        for module in model.modules() if isinstance(model, torch.nn.Module) else ():
            seen.update(cls for cls in type(module).__mro__ if cls.__module__.startswith("transformers."))
        self.classes = sorted(seen, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
        self._warned = False

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """Run the body (vLLM building or reloading its model), then undo what it changed on these classes."""
        before = {(cls, name): cls.__dict__.get(name, _ABSENT) for cls in self.classes for name in _PATCHED}
        try:
            yield
        finally:
            changed = set()
            for (cls, name), value in before.items():
                if cls.__dict__.get(name, _ABSENT) is value:
                    continue
                changed.add(cls.__name__)
                if value is _ABSENT:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)
            if changed and not self._warned:
                self._warned = True
                log.info(
                    "vLLM's Transformers backend decorated %s (the policy's own classes) for torch.compile in "
                    "this process; put back, so the policy keeps working. This engine runs them uncompiled "
                    "(settings.engine.vllm.in_process: false compiles them in the engine's own process)",
                    sorted(changed),
                )
