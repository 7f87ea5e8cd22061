"""Learning check: GRPO raises the embedded SmolLM2-135M-Instruct's pass rate on the seal-arithmetic
example environment (calculator tool calls), on a CPU, in minutes.

Drives the plugins' hooks directly (the grpo plugin's start_run / reweight / optimize and the arithmetic
plugin's collect / diagnose), as the core's run loop would, and measures the pass rate on held-out
questions before and after training: sampled at the rollout temperature (``--eval-samples`` per question)
and greedy (one per question).

    .venv/bin/pip install -e examples/seal-arithmetic --no-deps
    .venv/bin/python benchmarks/learning_check.py            # about 15 minutes on a 2-core CPU
    .venv/bin/python benchmarks/learning_check.py --lora-rank 16 --lr 2e-4   # LoRA (adapters only)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--mini-batch-tasks", type=int, default=8, help="8 = one on-policy update per step")
    parser.add_argument("--eval-questions", type=int, default=64)
    parser.add_argument("--eval-samples", type=int, default=4, help="sampled rollouts per held-out question")
    parser.add_argument("--greedy", action="store_true", help="also measure greedy pass rates (one per question)")
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--budget-min", type=float, default=17.0, help="stop training early to stay in budget")
    parser.add_argument(
        "--lora-rank", type=int, default=0, help="train LoRA adapters of this rank (0: full fine-tuning)"
    )
    parser.add_argument("--lora-alpha", type=float, default=None, help="LoRA alpha (default: 2 x rank)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    from seal_arithmetic import plugin as arith
    from seal_arithmetic.env import ArithmeticEnvironment, ArithmeticSettings

    from seal_platform.capability import CapabilityState
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.rollouts import NOTHING_IN_FLIGHT
    from seal_platform.stages import collect_with
    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.loading import PolicySettings
    from seal_platform_plugins.grpo import plugin as grpo
    from seal_platform_plugins.grpo.settings import APatchSettings, GRPOSettings, LoRASettings

    started = time.perf_counter()
    config = RunConfig(
        environment="arithmetic", seed=args.seed,
        stages={"reweight": "grpo", "optimize": "grpo"},
        rollout={"engine": args.engine, "temperature": 1.0, "max_new_tokens": 48},
        training={"tasks_per_step": args.tasks_per_step, "group_size": args.group_size},
    )
    arith_settings = ArithmeticSettings(n_eval=args.eval_questions)
    settings = {
        "arithmetic": arith_settings,
        "policy": PolicySettings(),
        "grpo": GRPOSettings(lr=args.lr, kl_coef=args.kl_coef, mini_batch_tasks=args.mini_batch_tasks,
                             micro_batch_size=8,
                             lora=LoRASettings(rank=args.lora_rank, alpha=args.lora_alpha or 2.0 * args.lora_rank)
                             if args.lora_rank else None),
        "apatch": APatchSettings(),
    }
    ctx = RunContext(config=config, run_id="learning-check", run_dir=Path(tempfile.mkdtemp()), settings=settings)
    grpo.start_run(ctx=ctx, resumed=False)
    spec = {s.name: s for s in grpo.register_rollout_engines()}[args.engine]
    engine = spec.factory(ctx)
    ctx.shared["engine"] = engine
    env = ArithmeticEnvironment(arith_settings)
    eval_tasks = env.tasks("eval")
    train_tasks = env.tasks("train")
    sampled = SamplingParams(temperature=1.0, max_new_tokens=48, stop=["</tool_call>"])
    greedy = SamplingParams(temperature=0.0, max_new_tokens=48, stop=["</tool_call>"])

    def measure(tag: str) -> dict:
        t0 = time.perf_counter()
        episodes = [(t, f"{tag}:{t.id}", j) for t in eval_tasks for j in range(args.eval_samples)]
        trajs = env.run_episodes(engine, episodes, env.pristine_interface(), sampled)
        g = []
        if args.greedy:
            g = env.run_episodes(
                engine, [(t, f"{tag}g:{t.id}", 0) for t in eval_tasks], env.pristine_interface(), greedy
            )
        res = {
            "sampled_pass": sum(t.success for t in trajs), "sampled_n": len(trajs),
            "greedy_pass": sum(t.success for t in g), "greedy_n": len(g), "seconds": time.perf_counter() - t0,
        }
        print(f"[{tag}] sampled {res['sampled_pass']}/{res['sampled_n']}  greedy {res['greedy_pass']}/{res['greedy_n']}"
              f"  ({res['seconds']:.0f}s)", flush=True)
        return res

    before = measure("before")
    state = CapabilityState()
    history = []
    interface = env.pristine_interface()
    step = 0
    for step in range(args.steps):
        if (time.perf_counter() - started) / 60 > args.budget_min - (before["seconds"] / 60) - 0.5:
            print(f"stopping after {step} steps to stay within {args.budget_min} minutes", flush=True)
            break
        t0 = time.perf_counter()
        lo = (step * args.tasks_per_step) % len(train_tasks)
        batch = train_tasks[lo : lo + args.tasks_per_step]
        trajs = collect_with(arith.collect, ctx=ctx, environment=env, engine=engine, tasks=batch,
                             interface=interface, group_size=args.group_size, step=step)
        t_collect = time.perf_counter() - t0
        labels = arith.diagnose(ctx=ctx, environment=env, trajectories=trajs, step=step)
        state.update(step, 0, trajs, labels)
        rw = grpo.reweight(ctx=ctx, trajectories=trajs, labels=labels, state=state, step=step)
        metrics = grpo.optimize(ctx=ctx, engine=engine, trajectories=trajs, weights=rw.trajectory_weights, step=step,
                                rollouts=NOTHING_IN_FLIGHT)
        reward = sum(t.reward for t in trajs) / len(trajs)
        row = {"step": step, "reward": reward, "collect_s": t_collect, **{k: metrics[k] for k in (
            "loss", "kl", "clip_frac", "grad_norm", "tokens_per_s", "update_s", "trained_sequences")}}
        history.append(row)
        print(
            f"step {step}: reward {reward:.3f} collect {t_collect:.0f}s update {metrics['update_s']:.0f}s "
            f"({metrics['trained_sequences']:.0f} seqs, {metrics['tokens_per_s']:.0f} tok/s) "
            f"loss {metrics['loss']:.4f} grad_norm {metrics['grad_norm']:.3f} label weights {rw.label_weights}",
            flush=True,
        )
    after = measure("after")
    total = time.perf_counter() - started
    result = {"before": before, "after": after, "steps": len(history), "history": history, "minutes": total / 60,
              "args": {k: str(v) for k, v in vars(args).items()}}
    print(json.dumps({k: result[k] for k in ("before", "after", "steps", "minutes")}, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    engine.close()


if __name__ == "__main__":
    main()
