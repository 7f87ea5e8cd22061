"""Sharded training (torch FSDP2 over gloo on CPU): 2 workers give the 1-process update, and a 2-worker
checkpoint resumes into 1 worker exactly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from seal_platform_libs.policy.loading import PolicySettings, load_policy  # noqa: E402
from seal_platform_libs.policy.packing import PREFIX_KWARG  # noqa: E402
from seal_platform_plugins.grpo.distributed import LocalTrainerGroup, free_port  # noqa: E402
from seal_platform_plugins.grpo.samples import Sample, build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions, balanced_slices  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

# Metrics that must agree between the sharded and the 1-process update (timings differ, of course).
COMPARED = ("loss", "pg_loss", "kl", "entropy", "grad_norm", "clip_frac", "dual_clip_frac", "approx_kl",
            "ratio_max", "updates", "skipped_updates", "trained_sequences", "generated_tokens", "trained_tokens",
            "lr", "engine_logprob_abs_diff", "own_pass_ratio_samples")


def max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def assert_same_metrics(got: dict, want: dict) -> None:
    for key in COMPARED:
        assert got[key] == pytest.approx(want[key], abs=1e-4, rel=1e-5), key


def test_balanced_slices_cover_every_sample_once_and_balance_tokens():
    samples = [Sample(id=str(i), group="g", input_ids=[0] * n, positions=[], advantage=0.0)
               for i, n in enumerate([50, 10, 40, 30, 20, 5])]
    slices = balanced_slices(samples, 2)
    assert sorted(s.id for part in slices for s in part) == sorted(s.id for s in samples)
    loads = [sum(len(s.input_ids) for s in part) for part in slices]
    assert abs(loads[0] - loads[1]) <= 5
    for part in slices:  # original order kept
        assert [int(s.id) for s in part] == sorted(int(s.id) for s in part)
    assert balanced_slices(samples, 2) == slices  # deterministic
    assert balanced_slices(samples[:1], 3)[1:] == [[], []]


@pytest.mark.parametrize(("checkpointing", "packed"), [(False, False), (True, False), (True, True)])
def test_one_sharded_worker_equals_the_single_process_trainer_and_reloads_its_checkpoint(tiny_model_dir, tokenizer,
                                                                                        tmp_path, checkpointing,
                                                                                        packed):
    """The FSDP2 code path in this process (world size 1, gloo): same update as GRPOTrainer (also with
    gradient checkpointing, attention kept, and with packed rows whose groups' prompts run once, on the sharded
    side only); DCP save/load."""
    from test_trainer import make_trajectories

    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=2, lr=1e-3, adam_eps=1e-6,
                            logits_chunk_tokens=None)
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    trajs = make_trajectories(tokenizer)
    model, _ = load_policy(policy)
    want = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id).step(
        build_samples(tokenizer, trajs, settings=settings))
    # The sharded side takes its log-probs through the output layer in chunks of 7 loss tokens (several per
    # micro-batch), outside the sharded model's forward; the 1-process side from the model's own logits.
    sharded = settings.model_copy(update={"gradient_checkpointing": checkpointing, "pack_sequences": packed,
                                          "logits_chunk_tokens": 7})
    options = WorkerOptions(grpo=sharded, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        assert worker.trainer.settings.logits_chunk_tokens == 7
        assert all(head is not None for head in worker.trainer._output_heads.values())
        # Packed rows under per-sequence SDPA keep prefix sharing (the prompt at the row's head); padded
        # micro-batches drop it on the sharded path (its prefix pass would be an extra collective call).
        assert worker.trainer.settings.shared_prefix is packed
        prompts: list[int] = []  # per model call, the pieces of its packed row that later pieces continue
        worker.trainer.model.register_forward_pre_hook(
            lambda module, args, kwargs: prompts.append(len(set(kwargs.get(PREFIX_KWARG, ())) - {-1})),
            with_kwargs=True)
        got = worker.step(build_samples(tokenizer, trajs, settings=settings))
        assert (max(prompts) > 0) is packed  # the groups' prompts ran once each, in the rows
        assert_same_metrics(got, want)
        weights = worker.full_state_dict()
        assert max_diff(weights, model.state_dict()) <= 1e-4
        worker.save(tmp_path / "ck")
        worker.step(build_samples(tokenizer, trajs, settings=settings))
        assert max_diff(worker.full_state_dict(), weights) > 1e-4
        assert worker.load(tmp_path / "ck")["updates"] == 2 and worker.updates == 2
        assert max_diff(worker.full_state_dict(), weights) == 0.0
    finally:
        worker.close()
    assert not dist.is_initialized()


@pytest.mark.slow  # two worker processes start (about 40 s on 2 idle cores)
def test_two_workers_equal_one_process_and_resume_into_one_worker(tiny_model_dir, tokenizer, tmp_path):
    from test_trainer import make_trajectories

    # KL on (a sharded reference model); micro-batches of 1 so the ranks' slices (2 and 1 samples of a group)
    # take different numbers of passes and the idle rank's padding passes are exercised.
    # AdamW's first steps are sign-like (g / (|g| + eps)): with the default eps 1e-8 a gradient entry that is
    # float noise around 0 (a cancellation, ~1e-9) moves its weight by up to lr whichever way the rounding
    # went, in any two orders of summation. eps 1e-6 keeps such entries still; real gradients are far larger.
    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=1, lr=1e-3, adam_eps=1e-6)
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    first = make_trajectories(tokenizer, seed=0)
    second = make_trajectories(tokenizer, rewards=((0.0, 1.0, 0.0), (1.0, 1.0, 0.0)), seed=1)

    def batch(trajs):
        return build_samples(tokenizer, trajs, settings=settings)

    model, _ = load_policy(policy)
    single = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
    want = single.step(batch(first))
    want_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    options = WorkerOptions(grpo=settings, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    ckpt = tmp_path / "ckpt"
    with LocalTrainerGroup(2, options) as group:
        got = group.step(batch(first))
        weights = group.full_state_dict()
        group.save(ckpt)
        after_two = group.step(batch(second))
        weights_two = group.full_state_dict()
    assert want["updates"] == 2 and want["kl"] > 0
    assert_same_metrics(got, want)
    assert max_diff(weights, want_weights) <= 1e-4
    # The update moved the weights far more than the tolerance: the comparison is not vacuous.
    moved = max(float((want_weights[k] - load_policy(policy)[0].state_dict()[k]).abs().max()) for k in want_weights)
    assert moved > 1e-3

    # The 2-worker checkpoint (written after the first step) resumes into a single worker: its next step is
    # the one the 2 workers took.
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        meta = worker.load(ckpt)
        assert meta["world_size"] == 2 and worker.updates == 2
        assert max_diff(worker.full_state_dict(), weights) == 0.0
        after_one = worker.step(batch(second))
        assert worker.updates == 4
        assert_same_metrics(after_one, after_two)
        assert max_diff(worker.full_state_dict(), weights_two) <= 1e-4
    finally:
        worker.close()
    assert not dist.is_initialized()


# Two worker processes start: about 30 s on 2 idle cores. `make test` keeps a 2-worker equality (the reference
# test below) and the sharded code path in one process; this one runs in `make test-slow`.
@pytest.mark.slow
def test_two_workers_equal_one_process_over_many_mini_batches_and_epochs(tiny_model_dir, tokenizer):
    """One partition of each mini-batch serves its old-log-prob pass and its training in every epoch: with five
    mini-batches (where a partition of all later samples and one per mini-batch differ) and two epochs, the
    2-rank update is the 1-process one and no sample takes its ratio from its own pass after an update. The
    ranks take their log-probs through the output layer in chunks (outside the sharded forward), the 1 process
    from the model's logits. ``zero_advantage: compute``: every sample runs on both sides (the skip at the reference
    is the next test's)."""
    from test_trainer import make_trajectories

    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=2, lr=1e-3, adam_eps=1e-6,
                            epochs_per_step=2, logits_chunk_tokens=None, zero_advantage="compute")
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    rewards = ((1.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 1.0), (1.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    trajs = make_trajectories(tokenizer, rewards=rewards, seed=3)

    model, _ = load_policy(policy)
    want = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id).step(
        build_samples(tokenizer, trajs, settings=settings))
    want_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert want["updates"] == 10 and want["own_pass_ratio_samples"] == 0

    chunked = settings.model_copy(update={"logits_chunk_tokens": 7})
    options = WorkerOptions(grpo=chunked, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    with LocalTrainerGroup(2, options) as group:
        got = group.step(build_samples(tokenizer, trajs, settings=settings))
        weights = group.full_state_dict()
    assert got["own_pass_ratio_samples"] == 0
    assert_same_metrics(got, want)
    assert max_diff(weights, want_weights) <= 1e-4
    moved = max(float((want_weights[k] - load_policy(policy)[0].state_dict()[k]).abs().max()) for k in want_weights)
    assert moved > 1e-3


def test_worker_failure_is_reported_with_its_cause(tmp_path):
    options = WorkerOptions(grpo=GRPOSettings(), policy=PolicySettings(model=str(tmp_path / "missing")), device="cpu")
    with pytest.raises(RuntimeError, match="neither"):
        LocalTrainerGroup(1, options, timeout_s=120)



@pytest.mark.slow  # three training groups start (about a minute on 2 cores)
def test_plugin_trains_with_two_workers_and_resumes_across_worker_counts(tmp_path, tiny_model_dir, tokenizer):
    """``grpo.train_workers: 2`` through the plugin's hooks: the engine gets the workers' weights after each
    step; the sharded checkpoint resumes into the single-process trainer, whose checkpoint resumes into 2
    workers again; each resumed step equals the uninterrupted run's."""
    from test_checkpoint import RecordingEngine, do_step, make_ctx

    from seal_platform.capability import CapabilityState
    from seal_platform_plugins.grpo import plugin

    def start(workers: int, ckpt=None, step: int = 0):
        ctx = make_ctx(tmp_path, tiny_model_dir)
        ctx.settings["grpo"] = ctx.settings["grpo"].model_copy(update={"train_workers": workers})
        ctx.settings["policy"] = ctx.settings["policy"].model_copy(update={"device": "cpu"})
        plugin.start_run(ctx=ctx, resumed=ckpt is not None)
        ctx.shared["engine"] = RecordingEngine()
        if ckpt is not None:
            plugin.load_checkpoint(ctx=ctx, directory=ckpt, step=step)
        return ctx

    def save(ctx, name: str, step: int):
        ckpt = tmp_path / name
        ckpt.mkdir()
        return ckpt, plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=step)

    def same(got, want):
        for key in ("loss", "pg_loss", "kl", "grad_norm", "clip_frac"):
            assert got[key] == pytest.approx(want[key], abs=1e-4, rel=1e-5), key

    state = CapabilityState()
    two = start(2)
    run = two.shared[plugin.RUN]
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    first = do_step(two, tokenizer, 0, state)
    assert two.shared["engine"].pushes == 1 and first["updates"] == 2
    # The driver's copy (what the engine samples from) holds the workers' new weights.
    assert max(float((before[k] - v).abs().max()) for k, v in run.model.state_dict().items()) > 1e-3
    sharded, meta = save(two, "sharded", 0)
    assert meta["updates"] == 2 and (sharded / "grpo" / "sharded" / "trainer_state.json").is_file()
    state_0 = state.model_copy(deep=True)
    want_1 = do_step(two, tokenizer, 1, state)
    plugin.end_run(ctx=two, status="completed")
    assert not run.trainer.group._procs  # worker processes stopped

    one = start(1, sharded, 0)
    assert one.shared[plugin.RUN].trainer.updates == 2
    same(do_step(one, tokenizer, 1, state_0), want_1)
    plain, _ = save(one, "plain", 1)
    assert (plain / "grpo" / "trainer.pt").is_file()
    state_1 = state_0.model_copy(deep=True)
    want_2 = do_step(one, tokenizer, 2, state_0)
    plugin.end_run(ctx=one, status="completed")

    again = start(2, plain, 1)
    assert again.shared[plugin.RUN].trainer.updates == 4
    same(do_step(again, tokenizer, 2, state_1), want_2)
    plugin.end_run(ctx=again, status="completed")


# A local Ray (shared by the session) and two FSDP worker actors start: about 30 s on 2 cores. `make test` keeps
# Ray's rank group (tests/ray_backend/test_ray_trainers.py) and the 2-worker equality; this runs in `make test-slow`.
@pytest.mark.slow
def test_group_trainer_on_ray_places_its_ranks_as_actors_and_equals_one_process(tiny_model_dir, tokenizer, local_ray):
    """The run's cluster is Ray (``settings.ray.enabled``) with ``grpo.train_workers: 2``: the ranks are Ray actors
    (``RayTrainerGroup``), and the step and the driver's synced weights are the 1-process update's."""
    pytest.importorskip("ray")
    from test_trainer import make_trajectories

    from seal_platform_libs.policy.ray_trainers import RayTrainerGroup
    from seal_platform_plugins.grpo.distributed import GroupTrainer

    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=1, lr=1e-3, adam_eps=1e-6,
                            train_workers=2)
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    samples = build_samples(tokenizer, make_trajectories(tokenizer, seed=0), settings=settings)

    model, _ = load_policy(policy)
    want = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id).step(samples)
    want_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    driver, _ = load_policy(policy)
    trainer = GroupTrainer(driver, settings, policy, pad_id=tokenizer.pad_token_id, ray=local_ray)
    try:
        assert isinstance(trainer.group, RayTrainerGroup) and len(trainer.group.actors) == 2
        got = trainer.step(build_samples(tokenizer, make_trajectories(tokenizer, seed=0), settings=settings))
        assert trainer.updates == want["updates"] == 2
        assert_same_metrics(got, want)
        assert max_diff(dict(driver.state_dict()), want_weights) <= 1e-4
    finally:
        trainer.close()
    assert trainer.group.actors == []


# Two worker processes start: about 40 s on 2 idle cores.
def test_two_workers_skip_zero_advantages_at_the_reference_as_one_process_does(tiny_model_dir, tokenizer):
    """Before the first update the policy is its frozen reference: the single-process trainer then skips a
    zero-advantage group (its gradient is 0 even with the KL term) and takes the first mini-batch's reference
    log-probs from the policy's own pass. The sharded ranks do the same (``policy_is_reference``): the skipped
    counts, the trained sequences, the metrics and the weights equal the 1-process update's. Micro-batches of 1
    leave one rank idle in some passes (its padding passes must pair with the others' collectives)."""
    from test_trainer import make_trajectories

    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=1, lr=1e-3, adam_eps=1e-6)
    policy = PolicySettings(model=str(tiny_model_dir), device="cpu", dtype="float32")
    rewards = ((1.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 1.0, 1.0))
    trajs = make_trajectories(tokenizer, rewards=rewards, seed=5)

    model, _ = load_policy(policy)
    want = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id).step(
        build_samples(tokenizer, trajs, settings=settings))
    want_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # the zero-advantage groups before the first update are skipped (one whole mini-batch of them)
    assert want["skipped_sequences"] >= 3 and want["skipped_mini_batches"] >= 1

    options = WorkerOptions(grpo=settings, policy=policy, pad_id=tokenizer.pad_token_id, device="cpu")
    with LocalTrainerGroup(2, options) as group:
        got = group.step(build_samples(tokenizer, trajs, settings=settings))
        weights = group.full_state_dict()
    assert_same_metrics(got, want)
    for key in ("skipped_sequences", "skipped_tokens", "skipped_mini_batches"):
        assert got[key] == want[key], key
    assert max_diff(weights, want_weights) <= 1e-4
