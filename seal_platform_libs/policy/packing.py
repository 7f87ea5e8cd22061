"""Packed micro-batches (``grpo.pack_sequences``): a micro-batch's sequences in one row, no padding.

Padded micro-batches run every sequence at the width of the longest one; on a batch of mixed lengths most of
the work is padding. Packed, the sequences are concatenated into one row of ``sum(len)`` tokens and the
attention is kept inside each sequence:

* the row is built by transformers' :class:`~transformers.DataCollatorWithFlattening` (position ids that
  restart at every sequence; with ``flash_attention_2`` also the ``cu_seq_lens`` / ``max_length`` boundary
  kwargs that flash-attn's varlen kernels take), as transformers' padding-free training does;
* on CUDA, :func:`prefer_flash_attention` switches the policy to ``flash_attention_2`` when flash-attn is
  importable;
* elsewhere (CPU, or CUDA without flash-attn) a policy running ``sdpa`` is switched to
  :data:`PACKED_SDPA`, registered with transformers' ``AttentionInterface``: :func:`packed_sdpa_attention`
  runs SDPA once per packed sequence (boundaries from the same ``cu_seq_lens``), causal, so the row's
  attention costs the sum of its sequences' squares, not the square of their sum, and SDPA's fused CPU/flash
  kernels apply; unpacked calls (generation, padded batches) go to transformers' own SDPA unchanged;
* with ``eager`` attention transformers builds the dense block-diagonal causal mask itself from the position
  ids when no attention mask and no cache are passed (``masking_utils.find_packed_sequence_indices``): exact,
  but (row tokens)^2 per head and layer, so only for small rows.

Prefix sharing (``grpo.shared_prefix``) composes with packing. Under :data:`PACKED_SDPA` each run of a group's
consecutive sequences in a micro-batch has the prompt they share once in the row, before what follows it in
each of them (:func:`prefixed_packed_row`); :func:`packed_sdpa_attention` lets each continuation attend to its
prompt and itself. No separate pass runs, so it works with gradient checkpointing and on the sharded path
too. Under ``eager`` the micro-batch's common prompt runs once into a KV cache, the suffixes are packed after
it, and the dense :func:`prefix_block_mask` lets each suffix token see the prefix and its own sequence only.
Under flash-attn's varlen kernels every sequence runs its own prompt. (An earlier form for SDPA, the prompt in a
KV cache and a mask per sequence, was slower than running the prompts again: 102 s against 79 s on CPU,
SmolLM2-135M, 4 sequences of 200-1,500 tokens sharing a 150-token prompt, one GRPO step, 2026-11-25, load 3.5.)

Micro-batches are token-budgeted: sequences are added while the packed row stays within
``grpo.max_tokens_per_micro_batch`` tokens (a hard cap: :func:`~.samples.build_samples` already cuts longer
episodes) and ``grpo.micro_batch_size`` sequences.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import torch

from .attention_limits import NO_LIMITS, LayerLimits, attention_patterns, causal_mask, layer_limits, model_config

FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3")
# The attention implementation of packed rows without flash-attn: SDPA per packed sequence (see the module doc).
PACKED_SDPA = "seal_packed_sdpa"
# The keyword argument (passed through the model's forward to its attention function) that says which pieces of
# a packed row are prompts that later pieces continue: per piece, the index of its prompt piece or -1.
PREFIX_KWARG = "seal_shared_prefix"
# The layer attention patterns (transformers' ``layer_types``) PACKED_SDPA runs (see :func:`layer_limits`).
PACKED_SDPA_PATTERNS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
# Those transformers' own masks get right in a packed row (from the position ids): its chunks count row indices.
ROW_MASK_PATTERNS = frozenset({"full_attention", "sliding_attention"})


def flash_attn_importable() -> bool:
    """Whether the flash-attn package can be imported (its varlen kernels serve ``flash_attention_2``)."""
    return importlib.util.find_spec("flash_attn") is not None


def attention_implementation(model: Any) -> str:
    """The attention backend ``model`` runs (a wrapper such as the LoRA adapters-off reference: its model's)."""
    return str(getattr(model_config(model), "_attn_implementation", None) or "sdpa")


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


def packed_sdpa_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The attention function of :data:`PACKED_SDPA` (transformers' ``AttentionInterface`` signature).

    A packed row (one row with ``cu_seq_lens_q`` among the kwargs, as :func:`packed_row` passes them) runs
    SDPA once per sequence, causal (SDPA's fused kernel, no mask), and ignores ``attention_mask``. With
    :data:`PREFIX_KWARG` (:func:`prefixed_packed_row`) some of the row's pieces are prompts that the pieces
    after them continue: see :func:`_prefixed_attention`. Any other call (generation, padded batches) is
    transformers' ``sdpa_attention_forward`` as is.

    The row is cut with ``split`` (whose backward is one concatenation; slicing would allocate a zero
    gradient of the whole row per sequence), in the (1, tokens, heads, dim) layout of the projections, and the
    outputs are joined in that layout (no transposing copy either way)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.pop("cu_seq_lens_q", None)
    prompt_of = kwargs.pop(PREFIX_KWARG, None)
    for name in ("cu_seq_lens_k", "max_length_q", "max_length_k"):
        kwargs.pop(name, None)
    if bounds is None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    limits = layer_limits(module, kwargs.pop("sliding_window", None))
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"{PACKED_SDPA}: a packed row of {query.shape[2]} queries got {key.shape[2]} keys; packed "
                         "rows run without a KV cache")
    cuts = [int(b) for b in bounds.tolist()]
    lengths = [b - a for a, b in zip(cuts, cuts[1:])]
    options: dict[str, Any] = {"dropout_p": float(kwargs.get("dropout", 0.0)), "scale": kwargs.get("scaling")}
    if getattr(module, "num_key_value_groups", 1) > 1:
        options["enable_gqa"] = True
    # The projections' outputs are laid out (1, tokens, heads, dim) and reach here transposed: cut along the
    # tokens in that layout, so each sequence is one contiguous block, the backward's joining of the pieces'
    # gradients (one concatenation: ``split``, unlike slicing, allocates no zero gradient of the whole row)
    # gives that layout again, and no copy is needed to feed the projections' backward. SDPA's CPU kernel
    # writes its output (1, tokens, heads, dim) too: joined in that layout it is the result, no transpose copy.
    queries, keys, values = (t.transpose(1, 2).split(lengths, 1) for t in (query, key, value))
    if prompt_of is not None:
        outputs = _prefixed_attention(queries, keys, values, _checked_prompts(prompt_of, lengths), options, limits)
    else:
        outputs = [_sdpa(q, k, v, options, limits) for n, q, k, v in zip(lengths, queries, keys, values) if n]
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
    return out.contiguous(), None


def _checked_prompts(prompt_of: Sequence[int], lengths: Sequence[int]) -> list[int]:
    """``prompt_of`` (:data:`PREFIX_KWARG`) as a list, after checking it describes the row's pieces: one entry
    per piece, each -1 or an earlier piece that is itself no continuation (ValueError otherwise)."""
    try:
        out = [int(i) for i in prompt_of]
    except (TypeError, ValueError):
        out = []
    bad = len(out) != len(lengths) or any(
        not (i == -1 or (0 <= i < j and out[i] == -1 and lengths[i] > 0)) for j, i in enumerate(out))
    if bad:
        raise ValueError(f"{PACKED_SDPA}: {PREFIX_KWARG}={out} does not describe a row of pieces of {list(lengths)} "
                         "tokens (one entry per piece: -1, or the earlier prompt piece it continues)")
    return out


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, options: dict[str, Any],
          limits: LayerLimits = NO_LIMITS) -> torch.Tensor:
    """Causal SDPA of one sequence in the (1, tokens, heads, dim) layout (in and out). The queries are the last
    ``q.shape[1]`` of the keys' positions (causal alignment to the bottom right), under the layer's ``limits``.
    With as many queries as keys and no limit narrower than the keys, SDPA's own causal flag (its fused
    kernels); otherwise an explicit mask (:func:`causal_mask`).

    With a mask the key/value heads are repeated to the query heads instead of passing ``enable_gqa``: CUDA's
    fused kernels take a mask or grouped heads, not both, and would fall back to the math kernel, which
    materializes every score (transformers' ``use_gqa_in_sdpa`` makes the same choice)."""
    n_queries, n_keys = q.shape[1], k.shape[1]
    if n_queries == n_keys and not limits.narrower_than(n_keys):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=n_queries > 1, **options)
    else:
        if options.get("enable_gqa"):
            groups = q.shape[2] // k.shape[2]
            k, v = k.repeat_interleave(groups, dim=2), v.repeat_interleave(groups, dim=2)
            options = {**options, "enable_gqa": False}
        mask = causal_mask(n_queries, n_keys, limits, q.device)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, **options)
    return out.transpose(1, 2)


def _prefixed_attention(queries: Sequence[torch.Tensor], keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
                        prompt_of: Sequence[int], options: dict[str, Any], limits: LayerLimits = NO_LIMITS
                        ) -> list[torch.Tensor]:
    """The attention outputs, in row order, of a row's pieces where piece ``j`` continues the prompt piece
    ``prompt_of[j]`` (-1: a sequence of its own, or a prompt).

    A continuation attends to ``[prompt; itself]``: each of its tokens sees the whole prompt and its own
    earlier tokens. The prompt's keys and values enter every continuation's call, so their gradients add up over
    all of them, as if each sequence had run its own copy of the prompt. The first continuation of a prompt runs
    causal SDPA over ``[prompt; continuation]``, which also gives the prompt's own outputs. Later ones take the
    cheaper of two exact forms: when the continuation is shorter than the prompt, only its queries, with the
    causal mask aligned to the bottom right (SDPA's masked kernel computes the whole rectangle of scores:
    ``n (P + n)``); otherwise causal SDPA over ``[prompt; continuation]`` again, the prompt's outputs dropped
    (``(P + n)^2 / 2`` scores on the fused causal kernel, which ran about as fast per score on this CPU).
    ``limits``: the layer's (see :func:`_sdpa`), in the sequence's own positions."""
    outputs: list[torch.Tensor] = []
    continued: set[int] = set()
    for j, (q, k, v) in enumerate(zip(queries, keys, values)):
        n, p = q.shape[1], prompt_of[j]
        if p < 0:
            if j not in prompt_of:  # a prompt's output comes with its first continuation's
                outputs.append(_sdpa(q, k, v, options, limits))
            continue
        prompt = queries[p].shape[1]
        k, v = torch.cat([keys[p], k], dim=1), torch.cat([values[p], v], dim=1)
        if p not in continued:
            continued.add(p)
            outputs.extend(_sdpa(torch.cat([queries[p], q], dim=1), k, v, options, limits).split([prompt, n], 1))
        elif n < prompt:  # its own queries only: the mask aligned to the bottom right
            outputs.append(_sdpa(q, k, v, options, limits))
        else:
            outputs.append(_sdpa(torch.cat([queries[p], q], dim=1), k, v, options, limits).split([prompt, n], 1)[1])
    return outputs


def use_packed_sdpa(model: Any) -> bool:
    """Switch a ``model`` running ``sdpa`` to :data:`PACKED_SDPA` (registered with transformers on first
    use; its masks are SDPA's); True when it runs :data:`PACKED_SDPA` afterwards. Other implementations
    (``eager``, flash) are left as they are, and so is a model with layers of a pattern outside
    :data:`PACKED_SDPA_PATTERNS`."""
    current = attention_implementation(model)
    if current == PACKED_SDPA:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    if attention_patterns(model) - PACKED_SDPA_PATTERNS:
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)
    model.set_attn_implementation(PACKED_SDPA)
    return attention_implementation(model) == PACKED_SDPA


def check_packable(model: Any) -> None:
    """ValueError when ``model`` has layers other than attention (linear attention, convolutions, state spaces:
    Qwen3.5, LFM2, Jamba), whose state packed rows would carry across sequences; when its packed rows would run
    under transformers' own masks (``eager``, or an ``sdpa`` model that could not switch to :data:`PACKED_SDPA`)
    and it has layers those masks get wrong in a packed row (Llama 4's chunks are counted over the row, not per
    sequence); or when its attention does not go through transformers' attention interface at all (Falcon,
    Bloom, MPT: their own masks would let a packed row's sequences attend to each other)."""
    recurrent = sorted(attention_patterns(model) - PACKED_SDPA_PATTERNS)
    if recurrent:
        raise ValueError(
            f"settings.grpo.pack_sequences: {type(model).__name__} has {recurrent} layers, whose state would run on "
            "from one sequence of a packed row into the next; set settings.grpo.pack_sequences: false"
        )
    legacy = sorted({type(m).__name__ for m in (model.modules() if hasattr(model, "modules") else ())
                     if getattr(type(m), "_supports_attention_backend", True) is False})
    if legacy:
        raise ValueError(
            f"settings.grpo.pack_sequences: {legacy[0]} computes its attention outside transformers' attention "
            "interface, so a packed row's sequences would attend to each other; set "
            "settings.grpo.pack_sequences: false"
        )
    implementation = attention_implementation(model)
    if implementation in FLASH_IMPLEMENTATIONS or implementation == PACKED_SDPA:
        return
    wrong = attention_patterns(model) - ROW_MASK_PATTERNS
    if wrong:
        raise ValueError(
            f"settings.grpo.pack_sequences: under {implementation} attention a packed row would get the "
            f"{sorted(wrong)} layers wrong (transformers' masks count them over the whole row); run the model with "
            f"sdpa attention (packed rows then run {PACKED_SDPA}) or set settings.grpo.pack_sequences: false"
        )


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


def prefixed_packed_row(runs: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> dict[str, Any]:
    """One packed row for :data:`PACKED_SDPA` of ``runs`` of sequences, each run ``(prompt, rests)``: sequences
    that all start with ``prompt`` (empty: none shared), given by what follows it. Each prompt appears once,
    before its run's rests; position ids count from 0 in a prompt and from ``len(prompt)`` in each rest.

    Returns ``input_ids`` and ``position_ids`` (1, tokens), the pieces' boundaries (``cu_seq_lens_q/k``,
    ``max_length_q/k``, as :func:`packed_row` gives them) and :data:`PREFIX_KWARG`: per piece, the index of
    the prompt piece it continues, or -1."""
    ids: list[int] = []
    positions: list[torch.Tensor] = []
    lengths: list[int] = []
    prompt_of: list[int] = []
    for prompt, rests in runs:
        shared = len(prompt)
        piece = -1
        if shared:
            piece = len(lengths)
            ids.extend(prompt)
            positions.append(torch.arange(shared))
            lengths.append(shared)
            prompt_of.append(-1)
        for rest in rests:
            ids.extend(rest)
            positions.append(torch.arange(shared, shared + len(rest)))
            lengths.append(len(rest))
            prompt_of.append(piece)
    bounds = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    longest = max(lengths, default=0)
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long), "position_ids": torch.cat(positions)[None],
        "cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": longest, "max_length_k": longest,
        PREFIX_KWARG: tuple(prompt_of),
    }


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
