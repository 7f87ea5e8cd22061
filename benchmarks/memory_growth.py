"""Memory over long runs (run by hand, under the heavy-command lock; figures go to docs/reliability.md).

    .venv/bin/python benchmarks/memory_growth.py verify [--episodes 10000]
        Verifies BFCL transcripts (ground truth and truncated/perturbed variants of the multi-turn tasks, as
        `seal-platform verify` does: the environment's verify_record, tool workers in their own processes)
        and samples the resident set size (RSS) of this process and of the tool workers.

    .venv/bin/python benchmarks/memory_growth.py train [--steps 200]
        A tiny-model training run (benchmarks/kill_anywhere.py's recipe with more steps and checkpoints every
        50) in a child process; samples its RSS every 0.5 s together with the number of steps done.

    .venv/bin/python benchmarks/memory_growth.py runs [--runs 3] [--recipe smarthome-embedded] [KEY=VALUE ...]
        Consecutive short runs of a recipe in THIS process through the in-process API
        (``planning.plan_recipe`` + ``loop.run_plan``), as a notebook or a sweep script would: the RSS after
        each run (after gc and malloc_trim) must come back to within 300 MB of the first run's (the engine,
        policy and trainer are released at run end; issue 23, item 9).

Growth is reported from the end of a warm-up (the first 10% of the work: caches fill, the allocator settles)
to the end, and per 1,000 episodes / 100 steps.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def rss_kb(pid: int | None = None) -> int:
    with open(f"/proc/{pid or 'self'}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def verify(episodes: int) -> int:
    from seal_platform_plugins.bfcl.data import load_tasks
    from seal_platform_plugins.bfcl.environment import BfclEnvironment
    from seal_platform_plugins.bfcl.settings import BfclSettings

    tasks = [t for t in load_tasks(split="all") if t.category == "multi_turn_base"]
    rng = random.Random(0)
    env = BfclEnvironment(BfclSettings(executor_workers=2))

    def record(i: int) -> dict:
        task = tasks[i % len(tasks)]
        turns = [list(turn) for turn in task.payload["ground_truth"]]
        kind = rng.random()
        if kind < 0.3 and turns:
            turns = turns[: rng.randrange(len(turns))]  # unreached turns
        elif kind < 0.6:
            turns = [[c.replace("'", "\"", 1) if rng.random() < 0.5 else c for c in turn] for turn in turns]
        return {"task_id": task.id, "turns": turns}

    warmup = max(1, episodes // 10)
    samples = []
    started = time.monotonic()
    try:
        for i in range(episodes):
            env.verify_record(record(i))
            if i + 1 == warmup or (i + 1) % 1000 == 0 or i + 1 == episodes:
                workers = env.executor.worker_pids()
                samples.append((i + 1, rss_kb(), sum(rss_kb(p) for p in workers)))
                print(f"{i + 1:6d} episodes: main RSS {samples[-1][1] / 1024:7.1f} MiB, tool workers "
                      f"{samples[-1][2] / 1024:7.1f} MiB ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        env.close()
    (n0, main0, work0), (n1, main1, work1) = next(s for s in samples if s[0] == warmup), samples[-1]
    per_k = (main1 - main0) / max(1, (n1 - n0) / 1000)
    print(f"verify: {episodes} episodes; main process RSS grew {main1 - main0} kB from episode {n0} to {n1} "
          f"({per_k:.0f} kB per 1,000), tool workers {work1 - work0:+d} kB; peak main {max(s[1] for s in samples)} kB")
    return 0


def train(steps: int) -> int:
    sys.path.insert(0, str(ROOT))
    import kill_anywhere as ka  # noqa: PLC0415
    import yaml

    ka.STEPS = steps
    work = Path(tempfile.mkdtemp(prefix="memory-train-"))
    model = ka.make_tiny_model(work / "tiny-model")
    recipe = ka.write_recipe(work, model, 0)
    data = yaml.safe_load(recipe.read_text())
    data["training"]["checkpoint_every"] = 50
    data["evaluation"]["every"] = 50
    recipe.write_text(yaml.safe_dump(data))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "seal_platform", "run", "--quiet", str(recipe)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = work / "runs" / "store.sqlite"
    samples: list[tuple[float, int, int]] = []
    started = time.monotonic()
    while proc.poll() is None:
        done = 0
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    done = conn.execute("SELECT count(*) FROM steps").fetchone()[0]
            except sqlite3.Error:
                done = samples[-1][1] if samples else 0
        try:
            samples.append((time.monotonic() - started, done, rss_kb(proc.pid)))
        except FileNotFoundError:
            break
        time.sleep(0.5)
    if proc.returncode != 0:
        print(f"the run failed (exit {proc.returncode}); see {work}")
        return 1
    warm = next(s for s in samples if s[1] >= max(1, steps // 10))
    last = [s for s in samples if s[1] >= steps - 1] or samples[-1:]
    end = last[0]
    peak = max(s[2] for s in samples)
    for s in samples[:: max(1, len(samples) // 12)]:
        print(f"{s[0]:7.1f} s  {s[1]:4d} steps  RSS {s[2] / 1024:7.1f} MiB")
    per_100 = (end[2] - warm[2]) / max(1, (end[1] - warm[1]) / 100)
    print(f"train: {steps} steps in {samples[-1][0]:.0f} s; RSS {warm[2]} kB after step {warm[1]}, {end[2]} kB after "
          f"step {end[1]}: {end[2] - warm[2]:+d} kB ({per_100:+.0f} kB per 100 steps); peak {peak} kB")
    return 0


def runs(count: int, recipe: str, overrides: list[str]) -> int:
    import ctypes
    import gc

    from seal_platform.loop import run_plan
    from seal_platform.planning import plan_recipe

    work = Path(tempfile.mkdtemp(prefix="seal-rss-runs-"))
    base = ["training.steps=1", "training.tasks_per_step=2", "evaluation.before_training=false",
            "evaluation.every=0", "evaluation.max_tasks=4", f"runs_dir={work / 'runs'}"]
    after: list[int] = []
    print(f"before any run: RSS {rss_kb() / 1024:.0f} MiB")
    for i in range(count):
        started = time.monotonic()
        plan = plan_recipe(recipe, [*base, *overrides, f"seed={i}"])
        summary = run_plan(plan)
        del plan, summary
        gc.collect()
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        after.append(rss_kb())
        print(f"run {i + 1}: {time.monotonic() - started:.0f} s, RSS after it {after[-1] / 1024:.0f} MiB "
              f"({(after[-1] - after[0]) / 1024:+.0f} MiB vs run 1)", flush=True)
    worst = max(after) - after[0]
    print(f"runs: {count} runs of {recipe} in one process; RSS after run 1 {after[0] / 1024:.0f} MiB, after the "
          f"last {after[-1] / 1024:.0f} MiB; most above run 1: {worst / 1024:+.0f} MiB (bound: 300 MB)")
    return 0 if worst * 1024 <= 300e6 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("verify").add_argument("--episodes", type=int, default=10_000)
    sub.add_parser("train").add_argument("--steps", type=int, default=200)
    many = sub.add_parser("runs")
    many.add_argument("--runs", type=int, default=3)
    many.add_argument("--recipe", default="smarthome-embedded")
    many.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.mode == "runs":
        return runs(args.runs, args.recipe, args.overrides)
    return verify(args.episodes) if args.mode == "verify" else train(args.steps)


if __name__ == "__main__":
    sys.exit(main())
