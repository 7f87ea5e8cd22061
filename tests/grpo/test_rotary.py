"""grpo.fused_rotary: the fused rotary embedding equals transformers' (forward bit for bit, gradients)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from seal_platform_libs.policy import rotary  # noqa: E402


def reference_inputs(dtype=torch.float32):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=96, num_attention_heads=3, num_key_value_heads=1)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 37, 3, 32, generator=gen, dtype=dtype).transpose(1, 2)  # the projections' layout
    k = torch.randn(1, 37, 1, 32, generator=gen, dtype=dtype).transpose(1, 2)
    positions = torch.cat([torch.arange(20), torch.arange(17)])[None]  # a packed row: positions restart
    cos, sin = LlamaRotaryEmbedding(config)(q, positions)
    return q, k, cos, sin


def original():
    from transformers.models.llama import modeling_llama

    # The function as transformers defines it, whatever a trainer installed in the module since.
    return rotary.REPLACED.get(modeling_llama.__name__, modeling_llama.apply_rotary_pos_emb)


def test_forward_equals_transformers_bit_for_bit_and_gradients_match():
    from transformers.models.llama.modeling_llama import rotate_half

    def hf(q, k, cos, sin):  # transformers' apply_rotary_pos_emb, written out
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    q, k, cos, sin = reference_inputs()
    want = hf(q, k, cos, sin)
    got = rotary.apply_rotary_pos_emb(q, k, cos, sin)
    for w, g in zip(want, got):
        assert torch.equal(w, g)
    q.requires_grad_(True)
    k.requires_grad_(True)
    grads = []
    for f in (hf, rotary.apply_rotary_pos_emb):
        out_q, out_k = f(q, k, cos, sin)
        assert out_q.requires_grad
        weights = torch.linspace(-1, 2, out_q.numel()).reshape(out_q.shape)
        grads.append(torch.autograd.grad((out_q * weights).sum() + (out_k ** 2).sum(), (q, k)))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    # float64 gradcheck of the custom backward against finite differences
    q64, _, cos64, sin64 = reference_inputs(torch.float64)
    q64 = q64[:, :, :6].detach().requires_grad_(True)
    assert torch.autograd.gradcheck(rotary.RotaryFunction.apply, (q64, cos64[:, None, :6], sin64[:, None, :6]))


def test_only_the_standard_rotation_is_replaced():
    def interleaved(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):  # pairs (0,1), (2,3), ...: another rotation
        def rot(x):
            return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin

    assert not rotary._standard_rotary(interleaved)
    assert rotary._standard_rotary(original())


def test_fused_rotary_model_gives_the_same_logits(new_tiny_model):
    from transformers.models.llama import modeling_llama

    model = new_tiny_model()
    ids = torch.randint(3, 1000, (2, 50), generator=torch.Generator().manual_seed(1))
    saved = modeling_llama.apply_rotary_pos_emb
    try:
        modeling_llama.apply_rotary_pos_emb = original()
        with torch.no_grad():
            want = model(input_ids=ids).logits
        assert rotary.use_fused_rotary(model)
        assert modeling_llama.apply_rotary_pos_emb is rotary.apply_rotary_pos_emb
        with torch.no_grad():
            got = model(input_ids=ids).logits
    finally:
        modeling_llama.apply_rotary_pos_emb = saved
    assert torch.equal(want, got)


def test_partial_rotation_is_kept_or_refused():
    """GPT-NeoX's function rotates the first ``cos.shape[-1]`` features and passes the rest: ours does the same
    (and is installed); a function that rotates the last ones instead is refused."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox

    def rotates_the_tail(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        d = cos.shape[-1]
        if d == q.shape[-1]:
            return neox(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
        head_q, head_k = neox(q[..., -d:], k[..., -d:], cos, sin, unsqueeze_dim=unsqueeze_dim)
        return torch.cat([q[..., :-d], head_q], -1), torch.cat([k[..., :-d], head_k], -1)

    assert rotary._standard_rotary(neox)
    assert not rotary._standard_rotary(rotates_the_tail)
    q, k = torch.randn(2, 3, 5, 16), torch.randn(2, 1, 5, 16)
    angles = torch.randn(2, 5, 2).repeat(1, 1, 2)
    for got, want in zip(rotary.apply_rotary_pos_emb(q, k, angles.cos(), angles.sin()),
                         neox(q, k, angles.cos(), angles.sin())):
        assert torch.equal(got, want)
