"""The frozen KL reference policy: its dtype (``grpo.ref_dtype``), how the single-process trainer builds it, and
where it waits between steps (``grpo.ref_offload``).

The reference only runs forward passes, so on CUDA it is held in bfloat16 by default (half the memory of a
float32 copy; those passes compute in bfloat16 under autocast anyway), on every path: the sharded ranks build
it on the meta device in that dtype (:mod:`.sharded_start`), the single-process trainer copies the policy
parameter by parameter into it (:func:`reference_policy`: the float32 copy never exists). With
``grpo.ref_offload`` its storages wait in host memory between steps and come back for the step's reference
pass only (:class:`ReferenceOffload`; GPU only: on CPU it would copy host memory to host memory).
"""

from __future__ import annotations

import copy
from typing import Any


def reference_dtype(choice: str, device: Any) -> str | None:
    """The reference's dtype name for ``grpo.ref_dtype`` on ``device`` (auto: bfloat16 on CUDA; None: the
    policy's own)."""
    if choice == "auto":
        return "bfloat16" if getattr(device, "type", str(device)) == "cuda" else None
    return choice


def reference_policy(model: Any, dtype: str | None = None) -> Any:
    """The KL reference: a frozen copy of ``model`` as it is now, its floating-point parameters in ``dtype``
    (None: as they are; buffers stay as they are, e.g. rotary tables in float32), each parameter copied
    straight into that dtype (no full copy in the policy's dtype on the way; tied parameters stay tied). For a
    LoRA policy, the same model called with its adapters off (the base never trains, so that is exactly the
    initial policy, with no copy)."""
    import torch

    from .lora import AdaptersOff, is_lora

    if is_lora(model):
        return AdaptersOff(model)
    target = getattr(torch, dtype) if dtype else None
    memo: dict[int, Any] = {}
    for param in model.parameters():  # deepcopy finds each parameter's copy here, by id (ties share one)
        data = param.detach()
        data = data.to(target, copy=True) if target is not None and data.is_floating_point() else data.clone()
        memo[id(param)] = torch.nn.Parameter(data, requires_grad=False)
    ref = copy.deepcopy(model, memo)
    ref.requires_grad_(False)
    ref.eval()
    return ref


class ReferenceOffload:
    """``grpo.ref_offload`` for a single-process trainer's reference: :meth:`away` moves its parameters'
    storages to host memory (in place, :class:`~.memory_phases.HostOffload`), :meth:`back` returns them.
    ``enabled`` False (the default off the GPU, or the setting off): both do nothing."""

    def __init__(self, ref_model: Any, enabled: bool):
        from .lora import AdaptersOff
        from .memory_phases import HostOffload

        # a LoRA policy's reference (AdaptersOff) is the policy itself: nothing of its own to move
        self.ref_model = (
            ref_model if enabled and ref_model is not None and not isinstance(ref_model, AdaptersOff) else None
        )
        self._held = HostOffload()

    def away(self) -> int:
        """The reference's storages to host memory; the bytes moved."""
        if self.ref_model is None:
            return 0
        return self._held.offload(p.detach() for p in self.ref_model.parameters())

    def back(self) -> int:
        """Back from :meth:`away` (nothing if nothing was moved); the bytes moved."""
        return self._held.onload()

    @property
    def away_now(self) -> bool:
        return self._held.offloaded
