"""The grpo plugin's part of a checkpoint: policy weights, optimizer, RNG states, A-Patch state.

Layout (inside the directory the core hands to ``save_checkpoint``; the core renames the whole directory
into place once every plugin has returned and the files are flushed, so a checkpoint is all or nothing)::

    grpo/model.safetensors   the policy's parameters (safetensors; tied weights stored once)
    grpo/config.json         the model's config (so the folder also names its architecture)
    grpo/trainer.pt          optimizer state and update counter (tensors only: loaded with weights_only)
    grpo/sharded/            instead of trainer.pt when grpo.train_workers > 1: policy and optimizer shards
                             (torch.distributed.checkpoint), loadable with any worker count
    grpo/rng.pt              torch CPU (and CUDA) generator states
    grpo/state.json          step, A-Patch label weights, python and numpy RNG states

With ``grpo.lora`` the weights are the adapters only, in peft's own layout, plus what identifies the base::

    grpo/adapter/adapter_config.json, grpo/adapter/adapter_model.safetensors
    grpo/base.json           the base model's directory, architecture, config digest, weights fingerprint

No pickle of arbitrary objects is written or read: ``torch.load`` runs with ``weights_only=True``.

Only runs that use grpo (it optimizes or reweights, or the rollout engine is ``hf`` or ``vllm``) get a
``grpo/`` folder: the plugin's checkpoint hooks write and read nothing in any other run (see ``plugin.py``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from seal_platform_libs.policy.lora import is_lora

SUBDIR = "grpo"
SHARDED = "sharded"  # grpo/sharded/: the DCP checkpoint of a sharded (grpo.train_workers > 1) trainer
FORMAT_VERSION = 1


def _rng_state() -> dict[str, Any]:
    import numpy as np

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }


def _set_rng_state(data: dict[str, Any]) -> None:
    import numpy as np

    version, internal, gauss = data["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = data["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def save(directory: Path, *, model: Any, trainer: Any, apatch: Any, step: int) -> dict[str, Any]:
    """Write the checkpoint files under ``directory/grpo``; return metadata for the run store.

    ``trainer`` (and ``model``) may be None when grpo only reweights (another plugin optimizes): then only
    the A-Patch and RNG states are written.
    """
    import torch
    from safetensors.torch import save_model

    out = Path(directory) / SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    lora = trainer is not None and is_lora(model)
    if lora:
        _save_lora(out, model)
        torch.save(trainer.state_dict(), out / "trainer.pt")
    elif trainer is not None:
        save_model(model, str(out / "model.safetensors"))
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_json_string"):
            (out / "config.json").write_text(config.to_json_string())
        if hasattr(trainer, "save_sharded"):  # grpo.train_workers > 1: policy and optimizer shards (DCP)
            trainer.save_sharded(out / SHARDED)
        else:
            torch.save(trainer.state_dict(), out / "trainer.pt")
    rng: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, out / "rng.pt")
    state = {
        "format": FORMAT_VERSION,
        "step": step,
        "updates": trainer.updates if trainer is not None else None,
        "apatch": apatch.state_dict() if apatch is not None else None,
        "rng": _rng_state(),
        "lora": lora,
    }
    (out / "state.json").write_text(json.dumps(state))
    # The folder within the checkpoint, not ``out``: the core renames the temporary directory into place
    # after this returns, so an absolute path here would name a folder that no longer exists.
    return {"plugin": "grpo", "step": step, "updates": state["updates"], "path": SUBDIR, "lora": lora}


def load(directory: Path, *, model: Any, trainer: Any, apatch: Any) -> dict[str, Any]:
    """Restore what :func:`save` wrote into the live objects (weights in place, so the optimizer's
    references to the parameters stay valid). Returns the saved ``state.json``."""
    import torch
    from safetensors.torch import load_model

    src = Path(directory) / SUBDIR
    state_file = src / "state.json"
    if not state_file.is_file():
        raise FileNotFoundError(
            f"{src} holds no grpo checkpoint (state.json missing): was it written by the grpo plugin?"
        )
    state = json.loads(state_file.read_text())
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"{state_file}: checkpoint format {state.get('format')!r}, this version reads {FORMAT_VERSION}"
        )
    if trainer is not None and (bool(state.get("lora")) != is_lora(model)):
        saved, live = ("LoRA adapters" if state.get("lora") else "full weights"), (
            "a LoRA policy" if is_lora(model) else "full fine-tuning")
        raise ValueError(
            f"{src} holds {saved} but this run uses {live}: set settings.grpo.lora as the run that wrote it did."
        )
    if trainer is not None and state.get("lora"):
        _load_lora(src, model)
        trainer.load_state_dict(torch.load(src / "trainer.pt", map_location=trainer.device, weights_only=True))
    elif trainer is not None:
        weights = src / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"{weights} is missing: the checkpoint was written without a trainer.")
        missing, unexpected = load_model(model, str(weights), strict=False, device=str(trainer.device))
        if missing or unexpected:
            raise ValueError(
                f"{weights} does not fit the policy (missing {sorted(missing)[:5]}, unexpected "
                f"{sorted(unexpected)[:5]}): resume with the same settings.policy.model as the run that wrote it."
            )
        if (src / SHARDED).is_dir():  # written by N workers; DCP reshards into this trainer's worker count
            from .sharded import load_sharded_into

            load_sharded_into(model, trainer, src / SHARDED)
        elif hasattr(trainer, "load_single_process"):  # written by 1 process, resumed by N workers
            trainer.load_single_process(src / "trainer.pt")
        else:
            trainer.load_state_dict(torch.load(src / "trainer.pt", map_location=trainer.device, weights_only=True))
    rng = torch.load(src / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    _set_rng_state(state["rng"])
    if apatch is not None and state.get("apatch"):
        apatch.load_state_dict(state["apatch"])
    return state


ADAPTER_DIR = "adapter"
BASE_FILE = "base.json"


def _save_lora(out: Path, model: Any) -> None:
    from seal_platform_libs.policy.lora import base_identity, save_adapter

    save_adapter(model, out / ADAPTER_DIR)
    (out / BASE_FILE).write_text(json.dumps(base_identity(model), indent=2))


def _load_lora(src: Path, model: Any) -> None:
    from seal_platform_libs.policy.lora import check_identity, load_adapter

    base_file = src / BASE_FILE
    if not base_file.is_file():
        raise FileNotFoundError(f"{base_file} is missing: the LoRA checkpoint does not say which base it belongs to.")
    check_identity(json.loads(base_file.read_text()), model, src)
    load_adapter(model, src / ADAPTER_DIR)
