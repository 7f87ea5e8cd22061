"""Packed micro-batches (``grpo.pack_sequences``): a micro-batch's sequences in one row, no padding.

Padded micro-batches run every sequence at the width of the longest one; on a batch of mixed lengths most of
the work is padding. Packed, the sequences are concatenated into one row of ``sum(len)`` tokens and the
attention is kept inside each sequence:

* the row is built by transformers' :class:`~transformers.DataCollatorWithFlattening` (position ids that
  restart at every sequence; with ``flash_attention_2`` also the ``cu_seq_lens`` / ``max_length`` boundary
  kwargs that flash-attn's varlen kernels take), as transformers' padding-free training does;
* with ``sdpa`` or ``eager`` attention (CPU, or CUDA without flash-attn) transformers builds the block-diagonal
  causal mask itself from those position ids when no attention mask and no cache are passed
  (``masking_utils.find_packed_sequence_indices``);
* on CUDA, :func:`prefer_flash_attention` switches the policy to ``flash_attention_2`` when flash-attn is
  importable (SDPA with the block mask is the fallback).

Prefix sharing (``grpo.shared_prefix``) composes with packing where the attention takes an explicit mask
(``sdpa``, ``eager``): the prompt shared by the micro-batch's sequences runs once, the suffixes are packed
after it, and :func:`prefix_block_mask` lets every suffix token see the prefix and its own sequence only.
flash-attn's varlen kernels take no such mask, so with ``flash_attention_2`` packing wins and each sequence
runs its prefix itself: packing removes the padding of every layer and every token, prefix sharing only the
prefix's repetition, and the flash kernels do not materialise the mask at all.

Micro-batches are token-budgeted: sequences are added while the packed row stays within
``grpo.max_tokens_per_micro_batch`` tokens (a hard cap: :func:`~.samples.build_samples` already cuts longer
episodes) and ``grpo.micro_batch_size`` sequences.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Sequence

import torch

FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3")


def flash_attn_importable() -> bool:
    """Whether the flash-attn package can be imported (its varlen kernels serve ``flash_attention_2``)."""
    return importlib.util.find_spec("flash_attn") is not None


def attention_implementation(model: Any) -> str:
    """The attention backend ``model`` runs (a wrapper such as the LoRA adapters-off reference: its model's)."""
    config = getattr(model, "config", None)
    if config is None and hasattr(model, "model"):
        config = getattr(model.model, "config", None)
    return str(getattr(config, "_attn_implementation", None) or "sdpa")


def prefer_flash_attention(model: Any) -> bool:
    """On CUDA with flash-attn importable, switch ``model`` to ``flash_attention_2`` (packed rows then run
    flash-attn's varlen kernels); True when it runs a flash implementation afterwards. Elsewhere nothing
    changes and packed rows run SDPA with a block-diagonal causal mask."""
    if attention_implementation(model) in FLASH_IMPLEMENTATIONS:
        return True
    device = next(model.parameters()).device
    if device.type != "cuda" or not flash_attn_importable() or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation("flash_attention_2")
    return True


def packed_micro_batches(samples: Sequence[Any], max_sequences: int, max_tokens: int | None) -> list[list[Any]]:
    """Consecutive micro-batches of at most ``max_sequences`` samples whose lengths add up to at most
    ``max_tokens`` (None: no token limit); a sample alone above the limit is a micro-batch of its own (none
    is, once :func:`~.samples.build_samples` has applied the same cap)."""
    out: list[list[Any]] = []
    current: list[Any] = []
    total = 0
    for sample in samples:
        n = len(sample.input_ids)
        full = len(current) >= max_sequences or (max_tokens is not None and total + n > max_tokens)
        if current and full:
            out.append(current)
            current, total = [], 0
        current.append(sample)
        total += n
    if current:
        out.append(current)
    return out


def packed_row(suffixes: Sequence[Sequence[int]], start: int, flash: bool) -> dict[str, Any]:
    """One packed row of ``suffixes`` (transformers' ``DataCollatorWithFlattening``): ``input_ids`` and
    ``position_ids`` (restarting at ``start`` in every sequence) of shape (1, total), and with ``flash`` the
    ``cu_seq_lens_q/k`` and ``max_length_q/k`` kwargs of flash-attn's varlen kernels."""
    from transformers import DataCollatorWithFlattening

    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=flash, position_ids_start=start)
    batch = collate([{"input_ids": list(s)} for s in suffixes], return_tensors="pt")
    batch.pop("labels", None)
    return dict(batch)


def prefix_block_mask(lengths: Sequence[int], prefix: int, dtype: torch.dtype, additive: bool) -> torch.Tensor:
    """The (1, 1, total, prefix + total) attention mask of sequences of ``lengths`` packed after a shared
    ``prefix`` held in the KV cache: each token sees the whole prefix and the earlier tokens of its own
    sequence. Boolean (True: attend) for SDPA; ``additive`` (0 / most negative ``dtype`` value) for eager."""
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(list(lengths)))
    total = int(seq.numel())
    same = seq[:, None] == seq[None, :]
    causal = torch.ones(total, total, dtype=torch.bool).tril()
    mask = torch.cat([torch.ones(total, prefix, dtype=torch.bool), same & causal], dim=1)[None, None]
    if not additive:
        return mask
    out = torch.zeros(mask.shape, dtype=dtype)
    return out.masked_fill(~mask, torch.finfo(dtype).min)
