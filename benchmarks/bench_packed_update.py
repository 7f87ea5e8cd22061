"""Packed against padded GRPO updates (``grpo.pack_sequences``) on a batch of mixed lengths, in one run.

The batch: ``--sequences`` rollouts in groups of ``--group`` (each group shares a ``--prompt-tokens`` prompt),
lengths drawn log-uniformly between ``--min-tokens`` and ``--max-tokens`` (issue 26: 200-5,000), each a
multi-turn episode after its prompt: 64 generated tokens (the loss tokens), then up to 200 tokens of tool
output, and so on. Both runs use the same recipe (KL 0.001 k3, one update per ``--tasks-per-update`` groups,
micro-batches of at most ``--micro`` sequences and ``--max-tokens-per-micro`` tokens - padded tokens for the
padded path, the sum of the lengths for the packed one) on a fresh copy of the model; tokens/s = the batch's
tokens / wall seconds of one step, median of ``--repeats`` steps after a warm-up step. Each path runs in a
process of its own and its peak resident memory is printed too. On CPU it also prints
the roofline of bench_grpo_update.py (the step's matrix-product FLOPs on the unpadded sequences against this
CPU's float32 matmul peak) and each path's fraction of it. The FLOPs are those of the passes a timed step
runs: forward + backward of every sequence, and the no-grad forwards of the KL reference (every sequence: after
the warm-up step the policy no longer equals the reference) and of the old log-probs (the mini-batches after
the first).

    .venv/bin/python benchmarks/bench_packed_update.py                   # SmolLM2-135M, 200-5,000 tokens
    .venv/bin/python benchmarks/bench_packed_update.py --sequences 4 --min-tokens 60 --max-tokens 400 --repeats 1
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 .venv/bin/python benchmarks/bench_packed_update.py
    .venv/bin/python benchmarks/bench_packed_update.py --seeds 0 1 2 3 4   # five batches: each, median, pooled
    python benchmarks/bench_packed_update.py --shape qwen2.5-1.5b --sequences 32 --micro 4   # on a GPU machine
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


PATHS = ("padded", "packed", "packed_unshared")


def make_mixed_batch(sequences: int, group: int, prompt_tokens: int, lo: int, hi: int, seed: int
                     ) -> list[tuple[str, list[int], list[int]]]:
    """(group, input ids, loss positions) per rollout: mixed lengths in [lo, hi], a shared prompt per group."""
    rng = random.Random(seed)
    out = []
    prompt: list[int] = []
    for i in range(sequences):
        if i % group == 0:
            prompt = [rng.randint(200, 20000) for _ in range(prompt_tokens)]
        n = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        ids = prompt[: min(prompt_tokens, n // 2)]
        positions: list[int] = []
        while len(ids) < n:
            start = len(ids)
            ids += [rng.randint(200, 20000) for _ in range(min(64, n - start))]
            positions += list(range(start, len(ids)))
            ids += [rng.randint(200, 20000) for _ in range(min(200, n - len(ids)))]
        out.append((str(i // group), ids, positions))
    return out


def allocator() -> str:
    """The C allocator the processes run with: what LD_PRELOAD puts first, else the C library's malloc. On the
    CPU it matters (docs/scaling.md, "Packed updates": glibc maps and faults in every tensor above 32 MiB anew)."""
    preload = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if "alloc" in p]
    return os.path.basename(preload[0]) if preload else "the C library's malloc"


def run(model_dir: str, batch, args, name: str) -> dict[str, float]:
    """One path (``padded``, ``packed`` or ``packed_unshared``: packed with ``grpo.shared_prefix`` off), timed."""
    import torch
    from transformers import AutoModelForCausalLM

    from seal_platform_plugins.grpo.samples import Sample
    from seal_platform_plugins.grpo.settings import GRPOSettings
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    pack, shared_prefix = name != "padded", name != "packed_unshared"
    if args.shape:  # random weights of a published shape (bench_gpu_step's), built here: nothing to load
        from bench_gpu_step import build_model

        torch.manual_seed(0)
        model = build_model(args.shape, "sdpa", args.device)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    model.eval()
    settings = GRPOSettings(
        kl_coef=0.001, lr=1e-6, mini_batch_tasks=args.tasks_per_update, micro_batch_size=args.micro,
        max_tokens_per_micro_batch=args.max_tokens_per_micro, pack_sequences=pack, shared_prefix=shared_prefix,
        gradient_checkpointing=args.gradient_checkpointing, zero_advantage="compute",
    )
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)

    def samples() -> list[Sample]:
        return [Sample(id=str(i), group=g, input_ids=ids, positions=pos, advantage=1.0 if i % 2 else -1.0)
                for i, (g, ids, pos) in enumerate(batch)]

    tokens = sum(len(ids) for _, ids, _ in batch)
    # Token slots the training passes run, counted on the policy's own calls during the warm-up step (the calls
    # with gradients: one per micro-batch, plus a padded micro-batch's shared-prompt pass): a packed row with each
    # group's prompt once, or padded rows at their longest length.
    slots: list[int] = []

    def count(module, args, kwargs) -> None:
        if torch.is_grad_enabled():
            slots.append(kwargs["input_ids"].numel())

    from bench_grpo_update import step_flops, step_no_grad_episodes

    episodes = [(ids, pos) for _, ids, pos in batch]
    rates, flops = [], []
    for r in range(args.repeats + 1):
        step_samples = samples()
        # The matrix-product work of this step, its no-grad passes included (KL reference, old log-probs).
        flops.append(step_flops(model.config, episodes, recompute_forward=args.gradient_checkpointing,
                                recompute_attention=False, no_grad=step_no_grad_episodes(trainer, step_samples)))
        hook = None if r else model.register_forward_pre_hook(count, with_kwargs=True)
        t0 = time.perf_counter()
        trainer.step(step_samples)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if hook is not None:
            hook.remove()
        if r:  # the first step warms up
            rates.append(tokens / dt)
    run_tokens = sum(slots)
    rate = statistics.median(rates)
    gpu = ""
    if args.device.startswith("cuda"):  # matrix-product FLOPs of the step over its time, against the bf16 peak
        from bench_gpu_step import PEAKS

        peak = next((v for k, v in PEAKS.items() if k in torch.cuda.get_device_name()), None)
        gpu = f"; peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
        if peak:
            gpu += (
                f", MFU {100 * statistics.median(flops[1:]) * rate / tokens / (peak * 1e12):.1f}% of {peak:.0f} TFLOP/s"
            )
    print(f"{name}: {rate:.1f} tokens/s (steps: {[round(x, 1) for x in rates]}); micro-batches run {run_tokens} "
          f"token slots for {tokens} tokens{gpu}", flush=True)
    return {f"{name}_tokens_per_s": rate, f"{name}_token_slots": float(run_tokens),
            f"{name}_step_flops": statistics.median(flops[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF model directory; default: the embedded SmolLM2-135M")
    parser.add_argument("--shape", default=None, help="instead of --model: random weights of one of "
                        "bench_gpu_step.py's shapes (e.g. qwen2.5-1.5b), for a GPU machine without model files")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=150)
    parser.add_argument("--min-tokens", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0, help="draws the batch's lengths and token ids (the "
                        "figures in docs/scaling.md: seed 0 unless they say otherwise)")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="run the whole comparison once per "
                        "seed (a batch each) and print every seed's figures, their median and range, and the ratio "
                        "pooled over the batches")
    parser.add_argument("--tasks-per-update", type=int, default=1)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--max-tokens-per-micro", type=int, default=8192)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--unshared", action="store_true", help="also run the packed path with grpo.shared_prefix "
                        "off (each sequence runs its own prompt), to measure what prefix sharing in the rows gives")
    parser.add_argument("--only", choices=PATHS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seeds:
        return over_seeds(args)

    import torch
    from bench_grpo_update import matmul_peak_gflops, step_flops
    from transformers import AutoConfig

    from seal_platform_libs.policy.loading import PolicySettings, model_dir

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = "" if args.shape else (args.model or str(model_dir(PolicySettings())))
    batch = make_mixed_batch(args.sequences, args.group, args.prompt_tokens, args.min_tokens, args.max_tokens,
                             seed=args.seed)
    tokens = sum(len(ids) for _, ids, _ in batch)
    if args.only:  # a child of the run below: one path, its figures as the last line
        print(json.dumps(run(path, batch, args, args.only)))
        return
    print(
        f"batch: {len(batch)} sequences of {sorted(len(ids) for _, ids, _ in batch)} tokens ({tokens} in all), "
        f"groups of {args.group} (seed {args.seed}); micro-batches <= {args.micro} sequences, "
        f"<= {args.max_tokens_per_micro} tokens; {args.device}; allocator: {allocator()}",
        flush=True,
    )
    results: dict[str, float] = {"tokens": float(tokens)}
    paths = PATHS if args.unshared else PATHS[:2]
    for name in paths:
        # Each path in a process of its own, so that each one's peak memory is its own (os.wait4's rusage).
        # (A child returns before --out is written: only this process writes it.)
        child = subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--only", name], stdout=subprocess.PIPE,
                                 text=True)
        assert child.stdout is not None
        lines = []
        for line in child.stdout:
            if not line.startswith("{"):
                print(line, end="", flush=True)
            lines.append(line)
        _, status, usage = os.wait4(child.pid, 0)
        if status != 0:
            sys.exit(f"the {name} path failed (wait status {status}); peak RSS {usage.ru_maxrss / 1e6:.1f} GB")
        results.update(json.loads(lines[-1]))
        results[f"{name}_peak_rss_gb"] = usage.ru_maxrss / 1e6  # kilobytes on Linux
        print(f"{name}: peak RSS {usage.ru_maxrss / 1e6:.2f} GB (its whole process: model, reference, optimizer)",
              flush=True)
    speedup = results["packed_tokens_per_s"] / results["padded_tokens_per_s"]
    results["packed_over_padded"] = speedup
    print(f"packed / padded: {speedup:.2f}x", flush=True)
    if args.unshared:
        results["packed_over_unshared"] = results["packed_tokens_per_s"] / results["packed_unshared_tokens_per_s"]
        print(f"packed / packed without prefix sharing: {results['packed_over_unshared']:.2f}x", flush=True)
    if args.device == "cpu":
        # Both paths run the same passes (the timed steps' training passes plus their no-grad forwards of the
        # KL reference and of the old log-probs): the same FLOPs, counted on the unpadded sequences.
        flops = results["packed_step_flops"]
        assert all(results[f"{name}_step_flops"] == flops for name in paths), results
        peak = matmul_peak_gflops()
        ceiling = peak * 1e9 * tokens / flops
        if args.shape:
            from bench_gpu_step import SHAPES
            from transformers import Qwen2Config

            config = Qwen2Config(**SHAPES[args.shape])
        else:
            config = AutoConfig.from_pretrained(path)
        training = step_flops(config, [(ids, pos) for _, ids, pos in batch],
                              recompute_forward=args.gradient_checkpointing, recompute_attention=False)
        results.update(matmul_peak_gflops=peak, ceiling_tokens_per_s=ceiling)
        parts = []
        for name in paths:
            frac = results[f"{name}_tokens_per_s"] / ceiling
            results[f"{name}_roofline_fraction"] = frac
            parts.append(f"{name} {100 * frac:.0f}%")
        print(f"roofline: {flops / tokens / 1e9:.2f} GFLOP of matrix products per token (unpadded, no prefix "
              f"sharing; {training / tokens / 1e9:.2f} of them forward + backward, the rest the no-grad forward "
              f"passes of the KL reference and old log-probs); float32 matmul peak {peak:.0f} GFLOPS -> at most "
              f"{ceiling:.0f} tokens/s; " + ", ".join(parts) + " of that ceiling", flush=True)
    print(json.dumps(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


def summarize(per_seed: dict[int, dict[str, float]]) -> dict[str, object]:
    """Print every seed's figures (the ``--out`` JSON of one run each), the median and range of packed / padded
    and the pooled ratio; return them."""
    paths = [p for p in PATHS if f"{p}_tokens_per_s" in next(iter(per_seed.values()))]
    print(f"=== {len(per_seed)} batches (seeds {', '.join(map(str, per_seed))}) ===")
    for seed, r in per_seed.items():
        fractions = ", ".join(f"{p} {100 * r[f'{p}_roofline_fraction']:.0f}%" for p in paths
                              if f"{p}_roofline_fraction" in r)
        print(f"seed {seed}: {int(r['tokens'])} tokens; " + ", ".join(
            f"{p} {r[f'{p}_tokens_per_s']:.1f} tokens/s" for p in paths)
            + f"; padded slots / tokens {r['padded_token_slots'] / r['tokens']:.2f}; packed / padded "
            f"{r['packed_over_padded']:.2f}x" + (f"; roofline: {fractions}" if fractions else ""))
    ratios = [r["packed_over_padded"] for r in per_seed.values()]
    pooled = {p: sum(r["tokens"] for r in per_seed.values())
              / sum(r["tokens"] / r[f"{p}_tokens_per_s"] for r in per_seed.values()) for p in paths}
    # The batches' spread: a percentile bootstrap of the geometric mean of the per-batch ratios (fixed seed).
    logs = [math.log(x) for x in ratios]
    rng = random.Random(0)
    means = [statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(10_000)]
    cuts = statistics.quantiles(means, n=40)  # 2.5%, 5%, ..., 97.5%
    geo, low, high = (math.exp(x) for x in (statistics.fmean(logs), cuts[0], cuts[-1]))
    print(f"packed / padded over the batches: median {statistics.median(ratios):.2f}x, range "
          f"{min(ratios):.2f}-{max(ratios):.2f}x, geometric mean {geo:.2f}x (95% bootstrap interval "
          f"{low:.2f}-{high:.2f}x); pooled (all tokens / all step seconds): "
          f"padded {pooled['padded']:.1f}, packed {pooled['packed']:.1f} tokens/s, "
          f"{pooled['packed'] / pooled['padded']:.2f}x", flush=True)
    return {"per_seed": per_seed, "pooled_tokens_per_s": pooled, "median_packed_over_padded": statistics.median(ratios),
            "geometric_mean_packed_over_padded": geo, "bootstrap_95": [low, high]}


def over_seeds(args: argparse.Namespace) -> None:
    """``--seeds``: this script once per seed, each in its own process (so each batch's figures are what a
    single run prints), then every seed's ratio, their median and range, and the pooled ratio: all batches'
    tokens over the summed step times of each path, as if the batches were one batch of their union."""
    import tempfile

    per_seed: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            print(f"=== seed {seed} ===", flush=True)
            out = Path(tmp) / f"{seed}.json"
            # This command line with the last word on each: no seeds to loop over (an empty --seeds), this seed
            # and this file.
            status = subprocess.call([sys.executable, __file__, *sys.argv[1:], "--seeds", "--seed", str(seed),
                                      "--out", str(out)])
            if status != 0:
                sys.exit(f"seed {seed} failed (exit status {status})")
            per_seed[seed] = json.loads(out.read_text())
    summary = summarize(per_seed)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
