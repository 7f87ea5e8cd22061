"""One GRPO step on a randomly initialised model of Qwen2.5-1.5B's shape: tokens/s and MFU.

Meant for a CUDA machine (bf16 autocast over float32 master weights - the trainer's default on CUDA - and
flash-attn when installed, else PyTorch SDPA). Nothing is downloaded: the model is built from its config
with random weights, and the batch is random tokens, so it measures the update's speed only.

    python benchmarks/bench_gpu_step.py                       # Qwen2.5-1.5B shape, 8 tasks x 8 rollouts
    python benchmarks/bench_gpu_step.py --shape tiny --device cpu --tasks 1 --group 2   # a CPU smoke run
    python benchmarks/bench_gpu_step.py --fsdp                # the same step as a 1-process FSDP2 worker
    python benchmarks/bench_gpu_step.py --fsdp --shape tiny --device cpu --tasks 1 --group 2 --steps 1

With ``--fsdp`` the update runs in a :class:`~seal_platform_plugins.grpo.sharded.TrainerWorker` of world
size 1 (``fully_shard`` per block and root; on CUDA ``MixedPrecisionPolicy(bf16 params, fp32 reduce)`` instead
of autocast; NCCL on CUDA, gloo on CPU; prefix sharing off) - the code path of ``grpo.train_workers`` > 1.

MFU = model FLOPs / (seconds x peak), model FLOPs = 6 N per token trained (forward + backward) + 2 N per
token of each no-grad pass (old and reference log-probs), N = parameter count, attention FLOPs left out
(a lower bound). Prefix sharing is off by default so every token is computed as counted.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import time

SHAPES = {
    # Qwen2.5-1.5B(-Instruct) config.json values.
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True),
}
# Dense bf16 peak TFLOP/s by device name fragment.
PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "4090": 165.0}


def build_model(shape: str, attn: str, device: str = "cpu"):
    """A float32 model of ``shape`` with random weights, built on ``device`` (on a GPU its random initialisation
    takes a second where the CPU takes about half a minute at 1.5B; module level: a worker builds it from this)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    with torch.device(device):
        return AutoModelForCausalLM.from_config(Qwen2Config(**SHAPES[shape]), dtype=torch.float32,
                                                attn_implementation=attn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--completion-tokens", type=int, default=512)
    parser.add_argument("--updates", type=int, default=4, help="optimizer updates per step (mini-batches)")
    parser.add_argument("--micro", type=int, default=4, help="sequences per forward/backward")
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--shared-prefix", action="store_true")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--peak-tflops", type=float, default=None, help="override the device's bf16 peak")
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    parser.add_argument("--fsdp", action="store_true", help="run the update as a 1-process FSDP2 worker")
    args = parser.parse_args()

    import torch
    from transformers import Qwen2Config

    from seal_platform_plugins.grpo.objective import group_advantages
    from seal_platform_plugins.grpo.samples import Sample
    from seal_platform_plugins.grpo.settings import GRPOSettings
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    attn = "flash_attention_2" if device == "cuda" and importlib.util.find_spec("flash_attn") else "sdpa"
    config = Qwen2Config(**SHAPES[args.shape])
    settings = GRPOSettings(
        kl_coef=args.kl_coef, mini_batch_tasks=max(1, args.tasks // args.updates), micro_batch_size=args.micro,
        max_tokens_per_micro_batch=None, shared_prefix=args.shared_prefix and not args.fsdp,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    if args.fsdp:
        from seal_platform_libs.policy.loading import PolicySettings
        from seal_platform_plugins.grpo.distributed import free_port
        from seal_platform_plugins.grpo.sharded import TrainerWorker, WorkerOptions

        options = WorkerOptions(grpo=settings, policy=PolicySettings(), pad_id=0, device=device,
                                build_model=functools.partial(build_model, args.shape, attn, device))
        worker = TrainerWorker(0, 1, "127.0.0.1", free_port(), options)
        trainer = worker.trainer
        model = worker.model
        attn += " (FSDP2, 1 process)"
    else:
        torch.manual_seed(0)
        model = build_model(args.shape, attn, device)
        model.eval()
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    rewards = [float(torch.rand((), generator=gen) < 0.5) for _ in range(args.tasks * args.group)]
    groups = [str(i // args.group) for i in range(len(rewards))]
    adv = group_advantages(rewards, groups)
    prompts = [
        torch.randint(0, config.vocab_size, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.tasks)
    ]

    def batch() -> list[Sample]:
        out = []
        for i in range(len(rewards)):
            completion = torch.randint(0, config.vocab_size, (args.completion_tokens,), generator=gen).tolist()
            p = prompts[i // args.group]
            out.append(Sample(id=str(i), group=groups[i], input_ids=p + completion,
                              positions=list(range(len(p), len(p) + len(completion))), advantage=adv[i]))
        return out

    seq_tokens = args.prompt_tokens + args.completion_tokens
    n_seq = len(rewards)
    per_update = n_seq // max(1, len(trainer.mini_batches(batch())))
    # Trained: every sequence once; no-grad: old log-probs for all but the first mini-batch, reference for all.
    flops = 6 * n_params * n_seq * seq_tokens + 2 * n_params * (n_seq - per_update) * seq_tokens
    if args.kl_coef > 0:
        flops += 2 * n_params * n_seq * seq_tokens
    peak = args.peak_tflops
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    if peak is None:
        peak = next((v for k, v in PEAKS.items() if k in name), None)
    print(f"{args.shape}: {n_params / 1e9:.3f} B parameters, attention {attn}, device {name}; "
          f"{n_seq} sequences x {seq_tokens} tokens, {args.updates} updates/step, micro-batch {args.micro}")
    for step in range(args.steps + 1):
        samples = batch()
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        metrics = trainer.step(samples)
        if device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        tokens_s = n_seq * seq_tokens / dt
        line = (f"step {step}{' (warm-up)' if step == 0 else ''}: {dt:.2f} s, {tokens_s:,.0f} tokens/s, "
                f"loss {metrics['loss']:.4f}")
        if peak:
            line += f", MFU {100 * flops / dt / (peak * 1e12):.1f}% of {peak:.0f} TFLOP/s"
        if device == "cuda":
            line += f", peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
        print(line, flush=True)
    if args.fsdp:
        worker.close()


if __name__ == "__main__":
    main()
