"""The model's logits from its final hidden states, for the chunked log-probs (``grpo.logits_chunk_tokens``).

The chunked path applies the output layer itself, one chunk of loss tokens at a time, to the final hidden
states the model returns. Some architectures' forwards do more after the output layer: Gemma 2/3 soft-cap the
logits (``final_logit_softcapping``), Cohere multiplies them by ``logit_scale``, Granite divides them by
``logits_scaling``. The output layer alone would give other log-probs than the model's own forward (and the
rollout engine) gives. :func:`output_head` is the output layer followed by those steps, checked against the
model's own logits on a short probe; where it cannot reproduce them (an architecture with a step of its own),
it returns None and the trainer takes the logits from the model's forward instead: the same values, without
the memory the chunks save.
"""

from __future__ import annotations

from typing import Any

import torch

# The probe: this many tokens through the model, its own logits against the head's on its final hidden states.
PROBE_TOKENS = 8


class OutputHead(torch.nn.Module):
    """``layer`` (the output embeddings), then what the model's forward does to its logits, in transformers'
    order: multiplied by ``multiply`` (Cohere), divided by ``divide`` (Granite), soft-capped at ``softcap``
    (Gemma 2/3: ``tanh(logits / softcap) * softcap``)."""

    def __init__(self, layer: Any, multiply: float | None = None, divide: float | None = None,
                 softcap: float | None = None):
        super().__init__()
        self.layer = layer
        self.multiply, self.divide, self.softcap = multiply, divide, softcap

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.layer(hidden)
        if self.multiply is not None:
            logits = logits * self.multiply
        if self.divide is not None:
            logits = logits / self.divide
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def head_steps(config: Any) -> dict[str, float | None]:
    """The steps after the output layer that ``config``'s architecture declares (:class:`OutputHead`'s
    arguments), read from the attributes transformers' forwards use."""
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return {"multiply": getattr(config, "logit_scale", None), "divide": getattr(config, "logits_scaling", None),
            "softcap": getattr(config, "final_logit_softcapping", None)}


def output_head(model: Any, device: Any) -> OutputHead | None:
    """:class:`OutputHead` of ``model`` when it gives the model's own logits on a probe of
    :data:`PROBE_TOKENS` tokens (same dtype and autocast as the caller's), else None. The probe runs one
    short forward without gradients; every rank of a sharded model must call this at the same point."""
    layer = model.get_output_embeddings()
    config = getattr(model, "config", None)
    if layer is None or config is None:
        return None
    head = OutputHead(layer, **head_steps(config))
    vocab = int(getattr(layer, "out_features", 0) or getattr(config.get_text_config(), "vocab_size", 2))
    ids = (torch.arange(PROBE_TOKENS, device=device) % max(1, vocab - 1) + 1)[None]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
        got = head(out.hidden_states[-1])
    want = out.logits
    if got.shape != want.shape:
        return None
    # Both come from the same hidden states through the same matrix product: only a step of the model's own can
    # part them by more than rounding (a Gemma soft-cap of 30 moves logits of 0.5 by 5e-5, relatively 1e-4).
    scale = float(want.float().abs().max()) or 1.0
    close = torch.allclose(got.float(), want.float(), rtol=1e-5, atol=1e-6 * scale)
    return head if close else None
