"""What the engine tests compare with (not a test module): a trainer's log-probs of generated tokens, and a
dialogue whose routing key stops before its first sampled reply."""

from __future__ import annotations

import torch

from seal_platform.types import Message
from seal_platform_plugins.grpo.objective import token_logprobs


def trainer_logprobs(model, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """log p of each ``generated`` token after ``prompt``, by one forward pass (what a trainer computes)."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return token_logprobs(logits, torch.tensor(generated))


def conversation(task: int, turn: str = "") -> list[Message]:
    """Task ``task``'s opening; with ``turn``, a sampled reply and that next user turn after it."""
    msgs = [Message(role="system", content="You are a helpful assistant."),
            Message(role="user", content=f"Task {task}: name three colours.")]
    if turn:
        # A sampled reply (as Message.from_generation builds it): the dialogue's key stops before it.
        msgs += [Message(role="assistant", content="Red.", token_ids=[1], trainable=True),
                 Message(role="user", content=turn)]
    return msgs
