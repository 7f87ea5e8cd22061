"""Packed micro-batches (grpo.pack_sequences): the same log-probs, loss and gradients as padded ones."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from seal_platform_libs.policy.packing import (  # noqa: E402
    PACKED_SDPA,
    PREFIX_KWARG,
    attention_implementation,
    packed_micro_batches,
    packed_sdpa_attention,
    prefix_block_mask,
)
from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402

# Mixed lengths: two groups, each sharing a prompt of its own, with rollouts from 14 to 300 tokens.
LENGTHS = {"g0": [300, 41, 160, 14], "g1": [95, 230, 27]}
PROMPT = 24


def mixed_samples(vocab: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for g, lengths in LENGTHS.items():
        prompt = [rng.randrange(3, vocab) for _ in range(PROMPT)]
        for j, n in enumerate(lengths):
            ids = prompt[: min(PROMPT, n - 4)] + [rng.randrange(3, vocab) for _ in range(n - min(PROMPT, n - 4))]
            first = min(PROMPT, n - 4)
            # Generated tokens: two spans (a tool result between them gets no loss).
            positions = [p for p in range(first, n) if not (first + 3 <= p < first + 6)]
            out.append(Sample(id=f"{g}-{j}", group=g, input_ids=ids, positions=positions,
                              advantage=rng.uniform(-1.5, 1.5)))
    return out


def groups(samples: list[Sample]) -> list[list[Sample]]:
    return [[x for x in samples if x.group == g] for g in LENGTHS]


def shared_prompt(group: list[Sample]) -> int:
    """The tokens a group's rows share that prefix sharing runs once: the common prefix, up to the token before
    the first loss token (every logit the loss needs lies after it)."""
    rows = [x.input_ids for x in group]
    common = next((i for i in range(min(map(len, rows))) if len({r[i] for r in rows}) > 1), min(map(len, rows)))
    return min(common, min(x.positions[0] for x in group) - 1)


def test_packed_micro_batches_respect_token_and_sequence_caps():
    samples = mixed_samples(1000)
    micros = packed_micro_batches(samples, max_sequences=3, max_tokens=400)
    assert [x for m in micros for x in m] == samples  # order kept, nothing lost
    for m in micros:
        assert len(m) <= 3 and sum(len(x.input_ids) for x in m) <= 400
    # Greedy: a micro-batch closes only when the next sample would break a cap.
    for m, nxt in zip(micros, micros[1:]):
        assert len(m) == 3 or sum(len(x.input_ids) for x in m) + len(nxt[0].input_ids) > 400


def test_prefix_block_mask_sees_prefix_and_own_sequence_only():
    mask = prefix_block_mask([2, 3], prefix=2, dtype=torch.float32, additive=False)[0, 0]
    want = torch.tensor([
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 1, 0],
        [1, 1, 0, 0, 1, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(mask, want)
    additive = prefix_block_mask([2, 3], prefix=2, dtype=torch.float32, additive=True)[0, 0]
    assert torch.equal(additive == 0, want)


@pytest.mark.parametrize("shared_prefix", [False, True])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_logprobs_equal_padded_per_sample(tokenizer, new_tiny_model, shared_prefix, attn):
    model = new_tiny_model()
    model.set_attn_implementation(attn)
    got, shapes = {}, {}
    for pack in (False, True):
        settings = GRPOSettings(kl_coef=0.0, micro_batch_size=4, pack_sequences=pack, shared_prefix=shared_prefix,
                                max_tokens_per_micro_batch=700)
        trainer = GRPOTrainer(model, settings, pad_id=tokenizer.pad_token_id)
        samples = mixed_samples(len(tokenizer))
        seen: list[tuple[int, int]] = []
        hook = model.register_forward_pre_hook(
            lambda mod, args, kwargs, seen=seen: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
        trainer.fill_logprobs(model, samples, "old_logp")
        hook.remove()
        got[pack], shapes[pack] = samples, seen
    total = sum(len(x.input_ids) for x in got[True])
    # Packed: one row per micro-batch, no padding. With shared_prefix each group's prompt runs once: under
    # eager in a 1-row pass into a KV cache, under per-sequence SDPA at the head of the group's row.
    assert all(rows == 1 for rows, _ in shapes[True])
    assert attention_implementation(model) == (PACKED_SDPA if attn == "sdpa" else attn)
    prefix_pass = shared_prefix and attn == "eager"
    # Both groups fit one micro-batch each (4 and 3 sequences, 515 and 352 tokens).
    assert len(shapes[True]) == len(LENGTHS) * (2 if prefix_pass else 1)
    run_tokens = sum(n for _, n in shapes[True])
    saved = sum((len(group) - 1) * shared_prompt(group) for group in groups(got[True]))
    assert saved > 0
    assert run_tokens == (total - saved if shared_prefix else total)
    assert run_tokens < sum(rows * n for rows, n in shapes[False])
    for padded, packed in zip(got[False], got[True]):
        assert padded.old_logp.shape == packed.old_logp.shape == (padded.n_tokens,)
        assert torch.allclose(padded.old_logp, packed.old_logp, atol=2e-5, rtol=1e-5), padded.id
    # Each sequence on its own (no padding, no packing) gives the same log-probs too.
    alone = mixed_samples(len(tokenizer))
    trainer = GRPOTrainer(model, GRPOSettings(kl_coef=0.0, micro_batch_size=1), pad_id=tokenizer.pad_token_id)
    trainer.fill_logprobs(model, alone, "old_logp")
    for one, packed in zip(alone, got[True]):
        assert torch.allclose(one.old_logp, packed.old_logp, atol=2e-5, rtol=1e-5), one.id


@pytest.mark.parametrize(
    "terms",
    [
        dict(kl_coef=0.0),
        dict(kl_coef=0.05, kl_estimator="k3"),
        dict(kl_coef=0.05, entropy_coef=0.01, logits_chunk_tokens=None),
        dict(kl_coef=0.0, entropy_coef=0.01, shared_prefix=False),
        dict(kl_coef=0.05, gradient_checkpointing=True),
    ],
)
def test_packed_update_equals_padded_update(tokenizer, new_tiny_model, terms):
    def run(pack: bool):
        model = new_tiny_model()
        settings = GRPOSettings(mini_batch_tasks=1, micro_batch_size=3, max_tokens_per_micro_batch=520,
                                pack_sequences=pack, zero_advantage="compute", **terms)
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
        grads = capture_grads(trainer)
        with torch.no_grad():  # move the policy off the reference so the KL term has a gradient
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        samples = mixed_samples(len(tokenizer))
        metrics = trainer.step(samples)
        return metrics, grads, samples

    padded_metrics, padded_grads, padded = run(False)
    packed_metrics, packed_grads, packed = run(True)
    assert len(padded_grads) == len(packed_grads) == 2  # one update per group
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm"):
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-4, abs=1e-7), key
    assert packed_metrics["trained_tokens"] == padded_metrics["trained_tokens"]
    for a_update, b_update in zip(padded_grads, packed_grads):
        assert any(a.abs().sum() > 0 for a in a_update)
        for a, b in zip(a_update, b_update):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)
    for a, b in zip(padded, packed):  # the old (and reference) log-probs each path used
        assert torch.allclose(a.old_logp, b.old_logp, atol=2e-5, rtol=1e-5)
        if terms["kl_coef"]:
            assert torch.allclose(a.ref_logp, b.ref_logp, atol=2e-5, rtol=1e-5)


class _SDPACalls(torch.overrides.TorchFunctionMode):
    """Records the query length of every scaled_dot_product_attention call made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.query_lengths: list[int] = []
        self.masked: list[bool] = []  # per call: whether it passed a mask
        self.masked_gqa = 0  # calls with a mask and grouped key/value heads (CUDA's math-kernel fallback)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.query_lengths.append(args[0].shape[-2])
            self.masked.append(kwargs.get("attn_mask") is not None)
            self.masked_gqa += self.masked[-1] and bool(kwargs.get("enable_gqa"))
        return func(*args, **kwargs)


def test_packed_sdpa_attention_equals_dense_block_mask():
    class GroupedQueryAttention(torch.nn.Module):  # what the function reads from a transformers attention layer
        num_key_value_groups = 3
        is_causal = True

    gen = torch.Generator().manual_seed(0)
    lengths = [7, 1, 12, 4]
    total = sum(lengths)
    q = torch.randn(1, 6, total, 8, generator=gen)
    k = torch.randn(1, 2, total, 8, generator=gen)
    v = torch.randn(1, 2, total, 8, generator=gen)
    cu = torch.tensor([0, 7, 8, 20, 24], dtype=torch.int32)
    module = GroupedQueryAttention()
    out, _ = packed_sdpa_attention(module, q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=12,
                                   max_length_k=12, scaling=0.3)
    assert out.shape == (1, total, 6, 8)
    mask = prefix_block_mask(lengths, 0, torch.float32, additive=False)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1), attn_mask=mask, scale=0.3)
    assert torch.allclose(out, want.transpose(1, 2), atol=1e-6)
    # Prompts that later pieces of the row continue: piece 0 (7 tokens) is continued by pieces 1-3, piece 4 is
    # a sequence of its own, piece 5 (3 tokens) is continued by pieces 6-8. The continuations after a prompt's
    # first one are shorter than the prompt (4, 2 tokens: the masked form) or not (12, 3 tokens).
    lengths = [7, 1, 12, 4, 5, 3, 6, 2, 3]
    prompt_of = (-1, 0, 0, 0, -1, -1, 5, 5, 5)
    total = sum(lengths)
    q, k, v = (torch.randn(1, heads, total, 8, generator=gen, requires_grad=True) for heads in (6, 2, 2))
    cu = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
    with _SDPACalls() as calls:
        out, _ = packed_sdpa_attention(module, q, k, v, None, cu_seq_lens_q=cu, scaling=0.3,
                                       **{PREFIX_KWARG: prompt_of})
    # One call per continuation or sequence of its own; the two continuations shorter than their prompt (after
    # its first) are masked, with the key/value heads repeated rather than grouped.
    assert calls.query_lengths == [7 + 1, 12 + 7, 4, 5, 3 + 6, 2, 3 + 3]
    assert calls.masked == [False, False, True, False, False, True, False] and calls.masked_gqa == 0
    weights = torch.randn(out.shape, generator=gen)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    piece = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    position = torch.arange(total)
    sees = (piece[:, None] == piece[None, :]) & (position[None, :] <= position[:, None])
    prompt = torch.tensor(prompt_of)[piece]
    sees |= (prompt[:, None] >= 0) & (piece[None, :] == prompt[:, None])  # a continuation sees its whole prompt
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1), attn_mask=sees[None, None], scale=0.3)
    assert torch.allclose(out, want.transpose(1, 2), atol=1e-6)
    # The prompts' keys and values get the gradients of all their continuations.
    for got, expected in zip(grads, torch.autograd.grad((want.transpose(1, 2) * weights).sum(), (q, k, v))):
        assert torch.allclose(got, expected, atol=1e-5)
    for bad in ((-1, 0, 1, -1, -1, -1, 5, 5, 5), (-1, 0), (-1, 4, 0, 0, -1, -1, 5, 5, 5), 7):
        with pytest.raises(ValueError, match="does not describe"):  # a continuation's continuation; wrong length
            packed_sdpa_attention(module, q, k, v, None, cu_seq_lens_q=cu, **{PREFIX_KWARG: bad})
    # Keys beyond the queries (a KV cache) are not a packed row's: refused, not attended to silently.
    longer = torch.randn(1, 2, total + 3, 8, generator=gen)
    with pytest.raises(ValueError, match="without a KV cache"):
        packed_sdpa_attention(module, q, longer, longer, None, cu_seq_lens_q=cu)


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_packed_rows_attend_per_sequence_under_sdpa(tokenizer, new_tiny_model, shared_prefix):
    """A policy on sdpa runs packed rows with one SDPA call per sequence: no attention over the whole row."""
    model = new_tiny_model()
    model.set_attn_implementation("sdpa")
    settings = GRPOSettings(kl_coef=0.0, micro_batch_size=4, pack_sequences=True, shared_prefix=shared_prefix,
                            max_tokens_per_micro_batch=700)
    trainer = GRPOTrainer(model, settings, pad_id=tokenizer.pad_token_id)
    assert attention_implementation(model) == PACKED_SDPA
    samples = mixed_samples(len(tokenizer))
    with _SDPACalls() as calls:
        trainer.fill_logprobs(model, samples, "old_logp")
    longest = max(len(x.input_ids) for x in samples)
    layers = model.config.num_hidden_layers
    # Every layer: one call per sequence, with or without shared_prefix (no separate prefix pass), none longer
    # than the longest sequence.
    assert len(calls.query_lengths) == layers * len(samples)
    assert max(calls.query_lengths) <= longest


def test_packed_lora_update_equals_padded(tokenizer, new_tiny_model):
    """LoRA (peft) policy and its adapters-off reference run the per-sequence attention too, same results."""
    from seal_platform_libs.policy import lora
    from seal_platform_plugins.grpo.settings import LoRASettings

    adapters = LoRASettings(rank=4, alpha=8)

    def run(pack: bool):
        model = lora.wrap(new_tiny_model(), adapters)
        settings = GRPOSettings(lr=1e-2, kl_coef=0.05, mini_batch_tasks=1, micro_batch_size=3,
                                max_tokens_per_micro_batch=520, pack_sequences=pack, zero_advantage="compute",
                                lora=adapters)
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
        if pack:
            assert attention_implementation(model) == attention_implementation(trainer.ref_model) == PACKED_SDPA
        samples = mixed_samples(len(tokenizer))
        trainer.step(samples)
        trainer.step(samples)  # the adapters have moved: policy and reference now differ
        return samples

    for a, b in zip(run(False), run(True)):
        assert torch.allclose(a.old_logp, b.old_logp, atol=2e-5, rtol=1e-5)
        assert torch.allclose(a.ref_logp, b.ref_logp, atol=2e-5, rtol=1e-5)
