"""The rollout-engine interface: the only way an environment reaches the policy.

Chat messages in; text, sampled token ids and log-probs out. Engines take a batch of conversations so fast
back ends (vLLM) can schedule them together and reuse shared prefixes. :class:`TrainableEngine`: what an
optimizer asks of an engine besides generation (new weights, sleep and wake).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .types import Generation, Message, SamplingParams


@runtime_checkable
class RolloutEngine(Protocol):
    name: str

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        """Continue each conversation with one assistant message.

        Earlier assistant messages that carry ``token_ids`` must be reproduced token for token in the prompt
        (not re-tokenised from their text), so that a multi-turn episode is one exact token sequence.
        Returns one :class:`Generation` per conversation, in order.
        """
        ...

    def count_tokens(self, conversation: list[Message]) -> int:
        """Prompt length of ``conversation`` in tokens, as ``generate`` would build it."""
        ...

    def close(self) -> None:
        """Release processes and memory."""
        ...


@runtime_checkable
class TrainableEngine(Protocol):
    """A rollout engine whose policy an optimizer trains: it takes the new weights after each update and gives
    its accelerator memory back while a colocated trainer updates.

    The engines of :mod:`seal_platform_libs.policy.engines` (``hf``, ``vllm`` and their replica clients)
    satisfy it; an optimizer tests ``isinstance(engine, TrainableEngine)`` (an engine that is not one, e.g. a
    scripted test engine or a remote API, samples from a policy nobody trains here). A class that subclasses
    it explicitly inherits the defaults below and defines ``update_weights``.
    """

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """Sample from ``model``'s weights from the next generation on; ``version``: the optimizer-update count
        they come from (stamped on later generations; None: one more than the last)."""
        ...

    def sleep(self) -> None:
        """Free the accelerator memory for the update (colocated placement); the next ``update_weights``
        wakes the engine. Default: nothing to free."""
        return None

    def wake_up(self) -> None:
        """Back from :meth:`sleep` with the weights it slept with. Default: nothing to do."""
        return None

    def wake_weights(self) -> None:
        """Before a push after a sleep: get the memory for the weights back (a hybrid engine's first wake
        step). Default: the push itself wakes the engine."""
        return None

    def wake_kv_cache(self) -> None:
        """After the push: get the KV cache back (the last wake step). Default: nothing to do."""
        return None

    def shares_model(self, model: Any) -> bool:
        """Whether the engine generates with ``model`` itself (not a copy): an update then changes what
        rollouts in flight sample from. Default: False."""
        return False
