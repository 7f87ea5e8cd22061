"""The update: REINFORCE with a running-mean baseline, on token sequences from the policy runtime.

For each trajectory ``i`` with reward ``R_i`` and A-Patch scale ``w_i`` (1 without a reweight stage), the loss is

    L = - sum_i w_i (R_i - b) sum_t log p(y_it | context) / N

over the tokens the model sampled (``N`` of them in the batch), then one AdamW step; the baseline ``b`` is a
running mean of the batch rewards. torch is imported inside the methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seal_platform.types import Trajectory
from seal_platform_libs.policy.tokens import encode_episode

from .settings import ReinforceSettings


class Reinforce:
    def __init__(self, model: Any, tokenizer: Any, settings: ReinforceSettings):
        import torch

        self.model, self.tokenizer, self.settings = model, tokenizer, settings
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=settings.lr, weight_decay=0.0)
        self.baseline = settings.baseline_init
        self.updates = 0  # the policy version the engine is told after each push

    def sequence_logprobs(self, trajectory: Trajectory) -> tuple[Any, int]:
        """The summed log-prob of the tokens the model sampled in ``trajectory`` (with grad) and their count."""
        import torch

        episode = encode_episode(self.tokenizer, trajectory.messages)
        device = next(self.model.parameters()).device
        ids = torch.tensor([episode.input_ids], device=device)
        mask = torch.tensor(episode.loss_mask[1:], device=device, dtype=torch.float32)
        logits = self.model(input_ids=ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
        return (logp * mask).sum(), int(mask.sum())

    def step(self, trajectories: Sequence[Trajectory], weights: dict[str, float]) -> dict[str, float]:
        """One update on ``trajectories``; metrics. Trajectories with nothing sampled are skipped."""
        import torch

        rewards = [t.reward for t in trajectories]
        baseline = self.baseline
        terms, tokens = [], 0
        self.model.eval()  # no dropout: the log-probs are the sampler's
        for trajectory in trajectories:
            advantage = weights.get(trajectory.id, 1.0) * (trajectory.reward - baseline)
            logp, n = self.sequence_logprobs(trajectory)
            if n and advantage != 0.0:
                terms.append(-advantage * logp)
            tokens += n
        metrics = {"reward_mean": sum(rewards) / max(1, len(rewards)), "baseline": baseline, "updates": 0.0,
                   "trained_tokens": float(tokens)}
        if terms and tokens:
            loss = torch.stack(terms).sum() / tokens
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.settings.grad_clip is not None:
                metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, self.settings.grad_clip))
            self.optimizer.step()
            self.updates += 1
            metrics.update(loss=float(loss.detach()), updates=1.0)
        if rewards:
            decay = self.settings.baseline_decay
            self.baseline = decay * baseline + (1.0 - decay) * metrics["reward_mean"]
        return metrics

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "baseline": self.baseline, "updates": self.updates}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline, self.updates = float(state["baseline"]), int(state["updates"])
