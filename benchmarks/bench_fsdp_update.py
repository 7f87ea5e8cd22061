"""GRPO update throughput with 1 vs N FSDP2 workers (``grpo.train_workers``) on this machine.

A random-weight model of a chosen shape (built from its config: nothing is downloaded; every worker builds
the same one from the same seed); for each worker count, a
:class:`~seal_platform_plugins.grpo.distributed.LocalTrainerGroup` (gloo on CPU, NCCL on CUDA) runs one warm-up step and
``--steps`` timed steps on the same random batch, and the single-process
:class:`~seal_platform_plugins.grpo.trainer.GRPOTrainer` runs it too as the baseline. Tokens/s = tokens of all sequences
trained (prompt + completion) / the update's wall time, as the trainer's ``tokens_per_s`` metric counts them. Each
worker process uses cpu_count / N torch threads.

    python benchmarks/bench_fsdp_update.py                          # SmolLM2-135M shape, 1 and 2 workers
    python benchmarks/bench_fsdp_update.py --workers 1 2 4 --shape tiny

Run it alone (``flock /tmp/seal-heavy.lock ...``) and state the load (``uptime``) with the figures.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

SHAPES = {
    # SmolLM2-135M(-Instruct)'s config.json values (the embedded model's shape).
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=49152, max_position_embeddings=4096, tie_word_embeddings=True),
}


def build_model(shape: str):
    """A float32 Llama of ``shape`` with random weights (module level: spawned workers build it from this)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    return AutoModelForCausalLM.from_config(LlamaConfig(**SHAPES[shape]), dtype=torch.float32)


def make_batch(args, vocab: int):
    import torch

    from seal_platform_plugins.grpo.objective import group_advantages
    from seal_platform_plugins.grpo.samples import Sample

    gen = torch.Generator().manual_seed(0)
    n = args.tasks * args.group
    rewards = [float(i % 2) for i in range(n)]  # every group has both outcomes: no zero advantages
    groups = [str(i // args.group) for i in range(n)]
    adv = group_advantages(rewards, groups)
    prompts = [torch.randint(0, vocab, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.tasks)]
    out = []
    for i in range(n):
        completion = torch.randint(0, vocab, (args.completion_tokens,), generator=gen).tolist()
        p = prompts[i // args.group]
        out.append(Sample(id=str(i), group=groups[i], input_ids=p + completion,
                          positions=list(range(len(p), len(p) + len(completion))), advantage=adv[i]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=192)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--mini-batch-tasks", type=int, default=2)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    parser.add_argument("--no-baseline", action="store_true", help="skip the single-process trainer")
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig

    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_plugins.grpo.distributed import LocalTrainerGroup
    from seal_platform_plugins.grpo.settings import GRPOSettings
    from seal_platform_plugins.grpo.sharded import WorkerOptions
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    config = LlamaConfig(**SHAPES[args.shape])
    # Prefix sharing off everywhere: the sharded path has none, so the baseline computes the same tokens.
    settings = GRPOSettings(kl_coef=args.kl_coef, mini_batch_tasks=args.mini_batch_tasks, micro_batch_size=args.micro,
                            max_tokens_per_micro_batch=None, shared_prefix=False, lr=1e-6)
    torch.manual_seed(0)
    model = build_model(args.shape)
    n_params = sum(p.numel() for p in model.parameters())
    n_seq = args.tasks * args.group
    print(f"{args.shape}: {n_params / 1e6:.1f} M parameters; {n_seq} sequences x "
          f"{args.prompt_tokens + args.completion_tokens} tokens, {args.tasks // args.mini_batch_tasks} updates/step, "
          f"micro-batch {args.micro}, kl_coef {args.kl_coef}; {torch.get_num_threads()} torch threads here",
          flush=True)
    results: dict[str, list[float]] = {}

    def report(name: str, step: int, metrics: dict) -> None:
        tag = " (warm-up)" if step == 0 else ""
        print(f"{name} step {step}{tag}: {metrics['update_s']:.2f} s, {metrics['tokens_per_s']:,.0f} tokens/s, "
              f"loss {metrics['loss']:.6f}, grad_norm {metrics['grad_norm']:.6f}", flush=True)
        if step:
            results.setdefault(name, []).append(metrics["tokens_per_s"])

    if not args.no_baseline:
        model.eval()
        trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
        for step in range(args.steps + 1):
            report("single-process", step, trainer.step(make_batch(args, config.vocab_size)))
    del model
    for n in args.workers:
        started = time.perf_counter()
        options = WorkerOptions(grpo=settings, policy=PolicySettings(), pad_id=0, device="cpu",
                                build_model=functools.partial(build_model, args.shape))
        with LocalTrainerGroup(n, options) as group:
            print(f"{n} FSDP worker(s) up in {time.perf_counter() - started:.1f} s", flush=True)
            for step in range(args.steps + 1):
                report(f"fsdp x{n}", step, group.step(make_batch(args, config.vocab_size)))
    print("summary (median of timed steps):")
    for name, values in results.items():
        print(f"  {name:>16}: {statistics.median(values):,.0f} tokens/s")


if __name__ == "__main__":
    main()
