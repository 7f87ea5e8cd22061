"""A rollout engine for short training runs against real MCP servers: it writes a scripted reply (``_text``, a
subclass's) as tokens of the policy's tokenizer and scores them with the policy's own log-probs, so that GRPO
trains on replies the tiny random policy would never write. Subclasses choose the replies."""

from __future__ import annotations

import random
from pathlib import Path

from seal_platform.types import Generation, Message, SamplingParams


class ScriptedWithPolicyLogprobs:
    name = "scripted"

    def __init__(self, model, tokenizer, seed: int, tasks: Path):
        """``tasks``: the environment's task file; ``self.truth`` maps each user turn to its first
        ground-truth call."""
        from seal_platform_plugins.mcp.tasks import load_tasks

        self.model, self.tokenizer, self.rng = model, tokenizer, random.Random(seed)
        self.truth = {turn["user"]: turn["calls"][0] for t in load_tasks(tasks) for turn in t.payload["turns"]
                      if turn["calls"]}

    def _text(self, conv: list[Message]) -> str:
        raise NotImplementedError

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        import torch

        from seal_platform_libs.policy.tokens import prompt_ids

        out = []
        for conv in conversations:
            text = self._text(conv)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            prompt = prompt_ids(self.tokenizer, conv)
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
            logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()
            out.append(Generation(text=text, token_ids=ids, logprobs=logprobs, prompt_tokens=len(prompt)))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        from seal_platform_libs.policy.tokens import prompt_ids

        return len(prompt_ids(self.tokenizer, conversation))

    def close(self) -> None:
        pass
