"""Step time of the overlapped loop (``rollout.overlap: true``) against the synchronous one, on the same work.

Both runs are the same recipe, seed and sizes (default: ``smarthome-embedded``, the embedded SmolLM2 on the
CPU smarthome environment), each in a process of its own; only ``rollout.overlap`` differs. So that every
step does the same work in both, dynamic sampling is off (each step collects ``tasks_per_step x group_size``
episodes) and ``grpo.zero_advantage`` is ``compute`` (each step makes its optimizer update even when a
group's rewards are all equal). ``grpo.max_staleness`` is set high enough to keep every overlapped rollout
(the synchronous run's are never stale) and the hf engine keeps its own copy of the weights (what overlap
needs) in both runs.

A step's time is the wall time from the end of the step before it to its own end (the first step: from the
start of training); the table shows the median over the steps after the first (the first step cannot
overlap anything), the summed stage times from the store (collect, optimize and, overlapped, the time the
update waited for the next step's rollouts) and the whole training time, side by side, with the ratio
overlapped / synchronous. The load average at the start is printed: run it on an idle machine.

    .venv/bin/python benchmarks/bench_overlap.py --steps 6
    .venv/bin/python benchmarks/bench_overlap.py --tiny --steps 3 --tasks-per-step 1 --group-size 2 \\
        --max-new-tokens 8     # a smoke check with a 2-layer random model (the numbers mean nothing)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _tiny_model(directory: Path) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer, saved as a model directory."""
    from seal_platform_libs.policy.testing import save_tiny_llama

    return save_tiny_llama(directory)


def _overrides(args: argparse.Namespace, runs_dir: Path, overlap: bool) -> list[str]:
    out = [f"runs_dir={runs_dir}", f"training.steps={args.steps}", f"training.tasks_per_step={args.tasks_per_step}",
           f"training.group_size={args.group_size}", "training.checkpoint_every=0", f"rollout.engine={args.engine}",
           f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.dynamic_sampling.enabled=false",
           "evaluation.before_training=false", "evaluation.every=0", "evaluation.max_tasks=1",
           f"evaluation.max_new_tokens={args.max_new_tokens}", "settings.grpo.zero_advantage=compute",
           "settings.grpo.max_staleness=100", "settings.engine.hf.share_model=false",
           f"rollout.overlap={'true' if overlap else 'false'}"]
    if args.model:
        out.append(f"settings.policy.model={args.model}")
    return out + list(args.override)


def _one(args: argparse.Namespace) -> dict:
    """One run (in this process): its step times and stage sums."""
    from seal_platform.loop import Progress, Runner
    from seal_platform.planning import plan_recipe
    from seal_platform.store import RunStore

    class Clock(Progress):
        def __init__(self) -> None:
            self.started = 0.0
            self.ends: list[float] = []

        def start(self, total_steps: int, first_step: int) -> None:
            self.started = time.perf_counter()

        def step_done(self, step: int, mean_reward: float, metrics: dict[str, float]) -> None:
            self.ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_recipe(args.recipe, _overrides(args, Path(tmp) / "runs", args.one == "overlap"))
        store = RunStore(plan.config.store_url())
        clock = Clock()
        runner = Runner(plan, plan.host, store, recipe=plan.source, progress=clock)
        runner.run()
        steps = store.steps(runner.run_id)
        times = [b - a for a, b in zip([clock.started, *clock.ends], clock.ends)]

        def total(stage: str) -> float:
            return round(sum(s.timings.get(stage, 0.0) for s in steps), 3)

        return {"mode": args.one, "step_s": [round(t, 3) for t in times],
                "median_step_s": round(statistics.median(times[1:] or times), 3),
                "train_s": round(clock.ends[-1] - clock.started, 3), "collect_s": total("collect"),
                "optimize_s": total("optimize"), "rollout_wait_s": total("rollout_wait"),
                "overlapped_steps": sum(1 for s in steps if s.metrics.get("rollouts_overlapped")),
                "stale_refused_frac": max((s.metrics.get("stale_refused_frac", 0.0) for s in steps), default=0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="smarthome-embedded")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--engine", default="vllm", help="rollout engine of both runs (vllm or hf)")
    parser.add_argument("--model", default=None, help="a model directory instead of the recipe's")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer random model: a quick check that it runs")
    parser.add_argument("--override", action="append", default=[], help="one more KEY=VALUE for both runs")
    parser.add_argument("--one", choices=["sync", "overlap"], help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(_one(args)), flush=True)
        return
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step overlaps nothing)")
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a for a in sys.argv[1:] if a != "--tiny"]
        if args.tiny:
            argv += ["--model", str(_tiny_model(Path(tmp) / "tiny")), "--override", "settings.grpo.train_layers=1"]
        results = {}
        for mode in ("sync", "overlap"):
            done = subprocess.run([sys.executable, __file__, *argv, "--one", mode], capture_output=True, text=True)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if done.returncode != 0 or line is None:
                sys.exit(f"the {mode} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
            results[mode] = json.loads(line.removeprefix("RESULT "))
    sync, over = results["sync"], results["overlap"]
    print(f"\n{args.recipe}, engine {args.engine}, {args.steps} steps of {args.tasks_per_step} x {args.group_size} "
          f"episodes, max_new_tokens {args.max_new_tokens}")
    print(f"{'':28}{'synchronous':>14}{'overlapped':>14}{'ratio':>9}")
    for key, label in (("median_step_s", "median step (s, steps 2+)"), ("train_s", "training (s)"),
                       ("collect_s", "collect, summed (s)"), ("optimize_s", "optimize, summed (s)"),
                       ("rollout_wait_s", "update waited (s)")):
        ratio = f"{over[key] / sync[key]:.2f}" if sync[key] else "-"
        print(f"{label:28}{sync[key]:>14.3f}{over[key]:>14.3f}{ratio:>9}")
    print(f"{'overlapped steps':28}{sync['overlapped_steps']:>14}{over['overlapped_steps']:>14}")
    print(json.dumps({"sync": sync, "overlap": over}))


if __name__ == "__main__":
    main()
