"""No dropout in the policy: the log-probs of the update must be those the rollouts were sampled with.

transformers engages gradient checkpointing only in train mode, so the trainer runs the policy in train mode
when ``grpo.gradient_checkpointing`` is on, and an ``hf`` engine sharing the model may sample while it is. In
train mode every dropout of the architecture acts: GPT-2's and OPT's configs have 0.1 (log-probs moved by
0.1 nats against eval mode on tiny models), Llama's and Qwen's 0. RL recipes switch it off (TRL's
``disable_dropout``, verl's ``attention_dropout: 0``); :func:`disable_dropout` does it in place, for the
``nn.Dropout`` modules and for the rates that modules keep as numbers and pass to functional dropout or to the
attention function. LoRA's ``lora_dropout`` (``grpo.lora.dropout``) is the user's own setting and stays.

:func:`train_mode_is_eval_mode` checks the result on a short probe, so randomness of another kind (a router's
jitter noise, say) is refused at start rather than trained with.
"""

from __future__ import annotations

from typing import Any

import torch


def _is_rate(name: str, value: Any) -> bool:
    return isinstance(value, float) and ("dropout" in name or name.endswith("pdrop") or name == "layerdrop")


def disable_dropout(model: Any) -> int:
    """Set every dropout rate of ``model`` to 0 (``nn.Dropout`` modules and modules' float ``*dropout*`` /
    ``*pdrop`` attributes, and ``layerdrop``: OPT's chance of skipping a layer in train mode), except LoRA's
    adapter dropout; returns how many were above 0."""
    changed = 0
    if not hasattr(model, "named_modules"):  # a wrapper (the LoRA adapters-off reference): its model is the policy
        return 0
    for name, module in model.named_modules():
        if "lora_dropout" in name:
            continue
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
            continue
        for attr, value in list(vars(module).items()):
            if _is_rate(attr, value) and value > 0:
                setattr(module, attr, 0.0)
                changed += 1
    return changed


def train_mode_is_eval_mode(model: Any, device: Any, tokens: int = 8) -> bool:
    """Whether ``model`` gives the same logits in train mode as in eval mode on a probe of ``tokens`` tokens
    (no gradients; the model's mode is restored)."""
    ids = (torch.arange(tokens, device=device) % 7 + 1)[None]
    was_training = model.training
    try:
        with torch.no_grad():
            model.eval()
            want = model(input_ids=ids, use_cache=False).logits
            model.train()
            got = model(input_ids=ids, use_cache=False).logits
    finally:
        model.train(was_training)
    return bool(torch.equal(got, want))
