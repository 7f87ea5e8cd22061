"""What several grpo tests compare with (not a test module): a trainer's log-probs of generated tokens, a
dialogue whose routing key stops before its first sampled reply, the gradients a trainer's update would
apply, a plain language-model update that changes a policy before a weight push, the check that every live
engine replica scores like the trainer, and a call bounded in time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from seal_platform.types import Message
from seal_platform_libs.policy.testing import sequence_logprobs
from seal_platform_plugins.grpo.objective import token_logprobs
from seal_platform_plugins.grpo.trainer import GRPOTrainer

# a fixed sequence whose log-probs every replica must give exactly as the trainer does
SEQUENCES = [[1, 17, 230, 5, 99, 42, 7, 7, 311, 2], [3, 1000, 4, 4, 4]]


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


def capture_grads(trainer: GRPOTrainer) -> list[list[torch.Tensor]]:
    """Replace the optimizer step with a recorder of the (clipped) gradients it would apply."""
    seen: list[list[torch.Tensor]] = []
    params = [p for g in trainer.optimizer.param_groups for p in g["params"]]

    def step(*args, **kwargs):
        seen.append([p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params])

    trainer.optimizer.step = step
    return seen


def language_model_step(model, ids: torch.Tensor, optimizer) -> None:
    """One real update of ``model``: next-token loss on ``ids``, its gradients, an optimizer step (eval mode
    after, as a policy between updates)."""
    model.train()
    loss = -torch.log_softmax(model(input_ids=ids).logits, -1)[:, :-1].gather(-1, ids[:, 1:, None]).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    model.eval()


def scores_equal_the_trainers(client: Any, model: Any) -> None:
    """Every live replica of ``client`` gives the log-probs of :data:`SEQUENCES` that ``model`` (the trainer's)
    gives, bit for bit."""
    ours = sequence_logprobs(model, SEQUENCES)
    for index in client.live():
        theirs = client._result(client._submit(index, "score", SEQUENCES), timeout=60)
        assert theirs == ours, (index, theirs, ours)


def after_senders_broadcast(monkeypatch: Any, count: int, action: Callable[[], None]) -> list[int]:
    """Patch ``SyncGroup.broadcast`` so that ``action()`` runs on the sender (rank 0) right after its
    ``count``-th broadcast from now on (a push's header takes two, then one per bucket): a replica killed or
    stopped at a chosen point of a push. Returns the sizes (numel) of the sender's broadcasts, as they go."""
    from seal_platform_libs.policy.weight_sync import SyncGroup

    broadcast = SyncGroup.broadcast
    sent: list[int] = []

    def patched(self: Any, tensor: Any) -> None:
        broadcast(self, tensor)
        if self.rank == 0:
            sent.append(tensor.numel())
            if len(sent) == count:
                action()

    monkeypatch.setattr(SyncGroup, "broadcast", patched)
    return sent


def bounded(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()`` in a thread; fails the test (instead of hanging it) when it takes longer than ``seconds``."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")
