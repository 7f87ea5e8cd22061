"""The rollout-engine interface: the only way an environment reaches the policy.

Chat messages in; text, sampled token ids and log-probs out. Engines take a batch of conversations so fast
back ends (vLLM) can schedule them together and reuse shared prefixes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
