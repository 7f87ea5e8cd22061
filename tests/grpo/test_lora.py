"""LoRA training (grpo.lora) on the tiny model: only the adapters train, the KL reference is the base with the
adapters off (exactly, and without a second copy), a LoRA run resumes exactly from its adapter-only
checkpoint, and a merged export computes what the adapted policy computes."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
np = pytest.importorskip("numpy")

from pydantic import ValidationError  # noqa: E402
from test_checkpoint import RecordingEngine, do_step  # noqa: E402
from test_trainer import make_trajectories  # noqa: E402

from seal_platform.capability import CapabilityState  # noqa: E402
from seal_platform.config import RunConfig  # noqa: E402
from seal_platform.context import RunContext  # noqa: E402
from seal_platform_libs.policy import lora  # noqa: E402
from seal_platform_libs.policy.loading import PolicySettings  # noqa: E402
from seal_platform_plugins.grpo import plugin  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples  # noqa: E402
from seal_platform_plugins.grpo.settings import APatchSettings, GRPOSettings, LoRASettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402

LORA = LoRASettings(rank=8, alpha=16)


def lora_settings(**kw) -> GRPOSettings:
    return GRPOSettings(lr=1e-2, kl_coef=0.05, mini_batch_tasks=1, lora=LORA, **kw)


def test_settings_turn_lora_on_with_defaults_and_reject_nonsense():
    assert GRPOSettings().lora is None  # full fine-tuning unless asked
    on = GRPOSettings.model_validate({"lora": {"rank": 4}})
    assert on.lora.rank == 4 and "q_proj" in on.lora.target_modules
    with pytest.raises(ValidationError):
        GRPOSettings.model_validate({"lora": {"rank": 0}})
    with pytest.raises(ValidationError):
        GRPOSettings.model_validate({"lora": {"target_modules": []}})
    with pytest.raises(ValidationError):
        GRPOSettings.model_validate({"lora": {"rnak": 4}})


def test_wrap_starts_at_the_base_and_freezes_it(tiny_policy):
    model, tokenizer = tiny_policy
    ids = torch.tensor([tokenizer.encode("What is 2 plus 2?")])
    before = model(input_ids=ids).logits
    wrapped = lora.wrap(model, LORA)
    assert torch.equal(wrapped(input_ids=ids).logits, before)  # B = 0: the adapted model is the base
    trainable = lora.trainable_parameters(wrapped)
    assert trainable and all("lora_" in name for name in trainable)
    n_train = sum(p.numel() for p in trainable.values())
    assert n_train < 0.1 * sum(p.numel() for p in wrapped.parameters())
    with pytest.raises(ValueError, match="settings.grpo.lora does not fit settings.policy.model"):
        lora.wrap(type(model)(model.config), LoRASettings(target_modules=["no_such_module"]))


def test_an_update_changes_only_the_adapters_and_the_reference_stays_the_base(tiny_policy):
    model, tokenizer = tiny_policy
    base_copy = {k: v.clone() for k, v in model.state_dict().items()}
    import copy

    pristine = copy.deepcopy(model)
    wrapped = lora.wrap(model, LORA)
    before = {k: v.clone() for k, v in wrapped.state_dict().items()}
    settings = lora_settings()
    trainer = GRPOTrainer.with_reference(wrapped, settings, pad_id=tokenizer.pad_token_id)
    assert isinstance(trainer.ref_model, lora.AdaptersOff)  # no second copy of the weights
    assert len(trainer.optimizer.param_groups[0]["params"]) == len(lora.trainable_parameters(wrapped))
    trajectories = make_trajectories(tokenizer)
    metrics = trainer.step(build_samples(tokenizer, trajectories, settings=settings))
    assert metrics["updates"] == 2
    after = wrapped.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all("lora_B" in k or "lora_A" in k for k in changed)
    assert any("lora_B" in k for k in changed)
    # Every base tensor is bit-for-bit what it was.
    for name, tensor in lora.base_state_dict(wrapped).items():
        assert torch.equal(tensor, base_copy[name]), name

    # The policy has moved; the reference (adapters off) is exactly the untouched base model.
    samples = build_samples(tokenizer, trajectories, settings=settings)
    trainer.fill_logprobs(trainer.ref_model, samples, "ref_logp")
    trainer.fill_logprobs(wrapped, samples, "old_logp")
    plain = GRPOTrainer(pristine, GRPOSettings(kl_coef=0.0), pad_id=tokenizer.pad_token_id)
    base_samples = build_samples(tokenizer, trajectories, settings=settings)
    plain.fill_logprobs(pristine, base_samples, "old_logp")
    for ours, theirs in zip(samples, base_samples):
        assert torch.equal(ours.ref_logp, theirs.old_logp)
        assert not torch.allclose(ours.old_logp, ours.ref_logp)
    assert not wrapped._adapters_disabled  # the reference pass switched them back on


def make_ctx(tmp_path, model_dir, **grpo) -> RunContext:
    config = RunConfig(environment="toy", seed=7, stages={"reweight": "grpo", "optimize": "grpo"},
                       rollout={"engine": "hf", "temperature": 1.0})
    settings = {
        "policy": PolicySettings(model=str(model_dir)),
        "grpo": GRPOSettings(lr=1e-2, kl_coef=0.01, mini_batch_tasks=1, lora=LORA, **grpo),
        "apatch": APatchSettings(count_saturation=2),
    }
    return RunContext(config=config, run_id="r", run_dir=tmp_path, settings=settings)


def test_lora_run_checkpoints_adapters_only_and_resumes_exactly(tmp_path, tiny_model_dir, tokenizer):
    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=False)
    ctx.shared["engine"] = RecordingEngine()
    state = CapabilityState()
    for step in range(2):
        do_step(ctx, tokenizer, step, state)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    meta = plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=1)
    assert meta["lora"] is True and meta["updates"] == 4
    files = {p.relative_to(ckpt / "grpo").as_posix() for p in (ckpt / "grpo").rglob("*") if p.is_file()}
    assert "model.safetensors" not in files  # no base weights in a LoRA checkpoint
    assert {"adapter/adapter_model.safetensors", "adapter/adapter_config.json", "base.json", "trainer.pt"} <= files
    from safetensors.torch import load_file

    saved = load_file(str(ckpt / "grpo" / "adapter" / "adapter_model.safetensors"))
    assert saved and all("lora_" in k for k in saved)
    saved_state = state.model_copy(deep=True)
    draws = (torch.rand(3), random.random(), np.random.rand())
    expected = do_step(ctx, tokenizer, 2, state)
    plugin.end_run(ctx=ctx, status="completed")

    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    resumed = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=resumed, resumed=True)
    engine = RecordingEngine()
    resumed.shared["engine"] = engine
    plugin.load_checkpoint(ctx=resumed, directory=ckpt, step=1)
    assert engine.pushes == 1
    assert resumed.shared[plugin.RUN].trainer.updates == 4
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(again[0], draws[0]) and again[1:] == draws[1:]
    got = do_step(resumed, tokenizer, 2, saved_state)
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert got["kl"] == pytest.approx(expected["kl"], abs=1e-7)
    plugin.end_run(ctx=resumed, status="completed")


def test_export_merged_folds_trained_adapters_into_a_plain_model(tmp_path, tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    from seal_platform_plugins.grpo.export import EXPORT_FILE, export_merged

    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=False)
    ctx.shared["engine"] = RecordingEngine()
    state = CapabilityState()
    do_step(ctx, tokenizer, 0, state)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=0)
    policy = ctx.shared[plugin.RUN].model
    run_config = {"settings": {"policy": {"model": str(tiny_model_dir)},
                               "grpo": ctx.settings["grpo"].model_dump(mode="json")}}
    out = tmp_path / "export" / "merged"
    record = export_merged(run_config, ckpt, out)
    assert record["lora"] and record["base"]["weights_fingerprint"] == lora.base_identity(policy)["weights_fingerprint"]
    assert (out / EXPORT_FILE).is_file() and (out / "tokenizer_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in name for name in merged.state_dict())
    ids = torch.tensor([tokenizer.encode("What is 12 times 7?")])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base = policy(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert (got - base).abs().max() > 1e-3  # the trained adapters are in the merged weights
    plugin.end_run(ctx=ctx, status="completed")


def test_lora_checkpoint_refuses_another_base_or_full_fine_tuning(tmp_path, tiny_model_dir, tokenizer):
    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=False)
    ckpt = tmp_path / "c"
    ckpt.mkdir()
    plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=0)
    plugin.end_run(ctx=ctx, status="completed")

    other = make_ctx(tmp_path, tiny_model_dir)
    other.settings["policy"] = PolicySettings(model=str(tiny_model_dir), random_init=True)
    torch.manual_seed(99)
    plugin.start_run(ctx=other, resumed=True)
    with pytest.raises(ValueError, match="another base model"):
        plugin.load_checkpoint(ctx=other, directory=ckpt, step=0)
    plugin.end_run(ctx=other, status="completed")

    full = make_ctx(tmp_path, tiny_model_dir)
    full.settings["grpo"] = GRPOSettings(kl_coef=0.01)
    plugin.start_run(ctx=full, resumed=True)
    with pytest.raises(ValueError, match="holds LoRA adapters but this run uses full fine-tuning"):
        plugin.load_checkpoint(ctx=full, directory=ckpt, step=0)
    plugin.end_run(ctx=full, status="completed")


def test_gradient_checkpointing_reaches_the_first_layers_adapters(tiny_policy):
    model, tokenizer = tiny_policy
    settings = GRPOSettings(lr=1e-2, kl_coef=0.0, mini_batch_tasks=2, lora=LORA, gradient_checkpointing=True)
    wrapped = lora.wrap(model, LORA, gradient_checkpointing=True)
    trainer = GRPOTrainer.with_reference(wrapped, settings, pad_id=tokenizer.pad_token_id)
    first = {k: v.clone() for k, v in lora.trainable_parameters(wrapped).items() if "layers.0." in k and "lora_B" in k}
    trainer.step(build_samples(tokenizer, make_trajectories(tokenizer), settings=settings))
    now = lora.trainable_parameters(wrapped)
    # B starts at 0 and weight decay keeps a 0 at 0: only a gradient through the checkpointed blocks moves it.
    assert first and all(not torch.equal(now[k], v) for k, v in first.items())


def test_lora_with_sharded_training_is_a_clear_config_error():
    if "train_workers" not in GRPOSettings.model_fields:
        pytest.skip("this version has no sharded training (grpo.train_workers)")
    assert GRPOSettings.model_validate({"lora": {"rank": 8}, "train_workers": 1}).lora.rank == 8
    with pytest.raises(
        ValidationError, match="settings.grpo.lora cannot be combined with settings.grpo.train_workers = 2"
    ):
        GRPOSettings.model_validate({"lora": {"rank": 8}, "train_workers": 2})
