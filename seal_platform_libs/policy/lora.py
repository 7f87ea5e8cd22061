"""LoRA training (``grpo.lora``): peft adapters on a frozen base model.

What this module gives the rest of the plugin:

* :func:`wrap` turns the loaded policy into a ``peft`` model: every base parameter frozen, trainable
  low-rank adapters on the target modules (B starts at zero, so the wrapped model computes exactly what the
  base does until the first update);
* :class:`AdaptersOff`, the KL reference: the same model object called with its adapters switched off, so
  no second copy of the weights exists;
* the adapter files (peft's own layout: ``adapter_config.json`` + ``adapter_model.safetensors``, which vLLM
  and ``peft.PeftModel.from_pretrained`` read as they are), :func:`base_identity` (what the adapters were
  trained on top of) and :func:`merged_model` for export.

peft and torch are imported inside the functions, so importing this module costs nothing: the engines and
the checkpoints import it to ask :func:`is_lora`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# Values of each base tensor hashed into the base model's fingerprint (a cheap check, not a full digest).
_FINGERPRINT_VALUES = 256


log = logging.getLogger(__name__)


def adapter_name(version: int) -> str:
    """The name of an adapter version in the engines (and on :attr:`Generation.adapter`)."""
    return f"lora-v{version}"


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a peft model (without importing peft when nothing imported it yet)."""
    if "peft" not in sys.modules:
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


def wrap(model: Any, settings: Any, *, gradient_checkpointing: bool = False) -> Any:
    """``model`` with LoRA adapters as ``settings`` (:class:`~.settings.LoRASettings`) says; base frozen.

    The model keeps its device, dtype and eval mode. With gradient checkpointing the embedding output is made
    to require grad, without which no gradient reaches the adapters through a checkpointed block.
    """
    from peft import LoraConfig, get_peft_model

    targets: Any = settings.target_modules
    if targets == ["all-linear"]:
        targets = "all-linear"
    # peft's "all-linear" wraps every nn.Linear, subclasses included; a subclass whose forward returns something
    # else than its output (Llama 4's expert router: a tuple) breaks under the adapter's. Those are left out.
    left_out = misfit_linear_layers(model) if targets == "all-linear" else []
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        exclude_modules=left_out or None,
        bias="none",
        task_type="CAUSAL_LM",
    )
    was_training = model.training
    unmatched = unmatched_targets(model, targets)
    try:
        peft_model = get_peft_model(model, config)
    except ValueError as exc:  # e.g. target modules not found in the model
        raise ValueError(f"settings.grpo.lora does not fit settings.policy.model: {exc}") from exc
    if gradient_checkpointing:
        peft_model.enable_input_require_grads()
    peft_model.train(was_training)
    if left_out:
        log.info(
            "settings.grpo.lora: no adapters on %d linear layer(s) whose forward is not a linear layer's (%s, e.g. %s)",
            len(left_out),
            sorted({type(model.get_submodule(n)).__name__ for n in left_out}),
            left_out[0],
        )
    if unmatched:  # e.g. the Llama names on Phi-3, whose q/k/v and gate/up projections are fused
        log.warning(
            "settings.grpo.lora.target_modules %s match no module of %s: adapters only on %s (['all-linear'] adapts "
            "every linear layer of any architecture)",
            unmatched,
            type(model).__name__,
            sorted(set(targets) - set(unmatched)),
        )
    return peft_model


def misfit_linear_layers(model: Any) -> list[str]:
    """The names of ``model``'s modules that subclass ``torch.nn.Linear`` with a ``forward`` that does not give
    a linear layer's output (Llama 4's expert router returns routing scores and logits): a LoRA layer around
    one would add its update to whatever that forward returns. Each subclass with a ``forward`` of its own is
    called once on a zero row to tell (Falcon's linear layers, say, give a plain output and keep adapters)."""
    import torch

    out = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or type(module).forward is torch.nn.Linear.forward:
            continue
        weight = module.weight
        if weight.is_meta:  # nothing to call: assume it behaves
            continue
        try:
            with torch.no_grad():
                result = module(torch.zeros(1, module.in_features, dtype=weight.dtype, device=weight.device))
            plain = isinstance(result, torch.Tensor) and tuple(result.shape) == (1, module.out_features)
        except Exception:
            plain = False
        if not plain:
            out.append(name)
    return out


def unmatched_targets(model: Any, targets: Any) -> list[str]:
    """The names in ``targets`` (a list of module-name suffixes, as peft matches them) that no module of
    ``model`` ends with; none for ``"all-linear"``."""
    if not isinstance(targets, list):
        return []
    names = [name for name, _ in model.named_modules()]
    return [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]


def base_model(model: Any) -> Any:
    """The transformers model under the adapters (the object itself when it is not a peft model)."""
    return model.get_base_model() if is_lora(model) else model


class AdaptersOff:
    """The base policy as a callable: ``model(**inputs)`` with the adapters disabled for the call.

    Used as the trainer's KL reference. It shares every tensor with the policy, so it is exactly the initial
    policy (the base weights never change) at no memory cost. Not thread-safe against concurrent use of the
    same model: the trainer calls it between generation phases.
    """

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**kwargs)

    def parameters(self):  # what the trainer reads a device / dtype from
        return self.model.parameters()


def trainable_parameters(model: Any) -> dict[str, Any]:
    """Name -> parameter of everything that trains (the adapters, for a LoRA policy)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def adapter_state_dict(model: Any) -> dict[str, Any]:
    """The adapters' tensors under peft's portable names (adapter name removed), detached and contiguous."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {name: t.detach().contiguous() for name, t in state.items()}


def save_adapter(model: Any, directory: Path) -> Path:
    """Write the adapters in peft's layout into ``directory`` (created); return it.

    Written by hand instead of ``save_pretrained`` because that may look the base model up on the Hub.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.cpu() for k, v in adapter_state_dict(model).items()}, str(directory / ADAPTER_WEIGHTS),
              metadata={"format": "pt"})
    config = model.peft_config[model.active_adapter]
    data = config.to_dict()
    data["base_model_name_or_path"] = str(getattr(base_model(model), "name_or_path", "") or "")
    for key, value in list(data.items()):
        if isinstance(value, set):
            data[key] = sorted(value)
    (directory / ADAPTER_CONFIG).write_text(json.dumps(data, indent=2, default=str))
    return directory


def load_adapter(model: Any, directory: Path) -> None:
    """Copy the adapters saved in ``directory`` into ``model``'s adapters, in place (optimizer references to
    the parameters stay valid). Raises ValueError when they do not fit."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = Path(directory) / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing: not a LoRA checkpoint")
    saved = load_file(str(weights), device=str(next(model.parameters()).device))
    current = adapter_state_dict(model)
    expected = set(current)
    if set(saved) != expected:
        missing, extra = sorted(expected - set(saved)), sorted(set(saved) - expected)
        raise ValueError(
            f"{weights} does not fit the policy's adapters (missing {missing[:3]}, unexpected {extra[:3]}): resume "
            "with the same settings.grpo.lora (rank, target_modules) and settings.policy.model as the run that wrote "
            "it."
        )
    for name, tensor in saved.items():
        if tuple(current[name].shape) != tuple(tensor.shape):
            raise ValueError(f"{weights}: {name} has shape {tuple(tensor.shape)}, the policy's adapter "
                             f"{tuple(current[name].shape)}: resume with the same settings.grpo.lora.rank.")
    set_peft_model_state_dict(model, saved)


def base_state_dict(model: Any) -> dict[str, Any]:
    """The base model's own state dict (checkpoint names, no adapter tensors), e.g. to save it for vLLM."""
    state = {}
    for name, tensor in base_model(model).state_dict().items():
        if "lora_" in name:
            continue
        state[name.replace(".base_layer.", ".")] = tensor
    return state


def base_identity(model: Any) -> dict[str, Any]:
    """What identifies the base model the adapters belong to: its directory, architecture, a digest of its
    config, and a fingerprint of its weights (shapes, dtypes and the first values of every tensor)."""
    base = base_model(model)
    config = base.config.to_dict()
    for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures"):
        config.pop(key, None)
    digest = hashlib.sha256()
    for name, tensor in sorted(base_state_dict(model).items()):
        flat = tensor.detach().reshape(-1)[:_FINGERPRINT_VALUES].float().cpu()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(flat.numpy().tobytes())
    return {
        "name_or_path": str(getattr(base, "name_or_path", "") or ""),
        "architectures": list(getattr(base.config, "architectures", None) or [type(base).__name__]),
        "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest(),
        "weights_fingerprint": digest.hexdigest(),
    }


def check_identity(saved: dict[str, Any], model: Any, where: Path) -> None:
    """Raise ValueError when ``model``'s base is not the one ``saved`` (from :func:`base_identity`) names."""
    live = base_identity(model)
    for key in ("config_sha256", "weights_fingerprint"):
        if saved.get(key) != live[key]:
            what = "config" if key == "config_sha256" else "weights"
            raise ValueError(
                f"{where}: these adapters were trained on another base model ({what} differ; it was "
                f"{saved.get('name_or_path') or 'a model without a directory'}, this run loads "
                f"{live['name_or_path'] or 'a model without a directory'}): set settings.policy.model to the base the "
                "run used."
            )


def merged_model(model: Any) -> Any:
    """The base model with the adapters folded into its weights (W + B A * alpha / r), as a plain
    transformers model. ``model`` is consumed (its modules are the merged model's)."""
    return model.merge_and_unload(safe_merge=True)


def merged_weights(model: Any) -> tuple[dict[str, Any], dict[str, str], set[str]]:
    """The base model's parameters under their checkpoint names with the active adapters folded in
    (W + B A * alpha / r, peft's ``get_delta_weight``), without touching ``model``: what an engine replica, a
    plain model of the base, receives. Returns (name -> tensor, tied names left out -> the name kept, the
    merged names): an unadapted parameter is the policy's own tensor (its change is tracked as any other's),
    a merged one a new tensor each call."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = base_model(model)
    adapter = model.active_adapter
    # LoraLayer's subclasses (Linear, Embedding, ...) each define get_delta_weight; the base class does not.
    adapted: dict[str, Any] = {f"{name}.base_layer.weight": module for name, module in base.named_modules()
                               if isinstance(module, LoraLayer) and adapter in module.lora_A}
    first: dict[int, str] = {}
    named: dict[str, Any] = {}
    ties: dict[str, str] = {}
    merged: set[str] = set()
    with torch.no_grad():
        for name, param in base.named_parameters(remove_duplicate=False):
            if "lora_" in name:
                continue
            plain = name.replace(".base_layer.", ".")
            kept = first.setdefault(id(param), plain)
            if kept != plain:
                ties[plain] = kept
                continue
            module = adapted.get(name)
            if module is None:
                named[plain] = param
            else:
                named[plain] = param.detach() + module.get_delta_weight(adapter).to(param.dtype)
                merged.add(plain)
    return named, ties, merged
