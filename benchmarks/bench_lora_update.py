"""LoRA vs full fine-tuning: update throughput and memory of one GRPO step, same model, same fixed batch.

One mode per process, so that the process's peak resident memory (``/usr/bin/time -v``, "Maximum resident
set size", also printed here from getrusage) is that mode's alone::

    /usr/bin/time -v .venv/bin/python benchmarks/bench_lora_update.py --mode full
    /usr/bin/time -v .venv/bin/python benchmarks/bench_lora_update.py --mode lora --rank 16

The batch is bench_grpo_update.py's (chat-templated prompts, random completion tokens, fixed 0/1 rewards),
and so is the recipe: KL to the reference (k3, coef 0.001: full fine-tuning keeps a frozen copy of the
policy, LoRA the same model with its adapters off), old log-probs, ``--updates`` AdamW updates per step,
micro-batches of ``--micro`` sequences. tokens/s = (prompt + completion tokens) / wall seconds of a step,
median of ``--repeats`` steps after a warm-up step. The model is the embedded SmolLM2-135M-Instruct
(float32 on CPU) unless ``--model`` names a directory.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["lora", "full"], required=True)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--model", default=None, help="HF model directory; default: the embedded SmolLM2-135M")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from bench_grpo_update import make_batch

    from seal_platform_libs.policy import lora
    from seal_platform_libs.policy.loading import PolicySettings, load_policy
    from seal_platform_plugins.grpo.objective import group_advantages
    from seal_platform_plugins.grpo.samples import Sample
    from seal_platform_plugins.grpo.settings import GRPOSettings, LoRASettings
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    policy = PolicySettings(model=args.model) if args.model else PolicySettings()
    model, tokenizer = load_policy(policy)
    device = str(next(model.parameters()).device)
    lora_settings = LoRASettings(rank=args.rank, alpha=2.0 * args.rank) if args.mode == "lora" else None
    if lora_settings:
        model = lora.wrap(model, lora_settings, gradient_checkpointing=args.gradient_checkpointing)
    batch = make_batch(tokenizer, args.tasks, args.group, args.completion_tokens, seed=0)
    n = len(batch["prompts"])
    settings = GRPOSettings(
        kl_coef=0.001, mini_batch_tasks=max(1, args.tasks // args.updates), micro_batch_size=args.micro,
        max_tokens_per_micro_batch=None, lr=2e-4 if lora_settings else 2e-5, lora=lora_settings,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=tokenizer.pad_token_id or 0)
    groups = [str(i // batch["group"]) for i in range(n)]
    adv = group_advantages(batch["rewards"], groups)

    def samples() -> list[Sample]:
        return [Sample(id=str(i), group=groups[i], input_ids=p + c, positions=list(range(len(p), len(p) + len(c))),
                       advantage=adv[i]) for i, (p, c) in enumerate(zip(batch["prompts"], batch["completions"]))]

    tokens = sum(len(p) + len(c) for p, c in zip(batch["prompts"], batch["completions"]))
    rates = []
    for r in range(args.repeats + 1):
        t0 = time.perf_counter()
        metrics = trainer.step(samples())
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if r:
            rates.append(tokens / (time.perf_counter() - t0))
        assert metrics["updates"] == args.updates, metrics
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    opt_bytes = sum(t.numel() * t.element_size() for s in trainer.optimizer.state.values() for t in s.values()
                    if torch.is_tensor(t))
    push = lora.adapter_state_dict(model) if lora_settings else model.state_dict()
    seen: set[int] = set()
    push_bytes = 0
    for t in push.values():  # tied tensors once
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            push_bytes += t.numel() * t.element_size()
    result = {
        "mode": args.mode, "rank": args.rank if lora_settings else None, "device": device,
        "tokens_per_step": tokens, "tokens_per_s": statistics.median(rates), "rates": [round(x) for x in rates],
        "params": params, "trainable_params": trainable, "optimizer_state_mib": opt_bytes / 2**20,
        "weight_push_mib": push_bytes / 2**20,
        "reference": "adapters off (no copy)" if lora_settings else "frozen deep copy",
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if device.startswith("cuda"):
        result["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
