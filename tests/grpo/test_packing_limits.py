"""Packed rows on models whose attention layers do not see every earlier token: sliding windows (Mistral, which
passes its window to the attention function; Qwen2-MoE, whose windows live only in its config and masks) and
Llama 4's chunks. Their log-probs must equal each sequence's own, as for full attention (test_packing.py)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from seal_platform_libs.policy.attention_limits import LayerLimits, attention_patterns, causal_mask  # noqa: E402
from seal_platform_libs.policy.packing import (  # noqa: E402
    PACKED_SDPA,
    PREFIX_KWARG,
    attention_implementation,
    packed_sdpa_attention,
)
from seal_platform_libs.policy.testing import ARCHITECTURE_SHAPE, tiny_causal_lm  # noqa: E402
from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

VOCAB = ARCHITECTURE_SHAPE["vocab_size"]


def samples() -> list[Sample]:
    """One group of three rollouts (60-120 tokens) sharing a 24-token prompt, longer than the windows and chunks."""
    rng = random.Random(0)
    prompt = [rng.randrange(3, VOCAB) for _ in range(24)]
    out = []
    for j, n in enumerate([120, 60, 90]):
        ids = prompt + [rng.randrange(3, VOCAB) for _ in range(n - len(prompt))]
        out.append(Sample(id=str(j), group="g", input_ids=ids, positions=list(range(len(prompt), n)),
                          advantage=1.0))
    return out


def test_attention_patterns_read_from_the_config():
    assert attention_patterns(tiny_causal_lm("mistral")) == {"sliding_attention"}
    assert attention_patterns(tiny_causal_lm("qwen2_moe_window")) == {"full_attention", "sliding_attention"}
    assert attention_patterns(tiny_causal_lm("llama4")) == {"full_attention", "chunked_attention"}
    no_window = tiny_causal_lm("mistral", sliding_window=None)
    assert attention_patterns(no_window) == {"full_attention"}


@pytest.mark.parametrize("n_queries,n_keys", [(9, 9), (4, 30), (30, 30)])
@pytest.mark.parametrize("limits", [LayerLimits(), LayerLimits(window=5), LayerLimits(chunk=8)])
def test_causal_mask_is_transformers_mask(n_queries, n_keys, limits):
    """The mask equals transformers' own mask functions at the queries' positions (the last ``n_queries``)."""
    from transformers.masking_utils import (
        causal_mask_function,
        chunked_causal_mask_function,
        sliding_window_causal_mask_function,
    )

    if limits.window is not None:
        function = sliding_window_causal_mask_function(limits.window)
    elif limits.chunk is not None:
        function = chunked_causal_mask_function(limits.chunk, torch.zeros(1, dtype=torch.long))
    else:
        function = causal_mask_function
    index = torch.tensor  # transformers' mask functions take index tensors
    want = torch.tensor([[bool(function(index(0), index(0), index(n_keys - n_queries + i), index(j)))
                          for j in range(n_keys)] for i in range(n_queries)])
    assert torch.equal(causal_mask(n_queries, n_keys, limits), want)


def test_packed_sdpa_attention_keeps_the_window_with_shared_prompts():
    """The attention function on a row with a prompt continued by three pieces and a window passed by the layer
    equals SDPA with the dense mask of each sequence's window, in output and gradients."""
    class Layer(torch.nn.Module):
        num_key_value_groups = 1

    gen = torch.Generator().manual_seed(0)
    lengths, prompt_of, window = [10, 3, 14, 20, 9], (-1, 0, 0, 0, -1), 6
    total = sum(lengths)
    q, k, v = (torch.randn(1, 2, total, 8, generator=gen, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
    out, _ = packed_sdpa_attention(Layer(), q, k, v, None, cu_seq_lens_q=cu, sliding_window=window,
                                   **{PREFIX_KWARG: prompt_of})
    piece = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    starts = torch.tensor([0, *lengths]).cumsum(0)[:-1]
    prompt = torch.tensor(prompt_of)[piece]
    # Each token's position in its own sequence: a continuation's count on from its prompt's length.
    own = torch.arange(total) - starts[piece] + torch.where(prompt >= 0, torch.tensor(lengths)[prompt.clamp(min=0)], 0)
    same = (piece[:, None] == piece[None, :]) | ((prompt[:, None] >= 0) & (piece[None, :] == prompt[:, None]))
    sees = same & (own[None, :] <= own[:, None]) & (own[None, :] > own[:, None] - window)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=sees[None, None]).transpose(1, 2)
    assert torch.allclose(out, want, atol=1e-6)
    weights = torch.randn(out.shape, generator=gen)
    for got, expected in zip(torch.autograd.grad((out * weights).sum(), (q, k, v)),
                             torch.autograd.grad((want * weights).sum(), (q, k, v))):
        assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("shared_prefix", [False, True])
@pytest.mark.parametrize("kind,attn", [("mistral", "sdpa"), ("mistral", "eager"), ("qwen2_moe_window", "sdpa"),
                                       ("llama4", "sdpa")])
def test_packed_logprobs_keep_windows_and_chunks(kind, attn, shared_prefix):
    model = tiny_causal_lm(kind)
    model.set_attn_implementation(attn)
    alone = samples()
    GRPOTrainer(model, GRPOSettings(kl_coef=0.0, micro_batch_size=1), pad_id=0).fill_logprobs(model, alone, "old_logp")
    packed = samples()
    settings = GRPOSettings(kl_coef=0.0, micro_batch_size=4, pack_sequences=True, shared_prefix=shared_prefix,
                            max_tokens_per_micro_batch=700)
    GRPOTrainer(model, settings, pad_id=0).fill_logprobs(model, packed, "old_logp")
    assert attention_implementation(model) == (PACKED_SDPA if attn == "sdpa" else attn)
    for one, row in zip(alone, packed):
        assert torch.allclose(one.old_logp, row.old_logp, atol=2e-5, rtol=1e-5), one.id


def test_packing_refuses_chunks_under_eager():
    """transformers' own masks count Llama 4's chunks over the whole packed row: refused, not trained on."""
    model = tiny_causal_lm("llama4")
    model.set_attn_implementation("eager")
    with pytest.raises(ValueError, match="chunked_attention"):
        GRPOTrainer(model, GRPOSettings(kl_coef=0.0, pack_sequences=True), pad_id=0)
