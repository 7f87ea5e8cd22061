"""The trainer's forward passes: per-token log-probs (and entropies) of samples' loss tokens under a model.

:class:`LogprobPasses` is the part of :class:`~.trainer.GRPOTrainer` that runs the model: it pads a
micro-batch's sequences into one batch (or, with ``grpo.pack_sequences``, packs them into one row: see
:mod:`.packing`), keeps only the logits it needs, and has two exact speed-ups: the
prompt a micro-batch's sequences share (a group's system prompt and task) is run once (``grpo.shared_prefix``:
its KV cache expanded to the padded rows; in packed rows under per-sequence SDPA, once per run of a group's
sequences at the head of the run); log-probs come from the final hidden states through the output
layer in chunks that are recomputed in backward (``grpo.logits_chunk_tokens``), so no sequence's
full-vocabulary logits are kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from seal_platform_libs.policy.attention_limits import attention_patterns
from seal_platform_libs.policy.output_head import output_head
from seal_platform_libs.policy.packing import (
    FLASH_IMPLEMENTATIONS,
    PACKED_SDPA,
    attention_implementation,
    packed_micro_batches,
    packed_row,
    prefix_block_mask,
    prefixed_packed_row,
)

from .objective import chunked_logprobs, entropy_from_logits, token_logprobs
from .samples import Sample
from .settings import GRPOSettings

# A shared prefix shorter than this is not worth a separate forward pass.
_MIN_SHARED_PREFIX = 8

# The probe batch of LogprobPasses.probe_logprobs, (token ids, group, first loss position): a group of two rollouts
# sharing a 10-token prompt (their loss from position 10 on) and one of another group. Ids are taken modulo the
# model's vocabulary.
PROBE_ROWS: tuple[tuple[list[int], str, int], ...] = (
    ([5, 9, 14, 3, 27, 8, 11, 6, 13, 2, 7, 12, 4, 10, 19, 21], "a", 10),
    ([5, 9, 14, 3, 27, 8, 11, 6, 13, 2, 17, 23, 16, 18], "a", 10),
    ([29, 15, 26, 1, 22, 24, 28], "b", 3),
)


def _common_prefix(rows: Sequence[Sequence[int]]) -> int:
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows[1:]):
            return i
    return n


def _group_runs(batch: Sequence[Sample]) -> list[list[Sample]]:
    """``batch`` cut into runs of consecutive samples of one group (a group's rollouts share its prompt)."""
    runs: list[list[Sample]] = []
    for sample in batch:
        if runs and runs[-1][0].group == sample.group:
            runs[-1].append(sample)
        else:
            runs.append([sample])
    return runs


class LogprobPasses:
    """The forward passes of a trainer (a mixin of :class:`~.trainer.GRPOTrainer`): they read its
    ``settings``, ``model``, ``device``, ``pad_id`` and ``temperature``."""

    settings: GRPOSettings
    model: Any
    device: Any
    pad_id: int
    temperature: float
    _output_heads: dict[int, Any]  # id(model) -> its output head (None: logits from its own forward)
    _repeatable_caches: dict[int, bool]  # id(model) -> whether its cache repeats over rows (see _cache_repeats)

    def _autocast(self) -> contextlib.AbstractContextManager:
        mode = self.settings.autocast
        dtype = next(self.model.parameters()).dtype
        if mode == "off" or (mode == "auto" and (self.device.type != "cuda" or dtype != torch.float32)):
            return contextlib.nullcontext()
        target = torch.float16 if mode == "float16" else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=target)

    def _output_head(self, model: Any) -> Any:
        """``model``'s :func:`~.output_head.output_head`, probed once (the trainer probes its policy and reference
        when it is built, so that no step runs the probe's forward) and then kept in ``_output_heads``."""
        if id(model) not in self._output_heads:
            self._output_heads[id(model)] = output_head(model, self.device)
        return self._output_heads[id(model)]

    def _shared_prefix(self, batch: Sequence[Sample], in_row: bool = False) -> int:
        """Tokens at the start of every row of ``batch`` run once for all of them (0: none). ``in_row``: the
        prefix is a piece of a packed row before the rest of each sequence (:func:`~.packing.prefixed_packed_row`),
        not a separate pass into a KV cache, so gradient checkpointing does not rule it out."""
        rows = [s.input_ids for s in batch]
        if not self.settings.shared_prefix or len(rows) < 2 or (self.settings.gradient_checkpointing and not in_row):
            return 0
        first_loss = min(s.positions[0] for s in batch)
        # Every logit we need is at position >= first_loss - 1, so all of them fall in the suffix.
        shared = min(_common_prefix(rows), first_loss - 1)
        return shared if shared >= _MIN_SHARED_PREFIX else 0

    def _logits(self, model: Any, batch: Sequence[Sample], hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting every loss token of ``batch`` (in sample order) and those tokens; with ``hidden``,
        the final hidden states there instead (the output layer is then applied in chunks)."""
        if self.settings.pack_sequences:
            return self._packed_logits(model, batch, hidden)
        rows = [s.input_ids for s in batch]
        n, width = len(rows), max(len(r) for r in rows)
        shared = self._shared_prefix(batch)
        if shared and not self._cache_repeats(model):
            shared = 0
        suffix_len = width - shared
        ids = torch.full((n, suffix_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r) - shared] = torch.tensor(r[shared:], dtype=torch.long)
            mask[i, : len(r)] = 1
        row_idx = torch.tensor([i for i, s in enumerate(batch) for _ in s.positions], dtype=torch.long)
        cols = [p - 1 - shared for s in batch for p in s.positions]
        dev = self.device
        kwargs: dict[str, Any] = {"use_cache": False}
        if shared:
            cache = self._prefix_cache(model, rows[0][:shared])
            cache.batch_repeat_interleave(n)
            positions = torch.arange(shared, width, device=dev).unsqueeze(0).expand(n, -1)
            kwargs = {"past_key_values": cache, "position_ids": positions, "use_cache": True}
        kwargs.update(input_ids=ids.to(dev), attention_mask=mask.to(dev))
        return self._select(model, batch, kwargs, row_idx, cols, hidden)

    def _packed_logits(self, model: Any, batch: Sequence[Sample], hidden: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_logits` with the sequences packed into one row (see :mod:`.packing`)."""
        implementation = attention_implementation(model)
        if implementation == PACKED_SDPA:
            return self._prefixed_row_logits(model, batch, hidden)
        rows = [s.input_ids for s in batch]
        flash = implementation in FLASH_IMPLEMENTATIONS
        # Eager attention runs the shared prompt into a KV cache first; flash-attn's varlen kernels run every
        # sequence whole (see .packing), and so does a model with layers that do not see every earlier token
        # (a sliding window, chunks): the dense prefix mask below cannot express them, and a sliding layer's
        # KV cache keeps only its window.
        full = attention_patterns(model) == {"full_attention"}
        shared = self._shared_prefix(batch) if full and not flash else 0
        suffixes = [r[shared:] for r in rows]
        starts = [0]
        for r in suffixes[:-1]:
            starts.append(starts[-1] + len(r))
        cols = [start + p - 1 - shared for s, start in zip(batch, starts) for p in s.positions]
        dev = self.device
        # The sequence boundaries (cu_seq_lens) serve flash-attn's varlen kernels.
        packed = packed_row(suffixes, start=shared, flash=flash)
        kwargs: dict[str, Any] = {k: (v.to(dev) if torch.is_tensor(v) else v) for k, v in packed.items()}
        if shared:
            eager = implementation == "eager"
            dtype = next(model.parameters()).dtype
            mask = prefix_block_mask([len(r) for r in suffixes], shared, dtype, additive=eager)
            kwargs.update(past_key_values=self._prefix_cache(model, rows[0][:shared]), attention_mask=mask.to(dev),
                          use_cache=True)
        else:
            # No mask and no cache: transformers derives the block-diagonal causal mask from the position ids.
            kwargs.update(use_cache=False)
        return self._select(model, batch, kwargs, torch.zeros(len(cols), dtype=torch.long), cols, hidden)

    def _prefixed_row_logits(self, model: Any, batch: Sequence[Sample], hidden: bool
                             ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_packed_logits` under :data:`~.packing.PACKED_SDPA`: each run of consecutive samples of one
        group has the prompt its rows share once in the row, before what follows it in each row
        (:func:`~.packing.prefixed_packed_row`; no separate pass, so gradient checkpointing keeps it)."""
        runs: list[tuple[list[int], list[list[int]]]] = []
        cols: list[int] = []
        offset = 0
        for run in _group_runs(batch):
            shared = self._shared_prefix(run, in_row=True)
            prompt = list(run[0].input_ids[:shared])
            offset += shared
            rests = []
            for sample in run:
                rest = list(sample.input_ids[shared:])
                cols.extend(offset + p - 1 - shared for p in sample.positions)
                rests.append(rest)
                offset += len(rest)
            runs.append((prompt, rests))
        dev = self.device
        kwargs: dict[str, Any] = {k: (v.to(dev) if torch.is_tensor(v) else v)
                                  for k, v in prefixed_packed_row(runs).items()}
        kwargs.update(use_cache=False)
        return self._select(model, batch, kwargs, torch.zeros(len(cols), dtype=torch.long), cols, hidden)

    def _prefix_cache(self, model: Any, prefix: Sequence[int]) -> Any:
        """The KV cache of ``prefix`` (one row) under ``model``."""
        ids = torch.tensor([list(prefix)], dtype=torch.long, device=self.device)
        return model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values

    def _cache_repeats(self, model: Any) -> bool:
        """Whether ``model``'s cache can be repeated over a padded micro-batch's rows (``batch_repeat_interleave``
        on every layer), as the shared prompt of the padded path needs. The states of linear-attention,
        convolution and state-space layers (Qwen3.5, Qwen3-Next, LFM2, Jamba) cannot: their prompts run in
        every row. Asked once per model, on a two-token prefix; kept in ``_repeatable_caches``."""
        if id(model) not in self._repeatable_caches:
            with torch.no_grad(), self._autocast():
                layers = getattr(self._prefix_cache(model, [1, 2]), "layers", None)
            self._repeatable_caches[id(model)] = layers is not None and all(
                callable(getattr(layer, "batch_repeat_interleave", None)) for layer in layers)
        return self._repeatable_caches[id(model)]

    @torch.no_grad()
    def probe_logprobs(self, model: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probs of :data:`PROBE_ROWS`' loss tokens through this trainer's passes, as set (packed rows,
        shared prompts, chunked output layer, fused rotary), and through ``model``'s own forward on each sequence
        alone. The trainer compares them for each model when it is built: a model whose layers drop a packed
        row's boundaries (Nemotron's decoder layers do not pass them on) or whose masks ignore them (gpt-oss
        under eager) shows it here, before any step."""
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 32)
        batch = [Sample(id=f"probe{i}", group=group, input_ids=[t % vocab for t in row], advantage=0.0,
                        positions=list(range(first, len(row)))) for i, (row, group, first) in enumerate(PROBE_ROWS)]
        got, _ = self._forward(model, batch, entropy=False)
        want = []
        for sample in batch:
            ids = torch.tensor([sample.input_ids], dtype=torch.long, device=self.device)
            with self._autocast():
                logits = model(input_ids=ids, use_cache=False).logits[0, [p - 1 for p in sample.positions]]
            targets = torch.tensor([sample.input_ids[p] for p in sample.positions], device=self.device)
            want.append(token_logprobs(logits.float(), targets, self.temperature))
        return got.float(), torch.cat(want)

    def passes_gap(self, model: Any) -> float:
        """The largest difference (nats) between the two sides of :meth:`probe_logprobs`."""
        got, want = self.probe_logprobs(model)
        return float((got - want).abs().max())

    def check_passes(self, model: Any) -> None:
        """ValueError when ``model``'s log-probs through this trainer's packed rows or shared prompts are not its
        own (:meth:`probe_logprobs`; the trainer asks it of each model when it is built). The probe runs without
        autocast (except under flash-attn, which takes 16-bit inputs only), so float32 weights must agree to 1e-3
        nats; lower precision (bfloat16 weights or autocast, FSDP's mixed precision, TF32) to 0.05 nats plus 2% of
        the log-prob."""
        parameter = next(model.parameters())
        settings = self.settings
        try:
            if attention_implementation(model) not in FLASH_IMPLEMENTATIONS:  # flash-attn: 16-bit inputs only
                self.settings = settings.model_copy(update={"autocast": "off"})  # the probe only: float32 if it can
            exact = (parameter.dtype == torch.float32 and not hasattr(parameter, "placements")
                     and not (parameter.is_cuda and torch.backends.cuda.matmul.allow_tf32)
                     and isinstance(self._autocast(), contextlib.nullcontext))
            got, want = self.probe_logprobs(model)
        except Exception as exc:  # e.g. a cache these passes cannot use
            failure = f"failed ({type(exc).__name__}: {exc})"
        else:
            gap = (got - want).abs()
            if bool((gap <= (1e-3 if exact else 0.05 + 0.02 * want.abs())).all()):
                return
            failure = f"differ from its own forward's by up to {float(gap.max()):.3g} nats"
        finally:
            self.settings = settings
        on = [name for name in ("pack_sequences", "shared_prefix") if getattr(self.settings, name)]
        raise ValueError(
            f"settings.grpo.{' and settings.grpo.'.join(on)}: {type(model).__name__}'s log-probs through these passes "
            f"{failure} on a probe batch (e.g. its layers do not pass a packed row's boundaries on, or its masks "
            f"ignore them); set settings.grpo.{on[0]}: false"
        )

    def _select(
        self, model: Any, batch: Sequence[Sample], kwargs: dict[str, Any], row_idx: torch.Tensor, cols: list[int],
        hidden: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``model(**kwargs)`` keeping only the logits (or final hidden states) at (``row_idx``, ``cols``):
        those predicting ``batch``'s loss tokens, in sample order; and those tokens."""
        dev = self.device
        keep = sorted(set(cols))
        column = {p: j for j, p in enumerate(keep)}
        col_idx = torch.tensor([column[c] for c in cols], dtype=torch.long, device=dev)
        targets = torch.tensor([s.input_ids[p] for s in batch for p in s.positions], dtype=torch.long, device=dev)
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        row_idx = row_idx.to(dev)
        if hidden:
            out = model(logits_to_keep=1, output_hidden_states=True, **kwargs)
            return out.hidden_states[-1][row_idx, keep_t[col_idx]], targets
        out = model(logits_to_keep=keep_t, **kwargs)
        return out.logits[row_idx, col_idx], targets

    def _forward(self, model: Any, batch: Sequence[Sample], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs (and entropies) of ``batch``'s loss tokens, concatenated in sample order."""
        # A wrapper without its own output layer (the LoRA adapters-off reference), or a model whose logits the
        # output layer does not reproduce (see .output_head), gets its logits whole from its own forward.
        chunk = self.settings.logits_chunk_tokens if hasattr(model, "get_output_embeddings") else None
        if chunk:
            with self._autocast():
                head = self._output_head(model)
                if head is not None:
                    states, targets = self._logits(model, batch, hidden=True)
                    return chunked_logprobs(states, head, targets, self.temperature, chunk=chunk, entropy=entropy,
                                            entropy_grad=self.settings.entropy_coef > 0)
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
        if s.pack_sequences:
            return packed_micro_batches(samples, s.micro_batch_size, s.max_tokens_per_micro_batch)
        out: list[list[Sample]] = []
        current: list[Sample] = []
        width = 0
        for sample in samples:
            w = max(width, len(sample.input_ids))
            too_many = len(current) >= s.micro_batch_size
            too_long = (
                s.max_tokens_per_micro_batch is not None
                and current
                and w * (len(current) + 1) > s.max_tokens_per_micro_batch
            )
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
