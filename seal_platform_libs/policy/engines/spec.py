"""What an engine replica is built from: the policy's config, checkpoint folder and dtype, never its weights.

A replica (a Ray actor or a local process) builds its engine from a :class:`PolicySpec` and then receives the
trainer's weights by a push (:meth:`.routing.ReplicaClient.update_weights`, the same path as every later
update): a ``vllm`` replica starts vLLM from the checkpoint folder when it can see it, else with dummy weights
(vLLM's ``load_format="dummy"``) from a folder holding only the config and the tokenizer; an ``hf`` replica
builds its model with empty parameters in the engine's dtype. No replica instantiates the policy in the
driver's dtype, and no full copy of the weights crosses the object store or a temporary folder at start-up.
A LoRA policy's replicas are plain models of its base: they receive merged weights (:func:`..lora.merged_weights`).
No torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PolicySpec:
    """The policy's base model as a replica needs it: ``config`` (``config.to_dict()``), ``name_or_path`` (its
    checkpoint folder, if any) and ``dtype`` (the policy's dtype name, what ``engine_dtype``'s ``auto`` falls
    back to off CUDA). Picklable."""

    config: dict[str, Any]
    name_or_path: str
    dtype: str

    @classmethod
    def of(cls, model: Any) -> PolicySpec:
        from ..lora import base_model

        base = base_model(model)
        return cls(config=base.config.to_dict(), name_or_path=str(getattr(base, "name_or_path", "") or ""),
                   dtype=str(base.dtype).removeprefix("torch."))

    def model_config(self) -> Any:
        """The transformers config (no weights, no model)."""
        from transformers import AutoConfig

        config = dict(self.config)
        model_type = config.pop("model_type")
        return AutoConfig.for_model(model_type, **config)

    def checkpoint(self) -> Path | None:
        """The policy's checkpoint folder when this process can see it (a config and safetensors weights)."""
        source = Path(self.name_or_path) if self.name_or_path else None
        if source is not None and (source / "config.json").is_file() and any(source.glob("*.safetensors")):
            return source
        return None


def start_folder(model: Any, tokenizer: Any, config: Any, lora: Any) -> tuple[Path, str | None]:
    """The folder vLLM starts from for ``model`` (a model, or a replica's :class:`PolicySpec`) and the temporary
    folder to remove later (None: the checkpoint's own). The checkpoint folder when this process sees it; else,
    for a spec, a folder holding only ``config`` (transformers') and the tokenizer, which vLLM loads with
    ``load_format="dummy"`` (random weights: vLLM's documented start for an engine whose weights come later,
    as in its RL examples); for a model, a saved copy of it (``lora``: its base, a
    :class:`.vllm_lora.VLLMLoRAState`)."""
    import tempfile

    spec = model if isinstance(model, PolicySpec) else PolicySpec.of(model)
    found = spec.checkpoint()
    if found is not None:
        return found, None
    tmpdir = tempfile.mkdtemp(prefix="seal-vllm-model-")
    if model is spec:
        config.save_pretrained(tmpdir)
    elif lora:
        lora.save_base(model, Path(tmpdir))
    else:
        model.save_pretrained(tmpdir, safe_serialization=True)
    tokenizer.save_pretrained(tmpdir)
    return Path(tmpdir), tmpdir


def empty_model(spec: PolicySpec, dtype: str, device: Any) -> Any:
    """The policy's architecture with uninitialised parameters in ``dtype`` on ``device`` (built on the meta
    device, then given storage; buffers such as rotary frequencies are computed as usual), ready to receive a
    weight push. Tied parameters stay tied."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(spec.model_config(), dtype=getattr(torch, dtype))
    made: dict[int, Any] = {}  # a parameter shared by two modules (tied) gets one storage
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(torch.empty_like(param, device=device),
                                                     requires_grad=param.requires_grad)
            module._parameters[name] = made[id(param)]
    model.tie_weights()  # the output layer is the embedding again where the config ties them
    return model.to(device).eval()
