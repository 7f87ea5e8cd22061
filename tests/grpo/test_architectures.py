"""The trainer's exact speed-ups hold on other architectures than Llama: one GRPO step with all of them on
(packed rows with shared prompts, gradient checkpointing, the fused rotary, chunked log-probs) gives the same
loss, gradients and log-probs as with all of them off, on tiny models with sliding windows, chunks, soft-capped
or scaled logits, q/k norms, experts and partial rotary (``testing.TINY_ARCHITECTURES``). Where one speed-up
cannot be exact for an architecture, it is refused or gives way, never approximated."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seal_platform_libs.policy.testing import (  # noqa: E402
    ARCHITECTURE_SHAPE,
    TINY_ARCHITECTURES,
    UNPACKABLE,
    tiny_causal_lm,
)
from seal_platform_plugins.grpo.samples import Sample  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402

PLAIN = dict(pack_sequences=False, shared_prefix=False, gradient_checkpointing=False, fused_rotary=False,
             logits_chunk_tokens=None)
FAST = dict(pack_sequences=True, shared_prefix=True, gradient_checkpointing=True, fused_rotary=True,
            logits_chunk_tokens=16)
FAST_PADDED = dict(FAST, pack_sequences=False, gradient_checkpointing=False)  # padded rows share prompts too


def samples() -> list[Sample]:
    """Two groups of three rollouts (40-90 tokens) sharing a 24-token prompt each; a tool result (no loss)
    inside every rollout."""
    rng = random.Random(0)
    vocab = ARCHITECTURE_SHAPE["vocab_size"]
    out = []
    for g in range(2):
        prompt = [rng.randrange(3, vocab) for _ in range(24)]
        for j, n in enumerate([90, 40, 70]):
            ids = prompt + [rng.randrange(3, vocab) for _ in range(n - len(prompt))]
            out.append(Sample(id=f"{g}-{j}", group=f"g{g}", input_ids=ids,
                              positions=[p for p in range(24, n) if not 30 <= p < 34], advantage=rng.uniform(-1, 1)))
    return out


def step(architecture: str, options: dict, lora: bool = False, device: str = "cpu") -> tuple[dict, list, list[Sample]]:
    """One step (KL term on, the policy moved off its reference first): metrics, gradients applied, samples.
    ``lora``: rank-4 adapters on every linear layer, the reference being the adapters-off model. ``device``:
    where the model runs (float32 throughout: autocast off)."""
    from seal_platform_libs.policy import lora as peft_lora
    from seal_platform_plugins.grpo.settings import LoRASettings

    model = tiny_causal_lm(architecture).to(device)
    adapters = LoRASettings(rank=4, alpha=8, target_modules=["all-linear"]) if lora else None
    if adapters is not None:
        model = peft_lora.wrap(model, adapters, gradient_checkpointing=options["gradient_checkpointing"])
    settings = GRPOSettings(kl_coef=0.05, micro_batch_size=3, mini_batch_tasks=1, zero_advantage="compute",
                            lora=adapters, autocast="off", **options)
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
    grads = capture_grads(trainer)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(device))
    batch = samples()
    return trainer.step(batch), grads, batch


# Every packable architecture, with full weights and with LoRA adapters on every linear layer ("all-linear").
CASES = [(a, lora) for a in TINY_ARCHITECTURES if a not in UNPACKABLE for lora in (False, True)]


@pytest.mark.parametrize("architecture,lora", CASES, ids=[f"{a}-{'lora' if lora else 'full'}" for a, lora in CASES])
def test_speed_ups_are_exact_on_each_architecture(architecture, lora):
    plain_metrics, plain_grads, plain = step(architecture, PLAIN, lora)
    assert len(plain_grads) == 2 and any(g.abs().sum() > 0 for g in plain_grads[0])  # one update per group
    for options in (FAST, FAST_PADDED):
        metrics, grads, fast = step(architecture, options, lora)
        for key in ("loss", "pg_loss", "kl", "grad_norm"):
            assert metrics[key] == pytest.approx(plain_metrics[key], rel=1e-4, abs=1e-7), key
        for plain_update, update in zip(plain_grads, grads):
            for a, b in zip(plain_update, update):
                assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)
        for a, b in zip(plain, fast):
            assert torch.allclose(a.old_logp, b.old_logp, atol=2e-5, rtol=1e-5), a.id
            assert torch.allclose(a.ref_logp, b.ref_logp, atol=2e-5, rtol=1e-5), a.id


# What refuses packing for each: attention computed outside transformers' interface (Falcon and StableLM compute
# their masks themselves, so a packed row's sequences would see each other: Falcon's log-probs moved by 0.075);
# the trainer's probe of its passes against the model's own forward (gpt-oss's masks, built without the position
# ids, ignore a packed row's sequences under eager: the step's log-probs were 0.119 nats off; Nemotron's decoder
# layers do not pass the row's boundaries on: 0.57); or layers with a state.
REFUSED = {
    "falcon": "FalconForCausalLM computes its attention outside",
    "stablelm": "StableLmForCausalLM computes its attention outside",
    "gpt_oss": "GptOssForCausalLM's log-probs through these passes differ from its own forward's",
    "nemotron": "NemotronForCausalLM's log-probs through these passes differ from its own forward's",
    "qwen3_5": r"Qwen3_5ForCausalLM has \['linear_attention'\] layers",
    "lfm2": r"Lfm2ForCausalLM has \['conv'\] layers",
}


@pytest.mark.parametrize("architecture", UNPACKABLE)
def test_packing_is_refused_where_it_cannot_be_exact(architecture):
    """Packed rows are refused when the trainer is built, with a reason; the padded step with the other
    speed-ups stays exact (where a model's cache cannot be repeated over the rows, as linear attention's and
    convolutions' cannot, its prompts are not shared but run in every row)."""
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    with pytest.raises(ValueError, match=REFUSED[architecture]):
        step(architecture, FAST)
    plain_metrics, plain_grads, plain = step(architecture, PLAIN)
    for options in (FAST_PADDED, dict(FAST, pack_sequences=False)):  # the second with gradient checkpointing
        metrics, grads, fast = step(architecture, options)
        assert metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=1e-4, abs=1e-7)
        for a, b in zip(plain_grads[0], grads[0]):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-3)
        for a, b in zip(plain, fast):
            assert torch.allclose(a.old_logp, b.old_logp, atol=2e-5, rtol=1e-5), a.id
    trainer = GRPOTrainer(tiny_causal_lm(architecture), GRPOSettings(kl_coef=0.0), pad_id=0)
    assert trainer._cache_repeats(trainer.model) is (architecture not in ("qwen3_5", "lfm2"))


def test_the_probe_measures_what_packing_would_cost():
    """The probe's gap on a model that packs exactly is float rounding; on one that cannot, far above the bound."""
    from seal_platform_libs.policy.packing import use_packed_sdpa
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    packed = GRPOSettings(kl_coef=0.0, pack_sequences=True, shared_prefix=True, logits_chunk_tokens=16)
    exact = GRPOTrainer(tiny_causal_lm("mistral"), packed, pad_id=0)
    assert exact.passes_gap(exact.model) < 1e-5
    unpacked = GRPOTrainer(tiny_causal_lm("nemotron"), GRPOSettings(kl_coef=0.0, pack_sequences=False), pad_id=0)
    unpacked.settings = packed  # what packing would give, had the trainer not refused it
    assert use_packed_sdpa(unpacked.model)
    assert unpacked.passes_gap(unpacked.model) > 0.1


@pytest.mark.parametrize("architecture", list(TINY_ARCHITECTURES))
def test_hf_engine_and_trainer_agree_on_each_architecture(tokenizer, architecture):
    """The log-probs the hf engine records while it samples (batched, left-padded, a repeated prompt prefilled
    once) are the trainer's for the same tokens, with the trainer's speed-ups on: what the importance ratio of
    the first update compares."""
    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.engines.hf import HFEngine
    from seal_platform_libs.policy.engines.settings import HFEngineSettings

    model = tiny_causal_lm(architecture)
    settings = GRPOSettings(kl_coef=0.0, pack_sequences=architecture not in UNPACKABLE, logits_chunk_tokens=16)
    trainer = GRPOTrainer(model, settings, pad_id=0)
    rng = random.Random(0)
    prompts = [[rng.randrange(3, ARCHITECTURE_SHAPE["vocab_size"]) for _ in range(n)] for n in (30, 12)]
    engine = HFEngine(model, tokenizer, HFEngineSettings(batch_wait_ms=50))
    try:
        generations = engine.generate_ids([*prompts, prompts[0]], SamplingParams(temperature=1.0, max_new_tokens=40,
                                                                                  seed=3))
    finally:
        engine.close()
    for prompt, generation in zip([*prompts, prompts[0]], generations):
        assert generation.token_ids
        n = len(prompt)
        sample = Sample(id="s", group="g", input_ids=prompt + generation.token_ids,
                        positions=list(range(n, n + len(generation.token_ids))), advantage=1.0)
        trainer.fill_logprobs(model, [sample], "old_logp")
        assert torch.allclose(sample.old_logp, torch.tensor(generation.logprobs), atol=1e-5), architecture


def test_lora_names_the_targets_an_architecture_lacks(caplog):
    """The default targets are Llama's names: on Phi-3 (fused q/k/v and gate/up projections) only two of them
    exist; the adapters go there and the log says which names matched nothing."""
    from seal_platform_libs.policy import lora
    from seal_platform_plugins.grpo.settings import LoRASettings

    with caplog.at_level("WARNING", logger="seal_platform_libs.policy.lora"):
        model = lora.wrap(tiny_causal_lm("phi3"), LoRASettings(rank=4))
    adapted = {name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, _ in model.named_parameters() if ".lora_A" in name}
    assert adapted == {"o_proj", "down_proj"}
    assert "['q_proj', 'k_proj', 'v_proj', 'gate_proj', 'up_proj'] match no module of Phi3ForCausalLM" in caplog.text
    with caplog.at_level("WARNING", logger="seal_platform_libs.policy.lora"):
        caplog.clear()
        lora.wrap(tiny_causal_lm("llama"), LoRASettings(rank=4))
    assert "match no module" not in caplog.text


def test_all_linear_lora_leaves_out_linear_layers_that_are_not_linear(caplog):
    """peft's "all-linear" would wrap Llama 4's expert router (an nn.Linear whose forward returns routing scores
    and logits), and the adapted model's forward then fails. The router is left out, and said so; every other
    linear layer gets adapters, and Falcon's linear subclasses (a plain output) keep theirs."""
    import torch

    from seal_platform_libs.policy import lora
    from seal_platform_plugins.grpo.settings import LoRASettings

    everything = LoRASettings(rank=4, target_modules=["all-linear"])
    model = tiny_causal_lm("llama4")
    linear = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"}
    with caplog.at_level("INFO", logger="seal_platform_libs.policy.lora"):
        wrapped = lora.wrap(model, everything)
    adapted = {name.removeprefix("base_model.model.").split(".lora_A")[0]
               for name, _ in wrapped.named_parameters() if ".lora_A" in name}
    routers = {name for name in linear if name.endswith("feed_forward.router")}
    assert routers and adapted == linear - routers
    assert "no adapters on 4 linear layer(s)" in caplog.text and "Llama4Router" in caplog.text
    assert wrapped(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.shape == (1, 4, ARCHITECTURE_SHAPE["vocab_size"])
    falcon = lora.wrap(tiny_causal_lm("falcon"), everything)
    assert sum(".lora_A" in name for name, _ in falcon.named_parameters()) == 16


@pytest.mark.parametrize("architecture", ["gemma2", "granite", "qwen2_window"])
def test_sharded_worker_equals_the_trainer_on_other_architectures(architecture, tokenizer, tmp_path):
    """The FSDP2 path (one gloo worker in this process, packed rows, gradient checkpointing, chunked log-probs
    through the architecture's output head) gives the single-process update on models with soft-capped or
    scaled logits and sliding windows."""
    dist = pytest.importorskip("torch.distributed")
    from seal_platform_libs.policy.loading import PolicySettings, load_policy
    from seal_platform_plugins.grpo.distributed import free_port
    from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions

    tiny_causal_lm(architecture).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    settings = GRPOSettings(kl_coef=0.01, mini_batch_tasks=1, micro_batch_size=2, lr=1e-3, adam_eps=1e-6,
                            logits_chunk_tokens=16)
    policy = PolicySettings(model=str(tmp_path), device="cpu", dtype="float32")
    model, _ = load_policy(policy)
    want = GRPOTrainer.with_reference(model, settings, pad_id=0).step(samples())
    sharded = settings.model_copy(update={"gradient_checkpointing": True, "pack_sequences": True})
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), WorkerOptions(grpo=sharded, policy=policy, pad_id=0,
                                                                          device="cpu"))
    try:
        got = worker.step(samples())
        weights = worker.full_state_dict()
    finally:
        worker.close()
    assert not dist.is_initialized()
    for key in ("loss", "pg_loss", "kl", "grad_norm", "trained_tokens"):
        assert got[key] == pytest.approx(want[key], abs=1e-4, rel=1e-5), key
    start = load_policy(policy)[0].state_dict()
    assert max(float((weights[k] - start[k]).abs().max()) for k in weights) > 1e-4  # the update moved them
    assert max(float((weights[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-5


def test_dropout_is_off_in_every_mode():
    """GPT-2's config has dropout 0.1 in four places; gradient checkpointing runs the policy in train mode,
    where it acted (log-probs moved by 0.12 against eval mode). The trainer switches it off, LoRA's own
    adapter dropout aside, which the settings refuse under gradient checkpointing instead."""
    from seal_platform_libs.policy import lora
    from seal_platform_libs.policy.dropout import train_mode_is_eval_mode
    from seal_platform_plugins.grpo.settings import LoRASettings

    model = tiny_causal_lm("gpt2")
    assert not train_mode_is_eval_mode(model, torch.device("cpu"))
    GRPOTrainer(model, GRPOSettings(kl_coef=0.0), pad_id=0)
    assert train_mode_is_eval_mode(model, torch.device("cpu")) and not model.training
    assert all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    skipping = tiny_causal_lm("opt", layerdrop=0.5)  # OPT skips each layer with this chance in train mode
    GRPOTrainer(skipping, GRPOSettings(kl_coef=0.0, gradient_checkpointing=True), pad_id=0)
    assert train_mode_is_eval_mode(skipping, torch.device("cpu"))
    adapters = LoRASettings(rank=4, dropout=0.2, target_modules=["all-linear"])
    with pytest.raises(ValueError, match="settings.grpo.lora.dropout: 0"):
        GRPOSettings(kl_coef=0.0, lora=adapters, gradient_checkpointing=True)
    wrapped = lora.wrap(tiny_causal_lm("llama"), adapters)
    GRPOTrainer(wrapped, GRPOSettings(kl_coef=0.0, lora=adapters), pad_id=0)  # eval mode throughout: allowed
    assert any(m.p == 0.2 for name, m in wrapped.named_modules() if name.endswith("lora_dropout.default"))
