"""The trainer's forward passes: per-token log-probs (and entropies) of samples' loss tokens under a model.

:class:`LogprobPasses` is the part of :class:`~.trainer.GRPOTrainer` that runs the model: it pads a
micro-batch's sequences into one batch, keeps only the logits it needs, and has two exact speed-ups: the
prompt a micro-batch's sequences share (a group's system prompt and task) is run once and its KV cache
expanded to the rows (``grpo.shared_prefix``); log-probs come from the final hidden states through the output
layer in chunks that are recomputed in backward (``grpo.logits_chunk_tokens``), so no sequence's
full-vocabulary logits are kept.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Sequence

import torch

from .objective import chunked_logprobs, entropy_from_logits, token_logprobs
from .samples import Sample
from .settings import GRPOSettings


# A shared prefix shorter than this is not worth a separate forward pass.
_MIN_SHARED_PREFIX = 8


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows[1:]):
            return i
    return n


class LogprobPasses:
    """The forward passes of a trainer (a mixin of :class:`~.trainer.GRPOTrainer`): they read its
    ``settings``, ``model``, ``device``, ``pad_id`` and ``temperature``."""

    settings: GRPOSettings
    model: Any
    device: Any
    pad_id: int
    temperature: float

    def _autocast(self) -> contextlib.AbstractContextManager:
        mode = self.settings.autocast
        dtype = next(self.model.parameters()).dtype
        if mode == "off" or (mode == "auto" and (self.device.type != "cuda" or dtype != torch.float32)):
            return contextlib.nullcontext()
        target = torch.float16 if mode == "float16" else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=target)

    def _logits(self, model: Any, batch: Sequence[Sample], hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting every loss token of ``batch`` (rows in sample order) and those tokens; with
        ``hidden``, the final hidden states there instead (the output layer is then applied in chunks)."""
        rows = [s.input_ids for s in batch]
        n, width = len(rows), max(len(r) for r in rows)
        shared = 0
        if self.settings.shared_prefix and n > 1 and not self.settings.gradient_checkpointing:
            first_loss = min(s.positions[0] for s in batch)
            # Every logit we need is at position >= first_loss - 1, so all of them fall in the suffix.
            shared = min(_common_prefix(rows), first_loss - 1)
            if shared < _MIN_SHARED_PREFIX:
                shared = 0
        suffix_len = width - shared
        ids = torch.full((n, suffix_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r) - shared] = torch.tensor(r[shared:], dtype=torch.long)
            mask[i, : len(r)] = 1
        keep = sorted({p - 1 - shared for s in batch for p in s.positions})
        column = {p: j for j, p in enumerate(keep)}
        row_idx = torch.tensor([i for i, s in enumerate(batch) for _ in s.positions], dtype=torch.long)
        col_idx = torch.tensor([column[p - 1 - shared] for s in batch for p in s.positions], dtype=torch.long)
        targets = torch.tensor([s.input_ids[p] for s in batch for p in s.positions], dtype=torch.long)
        dev = self.device
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        kwargs: dict[str, Any] = {}
        if shared:
            prefix = torch.tensor([rows[0][:shared]], dtype=torch.long, device=dev)
            cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
            cache.batch_repeat_interleave(n)
            positions = torch.arange(shared, width, device=dev).unsqueeze(0).expand(n, -1)
            kwargs = {"past_key_values": cache, "position_ids": positions, "use_cache": True}
        else:
            kwargs = {"use_cache": False}
        if hidden:
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=1,
                        output_hidden_states=True, **kwargs)
            cols = keep_t[col_idx.to(dev)]
            return out.hidden_states[-1][row_idx.to(dev), cols], targets.to(dev)
        out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=keep_t, **kwargs)
        logits = out.logits[row_idx.to(dev), col_idx.to(dev)]
        return logits, targets.to(dev)

    def _forward(self, model: Any, batch: Sequence[Sample], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of ``batch``'s loss tokens, concatenated in sample order."""
        # A wrapper without its own output layer (the LoRA adapters-off reference) gets its logits whole.
        chunk = self.settings.logits_chunk_tokens if hasattr(model, "get_output_embeddings") else None
        if chunk:
            with self._autocast():
                states, targets = self._logits(model, batch, hidden=True)
                return chunked_logprobs(
                    states, model.get_output_embeddings(), targets, self.temperature, chunk=chunk,
                    entropy=entropy, entropy_grad=self.settings.entropy_coef > 0,
                )
        with self._autocast():
            logits, targets = self._logits(model, batch)
        logp = token_logprobs(logits, targets, self.temperature)
        ent = None
        if entropy:
            if self.settings.entropy_coef > 0:
                ent = entropy_from_logits(logits, self.temperature)
            else:
                with torch.no_grad():
                    ent = entropy_from_logits(logits.detach(), self.temperature)
        return logp, ent

    def _micro_batches(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        s = self.settings
        out: list[list[Sample]] = []
        current: list[Sample] = []
        width = 0
        for sample in samples:
            w = max(width, len(sample.input_ids))
            too_many = len(current) >= s.micro_batch_size
            too_long = s.max_tokens_per_micro_batch is not None and current and w * (len(current) + 1) > s.max_tokens_per_micro_batch
            if current and (too_many or too_long):
                out.append(current)
                current, w = [], len(sample.input_ids)
            current.append(sample)
            width = w
        if current:
            out.append(current)
        return out

    @torch.no_grad()
    def fill_logprobs(self, model: Any, samples: Iterable[Sample], attr: str) -> None:
        """Set ``sample.<attr>`` (``old_logp`` or ``ref_logp``) with a no-grad pass of ``model``."""
        todo = [s for s in samples if getattr(s, attr) is None and s.n_tokens]
        for micro in self._micro_batches(todo):
            logp, _ = self._forward(model, micro, entropy=False)
            for sample, part in zip(micro, torch.split(logp, [s.n_tokens for s in micro])):
                setattr(sample, attr, part.detach())
