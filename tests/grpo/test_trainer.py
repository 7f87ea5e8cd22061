"""The GRPO trainer on a tiny random model: the loss and gradients it computes equal a plain per-sequence
computation of the same formula, whatever the micro-batching, prefix sharing or skipping."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from seal_platform.engine import TrainableEngine
from seal_platform.types import Message, Trajectory  # noqa: E402
from seal_platform_libs.policy.tokens import encode_episode  # noqa: E402
from seal_platform_plugins.grpo.objective import group_advantages  # noqa: E402
from seal_platform_plugins.grpo.run import GRPORun  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402


def make_trajectories(tokenizer, rewards=((1.0, 0.0, 0.0), (0.0, 1.0, 1.0)), seed=0):
    """Two groups of multi-turn episodes (two sampled messages each, a tool result between)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t, group_rewards in enumerate(rewards):
        for j, reward in enumerate(group_rewards):
            first = torch.randint(200, 3000, (4 + j,), generator=gen).tolist()
            second = torch.randint(200, 3000, (3,), generator=gen).tolist()
            messages = [
                Message(role="system", content="You are a careful calculator. Use the tool for arithmetic."),
                Message(role="user", content=f"Task {t}: what is {t} plus two?"),
                Message(role="assistant", content=tokenizer.decode(first), token_ids=first,
                        logprobs=[-1.0] * len(first), trainable=True),
                Message(role="tool", content=str(t + 2)),
                Message(role="assistant", content=tokenizer.decode(second), token_ids=second,
                        logprobs=[-2.0] * len(second), trainable=True),
            ]
            out.append(Trajectory(task_id=str(t), category="c", group=f"g{t}", sample=j, messages=messages,
                                  reward=reward))
    return out


def reference_loss(model, tokenizer, trajectories, settings: GRPOSettings, temperature: float = 1.0):
    """The loss of one mini-batch holding all trajectories, computed one sequence at a time, no padding."""
    adv = group_advantages([t.reward for t in trajectories], [t.group for t in trajectories])
    per_traj = []
    for traj, a in zip(trajectories, adv):
        ep = encode_episode(tokenizer, traj.messages)
        ids = torch.tensor([ep.input_ids])
        logits = model(input_ids=ids).logits[0].float() / temperature
        logp_all = torch.log_softmax(logits[:-1], dim=-1)
        pos = [i for i, m in enumerate(ep.loss_mask) if m and i > 0]
        logp = logp_all[[p - 1 for p in pos], [ep.input_ids[p] for p in pos]]
        ratio = torch.exp(logp - logp.detach())  # old = current before the first update
        pg = torch.maximum(-a * ratio, -a * ratio.clamp(1 - settings.clip_ratio_low, 1 + settings.clip_ratio_high))
        per_traj.append(pg.mean())
    return torch.stack(per_traj).mean()


@pytest.fixture
def trajectories(tokenizer):
    return make_trajectories(tokenizer)


def test_build_samples_positions_and_scaled_advantages(tiny_policy, trajectories):
    _, tokenizer = tiny_policy
    weights = {trajectories[0].id: 2.0}
    samples = build_samples(tokenizer, trajectories, weights)
    first = samples[0]
    sampled = trajectories[0].messages[2].token_ids + trajectories[0].messages[4].token_ids
    assert [first.input_ids[p] for p in first.positions] == sampled
    assert first.engine_logprobs == [-1.0] * 4 + [-2.0] * 3
    adv = group_advantages([t.reward for t in trajectories], [t.group for t in trajectories])
    assert first.advantage == pytest.approx(2.0 * adv[0])
    assert samples[1].advantage == pytest.approx(adv[1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_update_loss_and_gradient_match_plain_computation(tiny_policy, trajectories, temperature):
    model, tokenizer = tiny_policy
    settings = GRPOSettings(kl_coef=0.0, mini_batch_tasks=2, micro_batch_size=2, shared_prefix=True)
    trainer = GRPOTrainer(model, settings, temperature=temperature, pad_id=tokenizer.pad_token_id)
    grads = capture_grads(trainer)
    metrics = trainer.step(build_samples(tokenizer, trajectories, settings=settings))

    model.zero_grad()
    want = reference_loss(model, tokenizer, trajectories, settings, temperature)
    want.backward()
    assert metrics["loss"] == pytest.approx(want.item(), abs=1e-6)
    params = [p for g in trainer.optimizer.param_groups for p in g["params"]]
    total = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params))
    assert metrics["grad_norm"] == pytest.approx(total, rel=1e-4)
    scale = min(1.0, settings.grad_clip / (total + 1e-6))
    for got, p in zip(grads[0], params):
        assert torch.allclose(got, p.grad * scale, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize(
    "variant",
    [
        dict(micro_batch_size=1, shared_prefix=False),
        dict(micro_batch_size=3, shared_prefix=True),
        dict(micro_batch_size=6, shared_prefix=False, max_tokens_per_micro_batch=200),
        dict(micro_batch_size=6, shared_prefix=True, zero_advantage="compute"),
        dict(micro_batch_size=3, gradient_checkpointing=True),  # attention kept, the rest recomputed
        dict(micro_batch_size=3, gradient_checkpointing=True, checkpoint_keep_attention=False),
    ],
)
def test_gradient_independent_of_micro_batching_and_prefix_sharing(tokenizer, new_tiny_model, trajectories, variant):
    def run(**kw):
        model = new_tiny_model()
        settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, **kw)
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
        grads = capture_grads(trainer)
        # Perturb the policy away from the reference so the KL term has a gradient.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        metrics = trainer.step(build_samples(tokenizer, trajectories, settings=settings))
        return metrics, grads

    base_metrics, base = run(micro_batch_size=6, shared_prefix=False)
    metrics, other = run(**variant)
    assert len(base) == len(other) == 2  # one update per group
    for key in ("loss", "pg_loss", "kl", "grad_norm"):
        assert metrics[key] == pytest.approx(base_metrics[key], rel=1e-4, abs=1e-7)
    for a_update, b_update in zip(base, other):
        for a, b in zip(a_update, b_update):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)


def test_checkpointing_keeps_attention_instead_of_recomputing_it(tokenizer, new_tiny_model, trajectories):
    """With gradient checkpointing the backward pass recomputes each layer's forward; by default it keeps the
    attention kernel's output (the kernel runs once per layer, not twice), and the update is the same."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from seal_platform_plugins.grpo.trainer import attention_kernels

    kernels = attention_kernels()

    class CountKernels(TorchDispatchMode):
        """Counts the attention kernels that actually run (a value the checkpoint kept never reaches here)."""

        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in kernels:
                CountKernels.calls += 1
            return func(*args, **(kwargs or {}))

    def run(**kw):
        model = new_tiny_model()
        settings = GRPOSettings(kl_coef=0.0, mini_batch_tasks=2, micro_batch_size=6, gradient_checkpointing=True, **kw)
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
        grads = capture_grads(trainer)
        CountKernels.calls = 0
        with CountKernels():
            trainer.step(build_samples(tokenizer, trajectories, settings=settings))
        return CountKernels.calls, grads

    layers = new_tiny_model().config.num_hidden_layers
    kept, kept_grads = run()
    recomputed, recomputed_grads = run(checkpoint_keep_attention=False)
    assert (kept, recomputed) == (layers, 2 * layers)  # one micro-batch: its forward (+ the recompute)
    for a, b in zip(kept_grads[0], recomputed_grads[0]):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_zero_advantage_groups_are_skipped_without_changing_the_update(tokenizer, new_tiny_model):
    trajs = make_trajectories(tokenizer, rewards=((1.0, 1.0, 1.0), (0.0, 1.0, 0.0)))

    def run(skip: bool):
        model = new_tiny_model()
        settings = GRPOSettings(kl_coef=0.0, mini_batch_tasks=2, zero_advantage="skip" if skip else "compute")
        trainer = GRPOTrainer(model, settings, pad_id=tokenizer.pad_token_id)
        grads = capture_grads(trainer)
        return trainer.step(build_samples(tokenizer, trajs, settings=settings)), grads

    skipped, g1 = run(True)
    full, g2 = run(False)
    assert skipped["trained_sequences"] == 3 and full["trained_sequences"] == 6
    assert skipped["loss"] == pytest.approx(full["loss"], abs=1e-7)
    for a, b in zip(g1[0], g2[0]):
        assert torch.allclose(a, b, atol=1e-7)


def test_engine_old_logprobs_setting(tiny_policy, trajectories):
    model, tokenizer = tiny_policy
    # Engine log-probs far below the policy's: every ratio is huge, so every positive-advantage token is clipped.
    settings = GRPOSettings(kl_coef=0.0, old_logprobs="engine", dual_clip=None)
    trainer = GRPOTrainer(model, settings, pad_id=tokenizer.pad_token_id)
    samples = build_samples(tokenizer, trajectories, settings=settings)
    for s in samples:
        s.engine_logprobs = [-60.0] * s.n_tokens
    metrics = trainer.step(samples)
    positive = sum(s.n_tokens for s in samples if s.advantage > 0)
    trained = sum(s.n_tokens for s in samples if s.advantage != 0)
    assert metrics["clip_frac"] == pytest.approx(positive / trained)
    with pytest.raises(ValueError, match="temperature"):
        GRPOTrainer(model, settings, temperature=0.7)
    # Recompute mode reports how far the engine's log-probs are from the policy's.
    recompute = GRPOTrainer(model, GRPOSettings(kl_coef=0.0, mini_batch_tasks=1), pad_id=tokenizer.pad_token_id)
    m = recompute.step(build_samples(tokenizer, trajectories))
    assert m["engine_logprob_abs_diff"] > 0


def test_updates_raise_the_likelihood_of_rewarded_sequences(tokenizer, new_tiny_model):
    trajs = make_trajectories(tokenizer, rewards=((1.0, 0.0, 0.0),))
    model = new_tiny_model()
    settings = GRPOSettings(lr=3e-3, kl_coef=0.001, mini_batch_tasks=1)
    run = GRPORun(model, tokenizer, settings, apatch=None)

    def seq_logp(traj):
        sample = build_samples(tokenizer, [traj])[0]
        run.trainer.fill_logprobs(model, [sample], "old_logp")
        return float(sample.old_logp.sum())

    before = [seq_logp(t) for t in trajs]

    class Engine(TrainableEngine):
        pushed = 0

        def update_weights(self, m, version=None):
            Engine.pushed += 1

    for _ in range(3):
        metrics = run.optimize(Engine(), trajs, {t.id: 1.0 for t in trajs})
    after = [seq_logp(t) for t in trajs]
    assert Engine.pushed == 3
    assert after[0] > before[0] + 1.0  # the rewarded rollout
    assert after[1] < before[1] and after[2] < before[2]
    assert metrics["updates"] == 1 and metrics["kl"] > 0 and metrics["tokens_per_s"] > 0
    assert run.trainer.updates == 3


def test_settings_validation():
    with pytest.raises(ValueError):
        GRPOSettings(clip_ratio_low=1.0)
    with pytest.raises(ValueError):
        GRPOSettings(unknown_key=1)
    with pytest.raises(ValueError, match="reference model"):
        GRPOTrainer(torch.nn.Linear(2, 2), GRPOSettings(kl_coef=0.1))


def test_zero_advantage_with_kl_is_skipped_only_while_the_policy_equals_the_reference(tokenizer, new_tiny_model):
    """With a k3 KL term, equal-reward groups cost nothing before the first update (their loss and gradient
    are exactly 0 there) and give the same update as computing them; after an update they are computed."""
    def trainer_for(mode: str) -> tuple[GRPOTrainer, list]:
        settings = GRPOSettings(kl_coef=0.05, mini_batch_tasks=2, zero_advantage=mode)
        trainer = GRPOTrainer.with_reference(new_tiny_model(), settings, pad_id=tokenizer.pad_token_id)
        return trainer, capture_grads(trainer)

    all_equal = make_trajectories(tokenizer, rewards=((1.0, 1.0, 1.0), (0.0, 0.0, 0.0)))
    trainer, grads = trainer_for("skip")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.step(build_samples(tokenizer, all_equal, settings=trainer.settings))
    assert metrics["updates"] == 0 and metrics["trained_sequences"] == 0 and not grads
    assert metrics["skipped_sequences"] == 6 and metrics["skipped_mini_batches"] == 1
    assert metrics["skipped_tokens"] > 0
    assert trainer.policy_is_reference
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))

    mixed = make_trajectories(tokenizer, rewards=((1.0, 1.0, 1.0), (0.0, 1.0, 0.0)))
    results = {}
    for mode in ("skip", "compute"):
        trainer, grads = trainer_for(mode)
        results[mode] = (trainer.step(build_samples(tokenizer, mixed, settings=trainer.settings)), grads)
    (skipped, g_skip), (full, g_full) = results["skip"], results["compute"]
    assert skipped["trained_sequences"] == 3 and full["trained_sequences"] == 6
    assert skipped["skipped_sequences"] == 3 and full["skipped_sequences"] == 0
    for a, b in zip(g_skip[0], g_full[0]):
        assert torch.allclose(a, b, atol=1e-7)

    # The policy has moved: the KL term of zero-advantage trajectories now has a gradient; they are run.
    trainer, _ = trainer_for("skip")
    trainer.step(build_samples(tokenizer, mixed, settings=trainer.settings))
    assert not trainer.policy_is_reference
    after = trainer.step(build_samples(tokenizer, all_equal, settings=trainer.settings))
    assert after["trained_sequences"] == 6 and after["updates"] == 1


def test_train_layers_updates_only_the_top_layers_with_the_full_models_gradients(
    tokenizer, new_tiny_model, trajectories
):
    from seal_platform_libs.policy.loading import train_top_layers

    settings = GRPOSettings(kl_coef=0.0, mini_batch_tasks=2, lr=1e-3, grad_clip=None)  # clipping uses the global norm
    full = new_tiny_model()
    full_trainer = GRPOTrainer(full, settings, pad_id=tokenizer.pad_token_id)
    full_grads = capture_grads(full_trainer)
    full_trainer.step(build_samples(tokenizer, trajectories, settings=settings))
    names = [n for n, p in full.named_parameters()]

    part = new_tiny_model()
    trainable = train_top_layers(part, 1)
    top = {n for n, p in part.named_parameters() if p.requires_grad}
    assert top and all(n.startswith("model.layers.1.") or n == "model.norm.weight" for n in top)
    assert trainable == sum(p.numel() for n, p in part.named_parameters() if n in top)
    before = {n: p.detach().clone() for n, p in part.named_parameters()}
    trainer = GRPOTrainer(part, settings, pad_id=tokenizer.pad_token_id)
    trainer.step(build_samples(tokenizer, trajectories, settings=settings))
    for name, p in part.named_parameters():
        moved = not torch.equal(p.detach(), before[name])
        assert moved == (name in top), name
    # The trained layers get exactly the gradients the full fine-tune computes for them (the frozen part only
    # stops earlier), so the update is the full update restricted to those weights.
    part2 = new_tiny_model()
    train_top_layers(part2, 1)
    trainer2 = GRPOTrainer(part2, settings, pad_id=tokenizer.pad_token_id)
    grads = capture_grads(trainer2)
    trainer2.step(build_samples(tokenizer, trajectories, settings=settings))
    by_name = dict(zip(names, full_grads[0]))
    trained_names = [n for n, p in part2.named_parameters() if p.requires_grad]
    assert len(grads[0]) == len(trained_names)
    for name, g in zip(trained_names, grads[0]):
        assert torch.allclose(g, by_name[name], atol=1e-6, rtol=1e-4), name
    with pytest.raises(ValueError, match="decoder layers"):
        train_top_layers(new_tiny_model(), 3)
    with pytest.raises(ValueError, match="train_layers"):
        GRPOSettings(train_layers=2, lora={"rank": 4})


def test_the_token_cap_is_hard_and_the_response_window_keeps_the_first_response_tokens(tokenizer, trajectories,
                                                                                       new_tiny_model):
    full = build_samples(tokenizer, trajectories, settings=GRPOSettings(max_tokens_per_micro_batch=None))
    longest = max(len(s.input_ids) for s in full)
    cap = longest - 3
    capped = build_samples(tokenizer, trajectories, settings=GRPOSettings(max_tokens_per_micro_batch=cap))
    assert max(len(s.input_ids) for s in capped) == cap
    for a, b in zip(full, capped):
        assert b.truncated == (len(a.input_ids) > cap)
        assert b.input_ids == a.input_ids[:cap] and b.positions == [p for p in a.positions if p < cap]
        assert b.engine_logprobs == a.engine_logprobs[: len(b.positions)]
    trainer = GRPOTrainer(new_tiny_model(), GRPOSettings(max_tokens_per_micro_batch=cap, kl_coef=0.0),
                          pad_id=tokenizer.pad_token_id)
    assert all(max(len(s.input_ids) for s in micro) * len(micro) <= cap for micro in trainer._micro_batches(capped))
    # The release's response window: loss positions within N tokens of the first generated one; the tool
    # result between the two assistant messages counts towards N.
    for a in full:
        gap = a.positions[-1] - a.positions[0]
        window = build_samples(tokenizer, [t for t in trajectories if t.id == a.id],
                               settings=GRPOSettings(response_window_tokens=gap))[0]
        assert window.positions == a.positions[:-1] and window.input_ids == a.input_ids
