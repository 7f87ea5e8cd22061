"""The shape of a policy model as the memory plan (:mod:`.memory_plan`) needs it: sizes from its ``config.json``,
parameters counted on its architecture where transformers can build it, or a published checkpoint's shape by
name."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a model's ``config.json``."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int = 0
    # (parameters of one decoder block, of the rest) counted on the architecture itself (see counted_params);
    # None: the Llama/Qwen formulas below.
    counted: tuple[int, int] | None = None

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def block_params(self) -> int:
        """One decoder block: attention (q, k, v with biases as Qwen2 has them, o), SwiGLU MLP, two norms."""
        if self.counted is not None:
            return self.counted[0]
        q, kv = self.heads * self.hd, self.kv_heads * self.hd
        attention = self.hidden * q + q + 2 * (self.hidden * kv + kv) + q * self.hidden
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    def root_params(self) -> int:
        """Embeddings, the output layer (when not tied) and the final norm."""
        if self.counted is not None:
            return self.counted[1]
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def params(self) -> int:
        return self.layers * self.block_params() + self.root_params()

    def _projections(self) -> dict[str, tuple[int, int]]:
        q, kv = self.heads * self.hd, self.kv_heads * self.hd
        return {"q_proj": (self.hidden, q), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (q, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}

    def lora_params(self, rank: int, targets: list[str]) -> int:
        dims = self._projections()
        return self.layers * sum(rank * sum(dims[t]) for t in targets if t in dims)

    def projection_params(self, targets: list[str]) -> int:
        """Weights of the targeted projections over all layers (what merging LoRA adapters makes anew)."""
        dims = self._projections()
        return self.layers * sum(dims[t][0] * dims[t][1] for t in targets if t in dims)

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.hd * 2

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Shape:
        text = config.get("text_config", config)  # multimodal configs nest the language model's
        heads = int(text["num_attention_heads"])
        return cls(hidden=int(text["hidden_size"]), intermediate=int(text["intermediate_size"]),
                   layers=int(text["num_hidden_layers"]), heads=heads,
                   kv_heads=int(text.get("num_key_value_heads") or heads), vocab=int(text["vocab_size"]),
                   tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                   head_dim=int(text.get("head_dim") or 0), counted=counted_params(config))


def counted_params(config: dict[str, Any]) -> tuple[int, int] | None:
    """(parameters of one decoder block, of everything else) of the model a ``config.json`` describes, counted
    on an empty model that transformers builds on the meta device (no memory, no weights read): exact for any
    architecture it knows, mixtures of experts included, which the dense formulas undercount many times over
    (Qwen3-30B-A3B's config as dense: 3.3 B instead of 30.5 B). None when the config names no ``model_type``
    transformers can build."""
    if "model_type" not in config:
        return None
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        fields = {k: v for k, v in config.items() if k != "model_type"}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))
    except Exception:  # noqa: BLE001 - an architecture this transformers cannot build: the formulas stand
        return None
    text = config.get("text_config", config)
    layers = int(text["num_hidden_layers"])
    stacks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == layers]
    if not stacks:
        return None
    blocks = max(sum(p.numel() for p in stack.parameters()) for stack in stacks)
    total = sum(p.numel() for p in model.parameters())  # each shared (tied) parameter once
    return blocks // layers, total - blocks


# Shapes of published checkpoints (their config.json), for planning without the model on disk.
KNOWN: dict[str, Shape] = {
    "qwen2.5-0.5b": Shape(896, 4864, 24, 14, 2, 151_936, True),
    "qwen2.5-1.5b": Shape(1536, 8960, 28, 12, 2, 151_936, True),
    "qwen2.5-3b": Shape(2048, 11008, 36, 16, 2, 151_936, True),
    "qwen2.5-7b": Shape(3584, 18944, 28, 28, 4, 152_064, False),
    "qwen3-0.6b": Shape(1024, 3072, 28, 16, 8, 151_936, True, 128),
    "qwen3-1.7b": Shape(2048, 6144, 28, 16, 8, 151_936, True, 128),
    "qwen3-4b": Shape(2560, 9728, 36, 32, 8, 151_936, True, 128),
    "qwen3-8b": Shape(4096, 12288, 36, 32, 8, 151_936, False, 128),
    "smollm2-135m": Shape(576, 1536, 30, 9, 3, 49_152, True),
}


def shape_for(model: str) -> Shape:
    """The shape of ``policy.model``: its folder's ``config.json`` if there is one, else a known checkpoint
    whose name the string contains (``Qwen/Qwen2.5-7B-Instruct``, ``/models/qwen3-8b``...)."""
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return Shape.from_config(json.loads((path / "config.json").read_text()))
    key = model.lower().rsplit("/", 1)[-1]
    for name in sorted(KNOWN, key=len, reverse=True):
        if re.search(rf"(^|[^0-9.]){re.escape(name)}($|[^0-9.])", key):
            return KNOWN[name]
    known = ", ".join(KNOWN)
    raise ValueError(f"no config.json in {model!r} and no known shape in its name (known: {known}); "
                     "point settings.policy.model at a local model folder")
