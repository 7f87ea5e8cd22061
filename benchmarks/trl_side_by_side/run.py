"""The default run beside TRL's GRPOTrainer on the same tasks, model, prompts, check and hyperparameters.

    .venv/bin/python benchmarks/trl_side_by_side/run.py                 # seed 0, both trainers, 5 updates
    .venv/bin/python benchmarks/trl_side_by_side/run.py --seeds 0 1 2 --trainers trl
    .venv/bin/python benchmarks/trl_side_by_side/run.py --trainers trl --updates 1   # a smoke run of TRL's path

What it does (docs/trl-side-by-side.md):
1. make_venv.sh: TRL in its own virtualenv (~/.cache/seal-platform/trl-venv); trl is no dependency of this
   project.
2. The recipe's (smarthome-embedded) training split as prompts on the pristine interface, rendered with the
   embedded model's chat template (scoring.py), and the model: SmolLM2-135M-Instruct as plugins/grpo/policy.py
   converts and caches it.
3. Per seed: ``seal``: ``seal-platform run RECIPE seed=N training.steps=UPDATES`` (its own held-out
   evaluations before and after); ``trl``: trl_train.py in TRL's venv (rewards by this project's verifier
   through ``scoring.py serve``), then the trained folder evaluated by this project's evaluator:
   ``seal-platform run RECIPE training.steps=0 settings.policy.model=FOLDER`` (the run's evaluation before
   training: greedy, pristine interface, the recipe's 64 held-out tasks). Each under ``/usr/bin/time -v``:
   wall time and peak RSS.
4. Agreement: every trajectory each evaluation stored (and a seal run's training rollouts) re-scored from its
   task id and completion through the TRL side's reward path (the ``scoring.py serve`` subprocess).
5. The table (trainer, seed, updates, held-out before/after, wall time, peak RSS), also as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import scoring  # noqa: E402  (this folder's module, next to this script)

DEFAULT_VENV = Path(os.environ.get("SEAL_TRL_VENV", Path.home() / ".cache/seal-platform/trl-venv"))


def seal_cli() -> list[str]:
    return [sys.executable, "-m", "seal_platform"]


def timed(command: Sequence[str], log: Path) -> tuple[int, float, int | None]:
    """Run ``command`` under /usr/bin/time -v (output to ``log``): rc, wall seconds, peak RSS in KiB."""
    time_bin = Path("/usr/bin/time")
    full = [str(time_bin), "-v", *command] if time_bin.exists() else list(command)
    started = time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(full, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    wall = time.perf_counter() - started
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text(errors="replace"))
    return rc, wall, int(match.group(1)) if match else None


def run_summary(store: Path) -> dict[str, Any]:
    """The one run of ``store``, as ``seal-platform runs --json`` gives it."""
    out = subprocess.run([*seal_cli(), "runs", "--json", "--store", str(store)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    runs = json.loads(out)
    runs = runs.get("runs", runs) if isinstance(runs, dict) else runs
    if len(runs) != 1:
        raise RuntimeError(f"{store}: expected one run, found {len(runs)}")
    return runs[0]


def held_out(summary: dict[str, Any]) -> dict[int, float]:
    """Held-out pass rate (the mean of the categories' rates) by step."""
    points = next(iter(v for k, v in summary.get("evaluations", {}).items() if "@" not in k), [])
    return {int(p["step"]): float(p["pass_rate"]) for p in points}


class ServedScorer:
    """The TRL side's reward path, from this process: ``scoring.py serve`` in a subprocess."""

    def __init__(self, recipe: str, overrides: Sequence[str]):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "scoring.py"), "serve", recipe, *overrides],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)

    def __call__(self, setup: scoring.Setup, pairs: Sequence[tuple[str, str]]) -> list[float]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"pairs": [list(p) for p in pairs]}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return [float(r) for r in reply["rewards"]]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def agreement(setup: scoring.Setup, store: Path, scorer: ServedScorer) -> scoring.Agreement:
    from seal_platform.store import RunStore

    run_id = run_summary(store)["id"]
    trajectories = RunStore(f"sqlite:///{store}", read_only=True, migrate=False, create=False).trajectories(run_id)
    return scoring.rescore(setup, trajectories, score_fn=scorer)


def main() -> int:
    p = argparse.ArgumentParser(description="seal-platform's default run beside TRL's GRPOTrainer")
    p.add_argument("--recipe", default=scoring.DEFAULT_RECIPE)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--trainers", nargs="+", choices=["seal", "trl"], default=["seal", "trl"])
    p.add_argument("--updates", type=int, default=5, help="optimizer updates (TRL) / training steps (seal)")
    p.add_argument("--seal-override", action="append", default=[],
                   help="key=value for the seal run only (e.g. settings.grpo.mini_batch_tasks=18); repeatable")
    p.add_argument("--work", type=Path, default=Path("runs/trl-side-by-side"), help="stores, models, logs")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = p.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    setup = scoring.load_setup(args.recipe)
    from seal_platform_libs.policy.loading import PolicySettings, model_dir

    model = model_dir(PolicySettings.model_validate(setup.config.settings.get("policy", {})))
    dataset = work / "train.jsonl"
    n = scoring.write_dataset(setup, model, dataset)
    print(f"{args.recipe}: {n} training prompts, {len(setup.eval_ids)} held-out tasks, model {model}", flush=True)
    if "trl" in args.trainers:
        subprocess.run([str(HERE / "make_venv.sh"), str(args.venv)], check=True)

    scorer = ServedScorer(args.recipe, [])
    rows, checks = [], []
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base_eval: float | None = None
    for seed in args.seeds:
        for trainer in args.trainers:
            tag = f"{stamp}-{trainer}-seed{seed}"
            row: dict[str, Any] = {"trainer": trainer, "seed": seed}
            if trainer == "seal":
                store = work / f"{tag}.sqlite"
                rc, wall, rss = timed(
                    [
                        *seal_cli(),
                        "run",
                        args.recipe,
                        f"seed={seed}",
                        f"training.steps={args.updates}",
                        *args.seal_override,
                        f"runs_dir={work / 'runs'}",
                        "--store",
                        str(store),
                        "--quiet",
                        "--no-report",
                    ],
                    work / f"{tag}.log",
                )
                summary = run_summary(store)
                curve = held_out(summary)
                row.update(
                    rc=rc,
                    updates=summary.get("updates"),
                    before=curve.get(0),
                    after=curve[max(curve)] if curve else None,
                    wall_s=round(wall, 1),
                    peak_rss_kib=rss,
                )
                base_eval = base_eval if base_eval is not None else curve.get(0)
                checks.append((tag, agreement(setup, store, scorer)))
            else:
                out = work / tag
                rc, wall, rss = timed(
                    [
                        str(args.venv / "bin/python"),
                        str(HERE / "trl_train.py"),
                        "--model",
                        str(model),
                        "--dataset",
                        str(dataset),
                        "--out",
                        str(out),
                        "--seed",
                        str(seed),
                        "--updates",
                        str(args.updates),
                        "--scorer",
                        json.dumps([sys.executable, str(HERE / "scoring.py"), "serve", args.recipe]),
                    ],
                    work / f"{tag}.log",
                )
                metrics = json.loads((out / "metrics.json").read_text()) if rc == 0 else {}
                row.update(rc=rc, updates=metrics.get("updates"), wall_s=round(wall, 1), peak_rss_kib=rss,
                           train_reward_per_update=metrics.get("train_reward_per_update"))
                if rc == 0:
                    if base_eval is None:
                        base_eval = evaluate(args.recipe, model, work, f"{stamp}-base", setup, scorer, checks)
                    row["before"] = base_eval
                    row["after"] = evaluate(args.recipe, out / "model", work, f"{tag}-eval", setup, scorer, checks)
            rows.append(row)
            print(json.dumps(row), flush=True)
    scorer.close()
    with (work / "results.jsonl").open("a") as f:
        for row in rows:
            f.write(json.dumps({"recipe": args.recipe, **row}) + "\n")
    print_table(rows, checks)
    return 0 if all(r["rc"] == 0 for r in rows) and all(a.agreed == a.checked for _, a in checks) else 1


def evaluate(recipe: str, folder: Path, work: Path, tag: str, setup: scoring.Setup, scorer: ServedScorer,
             checks: list) -> float | None:
    """This project's held-out evaluation of a model folder: a run of no training steps, evaluated before it."""
    store = work / f"{tag}.sqlite"
    rc, _, _ = timed([*seal_cli(), "run", recipe, "training.steps=0", "evaluation.before_training=true",
                      f"settings.policy.model={folder}", f"runs_dir={work / 'runs'}", "--store", str(store),
                      "--quiet", "--no-report"], work / f"{tag}.log")
    if rc != 0:
        print(f"evaluation of {folder} failed (rc {rc}): see {work / f'{tag}.log'}", flush=True)
        return None
    checks.append((tag, agreement(setup, store, scorer)))
    return held_out(run_summary(store)).get(0)


def print_table(rows: list[dict[str, Any]], checks: list) -> None:
    def pct(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}%"

    print(
        f"\n{'trainer':8} {'seed':>4} {'updates':>7} {'held-out before':>15} {'after':>7} {'wall':>9} {'peak RSS':>9}"
    )
    for r in rows:
        wall = f"{int(r['wall_s'] // 60)}:{r['wall_s'] % 60:04.1f}"
        rss = "-" if r.get("peak_rss_kib") is None else f"{r['peak_rss_kib'] * 1024 / 1e9:.2f} GB"
        print(f"{r['trainer']:8} {r['seed']:>4} {str(r.get('updates')):>7} {pct(r.get('before')):>15} "
              f"{pct(r.get('after')):>7} {wall:>9} {rss:>9}" + ("" if r["rc"] == 0 else f"  (rc {r['rc']})"))
    for tag, a in checks:
        print(f"{tag}: {a.line()}")
        for line in a.disagreements[:5]:
            print(f"  {line}")


if __name__ == "__main__":
    sys.exit(main())
