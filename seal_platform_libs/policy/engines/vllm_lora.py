"""The LoRA adapter versions a :class:`~.vllm.VLLMEngine` serves for a LoRA policy (``grpo.lora``)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

# vLLM's allowed values of max_lora_rank (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VLLMLoRAState:
    """The adapter versions a vLLM engine serves for a LoRA policy: each update is written to its own
    directory (peft layout) and becomes a new ``LoRARequest`` (a new id and name); the previous one is
    unloaded and its directory removed."""

    def __init__(self, rank: int):
        self.rank = rank
        self.root = Path(tempfile.mkdtemp(prefix="seal-vllm-lora-"))
        self.version = 0
        self.request: Any = None

    @classmethod
    def for_model(cls, model: Any) -> VLLMLoRAState | None:
        from ..lora import is_lora

        if not is_lora(model):
            return None
        config = model.peft_config[model.active_adapter]
        return cls(int(config.r))

    @staticmethod
    def base(model: Any) -> Any:
        from ..lora import base_model

        return base_model(model)

    @staticmethod
    def save_base(model: Any, path: Path) -> None:
        """Save the base model without adapters (checkpoint names) for vLLM to load."""
        from ..lora import base_model, base_state_dict

        base_model(model).save_pretrained(path, state_dict=base_state_dict(model), safe_serialization=True)

    def engine_kwargs(self) -> dict[str, Any]:
        fits = [r for r in VLLM_LORA_RANKS if r >= self.rank]
        if not fits:
            raise ValueError(
                f"settings.grpo.lora.rank {self.rank} exceeds vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}"
            )
        return {"enable_lora": True, "max_lora_rank": fits[0], "max_loras": 1, "max_cpu_loras": 1}

    def write(self, model: Any) -> Any:
        """Save ``model``'s adapters as the next version; return its (not yet loaded) ``LoRARequest``."""
        from vllm.lora.request import LoRARequest

        from ..lora import adapter_name, save_adapter

        self.version += 1
        path = save_adapter(model, self.root / f"v{self.version}")
        return LoRARequest(lora_name=adapter_name(self.version), lora_int_id=self.version, lora_path=str(path))

    def activate(self, engine: Any, request: Any) -> None:
        """On the worker thread, between batches: unload the previous version, load ``request``."""
        old, self.request = self.request, None
        if old is not None:
            engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        if not engine.add_lora(request):
            raise RuntimeError(f"vLLM refused the adapter {request.lora_name} ({request.lora_path})")
        self.request = request

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
