"""The GRPO objective against hand-computed small cases."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from seal_platform_plugins.grpo.objective import (  # noqa: E402
    group_advantages,
    grpo_token_loss,
    kl_penalty,
    policy_loss,
    token_logprobs,
    token_weights,
)


def test_group_advantages_unbiased_std_per_group():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    groups = ["a", "a", "a", "a", "b", "c", "c"]
    adv = group_advantages(rewards, groups)
    std = math.sqrt((4 * 0.25) / 3)  # unbiased: divide by G - 1
    assert adv[0] == pytest.approx(0.5 / (std + 1e-6), rel=1e-12)
    assert adv[1] == pytest.approx(-0.5 / (std + 1e-6), rel=1e-12)
    assert adv[4] == pytest.approx(1.0 / (1.0 + 1e-6))  # a group of one: mean 0, std 1 (verl)
    assert adv[5] == adv[6] == 0.0  # no signal in a group with equal rewards
    assert group_advantages([2.0, 0.0], ["g", "g"], normalize_std=False) == [1.0, -1.0]
    with pytest.raises(ValueError):
        group_advantages([1.0], ["a", "b"])


def test_policy_loss_clip_and_dual_clip_by_hand():
    old = torch.zeros(5)
    ratio = torch.tensor([1.5, 1.5, 20.0, 0.5, 0.5])
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0])
    loss, clipped, dual = policy_loss(torch.log(ratio), old, adv, 0.2, 0.2, 10.0)
    # A>0, r=1.5: max(-1.5, -1.2) = -1.2 (clipped); A<0, r=1.5: max(1.5, 1.2) = 1.5;
    # A<0, r=20: max(20, 1.2) = 20 -> dual clip min(20, 10) = 10; A>0, r=.5: max(-.5, -.8) = -.5;
    # A<0, r=.5: max(.5, .8) = .8 (clipped).
    assert loss.tolist() == pytest.approx([-1.2, 1.5, 10.0, -0.5, 0.8], rel=1e-6)
    assert clipped.tolist() == [True, False, False, False, True]
    assert dual.tolist() == [False, False, True, False, False]
    loss_nodual, _, dual_off = policy_loss(torch.log(ratio), old, adv, 0.2, 0.2, None)
    assert loss_nodual[2].item() == pytest.approx(20.0, rel=1e-6)
    assert not dual_off.any()
    # Asymmetric clip (clip-higher): upper bound 1 + 0.28.
    loss_hi, _, _ = policy_loss(torch.log(torch.tensor([1.5])), torch.zeros(1), torch.ones(1), 0.2, 0.28, 10.0)
    assert loss_hi.item() == pytest.approx(-1.28, rel=1e-6)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1.0) + 1.0 - 1.0, rel=1e-6)
    assert kl_penalty(ref, ref, "k3").item() == 0.0
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k9")


def test_token_weights_aggregation():
    assert token_weights([2, 3]) == pytest.approx([1 / 4, 1 / 4, 1 / 6, 1 / 6, 1 / 6])
    # A trajectory with no generated token still counts in the mean over trajectories.
    assert token_weights([2, 0]) == pytest.approx([1 / 4, 1 / 4])
    assert token_weights([2, 3], "token-mean") == pytest.approx([1 / 5] * 5)
    with pytest.raises(ValueError):
        token_weights([1], "sum")


def test_token_logprobs_divide_logits_by_temperature():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    targets = torch.tensor([0, 2])
    got = token_logprobs(logits, targets, temperature=0.7)
    want = torch.log_softmax(logits / 0.7, dim=-1)[[0, 1], [0, 2]]
    assert torch.allclose(got, want, atol=1e-6)


def test_loss_and_gradient_by_hand():
    # Two trajectories: i=0 with 2 tokens (A = +1), i=1 with 1 token (A = -0.5); seq-mean-token-mean.
    old = torch.tensor([-1.0, -2.0, -0.5])
    logp = torch.tensor([-1.0, -2.0 + math.log(1.5), -0.5 + math.log(0.5)], requires_grad=True)
    ref = torch.tensor([-1.5, -2.0, -0.5])
    adv = torch.tensor([1.0, 1.0, -0.5])
    w = torch.tensor(token_weights([2, 1]))  # [1/4, 1/4, 1/2]
    terms = grpo_token_loss(logp, old, adv, w, ref_logp=ref, kl_coef=0.1, clip_low=0.2, clip_high=0.2, dual_clip=10.0)
    # pg per token: -1 * 1 (ratio 1), -1.2 (clipped at 1.2), A<0 r=.5: max(.25, .4) = .4 (clipped)
    pg = [-1.0, -1.2, 0.4]
    d = [r - lp for r, lp in zip(ref.tolist(), logp.tolist())]
    kl = [math.exp(x) - x - 1 for x in d]
    weights = [0.25, 0.25, 0.5]
    want_pg = sum(wi * p for wi, p in zip(weights, pg))
    want_kl = sum(wi * k for wi, k in zip(weights, kl))
    assert terms.pg_loss.item() == pytest.approx(want_pg, rel=1e-6)
    assert terms.kl.item() == pytest.approx(want_kl, rel=1e-6)
    assert terms.loss.item() == pytest.approx(want_pg + 0.1 * want_kl, rel=1e-6)
    terms.loss.backward()
    # d/dlogp: unclipped token: -A * ratio * w; clipped tokens: 0 from pg. KL k3: 1 - exp(ref - logp).
    grad_kl = [0.1 * wi * (1 - math.exp(x)) for wi, x in zip(weights, d)]
    want = [-1.0 * 1.0 * 0.25 + grad_kl[0], grad_kl[1], grad_kl[2]]
    assert logp.grad.tolist() == pytest.approx(want, abs=1e-6)
    assert terms.clipped.tolist() == [False, True, True]


def test_entropy_bonus_and_missing_inputs():
    logp = torch.tensor([-1.0], requires_grad=True)
    ent = torch.tensor([2.0], requires_grad=True)
    terms = grpo_token_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1), entropy=ent, entropy_coef=0.01)
    assert terms.loss.item() == pytest.approx(-0.02)
    terms.loss.backward()
    assert ent.grad.item() == pytest.approx(-0.01)
    with pytest.raises(ValueError, match="reference"):
        grpo_token_loss(logp, logp.detach(), torch.ones(1), torch.ones(1), kl_coef=0.1)


def test_chunked_logprobs_equal_full_logits_in_value_and_gradient():
    """Chunks of 3 rows under checkpoint give the same log-probs, entropies and gradients as one pass."""
    from seal_platform_plugins.grpo.objective import chunked_logprobs, entropy_from_logits, token_logprobs

    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(10, 16, generator=gen, requires_grad=True)
    targets = torch.randint(0, 50, (10,), generator=gen)

    def grads(logp, ent):
        head.zero_grad()
        hidden.grad = None
        (logp.sum() + 0.3 * ent.sum()).backward()
        return hidden.grad.clone(), head.weight.grad.clone()

    logits = head(hidden)
    full_lp, full_ent = token_logprobs(logits, targets, 0.7), entropy_from_logits(logits, 0.7)
    g_full = grads(full_lp, full_ent)
    lp, ent = chunked_logprobs(hidden, head, targets, 0.7, chunk=3, entropy=True, entropy_grad=True)
    assert torch.allclose(lp, full_lp, atol=1e-6) and torch.allclose(ent, full_ent, atol=1e-6)
    g_chunk = grads(lp, ent)
    for a, b in zip(g_full, g_chunk):
        assert torch.allclose(a, b, atol=1e-6)
    _, detached = chunked_logprobs(hidden, head, targets, chunk=4, entropy=True)
    assert not detached.requires_grad
