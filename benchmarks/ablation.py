"""Ablation table: runs a list of recipes x seeds on one environment through the real run loop and prints
the held-out pass rate of each recipe (mean and spread over seeds) with its wall time.

    flock /tmp/seal-heavy.lock .venv/bin/python benchmarks/ablation.py --seeds 0 1 2
    .venv/bin/python benchmarks/ablation.py --table-only          # the table from the results file

The default recipe list is the smarthome ablation set (CPU-sized, embedded SmolLM2-135M-Instruct): vanilla
GRPO, SEAL, without environment adaptation, without reweighting, without the closed-loop update, random
labels, fixed label. Any recipes sharing one environment work (``--recipes seal vanilla-grpo ...`` on a GPU
machine). ``--set key=value`` applies the same override to every run.

Every finished run is appended to the results file (JSON lines) at once, and runs already in it are skipped,
so the work can be split over several invocations (``--max-runs``, or stop it any time) and the table
rebuilt from whatever is there. A run cut off half-way (its process killed: session end, SIGKILL, restart)
is resumed, not started again: training runs write a checkpoint every ``--checkpoint-every`` steps (default
1; the last and the best are kept), and the next invocation that claims (recipe, seed) resumes the newest
crashed or interrupted run of the same recipe and config (seed and overrides included) from its last durable
checkpoint, under the same run id. Its row holds the whole run's evaluations (from the store),
``resumed_from_step``, ``wall_parts_s`` (each part; a cut-off part is timed from its start to its last
heartbeat) with ``wall_s`` their sum, and ``load_at_resume`` (docs/ablation.md: what is exact). The
evaluation before training is the same for every run (greedy decoding, the same initial weights and held-out
tasks), so it is done once (``base model`` row) and the training runs only evaluate after their steps
(``evaluation.every`` of the recipes: a learning curve per run). Checkpoints are deleted after each run
unless ``--keep-checkpoints``.

The table gives, per recipe, the final held-out pass rate as the mean over seeds with a 95% bootstrap
interval (seeds resampled), the paired difference to vanilla GRPO (same seed, same held-out tasks) with its
interval, and the gain over the base model with its interval; ``--plot FILE`` draws the learning curves
(held-out pass rate against step, one line per recipe, a band over seeds). Each row of the results file also
keeps the run's per-label evidence from its store: label frequencies, the last A-Patch weights and the
interface revisions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import Any

DEFAULT_RECIPES = [
    "smarthome-vanilla-grpo",
    "smarthome-seal",
    "smarthome-no-env-adaptation",
    "smarthome-no-reweighting",
    "smarthome-static-weights",
    "smarthome-random-labels",
    "smarthome-fixed-label",
]
LABELS = {
    "vanilla-grpo": "vanilla GRPO",
    "seal": "SEAL",
    "no-env-adaptation": "w/o environment adaptation",
    "no-reweighting": "w/o reweighting",
    "static-weights": "w/o closed-loop update",
    "random-labels": "random labels (control)",
    "fixed-label": "fixed label (control)",
}
BASE = "base model"


def _is(recipe: str, suffix: str) -> bool:
    """Whether ``recipe`` is the recipe ``suffix`` names (``seal``: ``seal`` or ``smarthome-seal``)."""
    return recipe == suffix or recipe.endswith("-" + suffix)


def _label(recipe: str) -> str:
    for suffix, text in LABELS.items():
        if _is(recipe, suffix):
            return text
    return recipe


def run_one(recipe: str, overrides: list[str], runs_dir: Path, keep_checkpoints: bool) -> dict:
    """One run through the core's loop; returns its evaluations and wall time. A run of the same recipe and
    config (seed and overrides included) that an earlier invocation left unfinished with a durable checkpoint
    is resumed (same run id, from its last checkpoint) instead of started again from step 0."""
    from seal_platform.cli import load_recipe, plugin_host_for
    from seal_platform.config import raise_for
    from seal_platform.loop import Runner
    from seal_platform.planning import prepare
    from seal_platform.store import RunStore

    config, issues, path = load_recipe(recipe, [f"runs_dir={runs_dir}", *overrides])
    if config is None:
        raise_for(issues, str(path))
    host = plugin_host_for(config)
    plan = prepare(config, host, str(path))
    store = RunStore(config.store_url())
    load_before = os.getloadavg()[0]
    found = find_resumable(store, str(path), config.config_hash())
    if found is None:
        runner = Runner(plan, host, store, recipe=str(path))
        from_step, previous_wall = 0, None
    else:
        run, from_step = found
        previous_wall = previous_part_wall(store, run)
        print(f"   resuming run {run.id} ({run.status}) from step {from_step}, after its checkpoint of step "
              f"{from_step - 1}", flush=True)
        runner = Runner(plan, host, store, recipe=str(path), resume_run_id=run.id, takeover=True)
    # Written before the part runs, so that a later resume can time this part if it is cut off too.
    store.add_event(runner.run_id, PART_EVENT, f"ablation harness: from step {from_step} (load {load_before:.2f})",
                    {"from_step": from_step, "load": round(load_before, 2), "pid": os.getpid(),
                     "previous_part_wall_s": None if previous_wall is None else round(previous_wall, 1)})
    started = time.perf_counter()
    summary = runner.run()
    wall = time.perf_counter() - started
    if not keep_checkpoints:
        shutil.rmtree(summary.run_dir / "checkpoints", ignore_errors=True)
    from seal_platform.present.digest import load_digest

    digest = load_digest(store, summary.run_id)
    row = {"run_id": summary.run_id, "environment": config.environment, "steps": summary.steps_done,
           "interface_revision": summary.interface_revision,
           # From the store: the whole run's evaluations, those before a resume included.
           "evaluations": stored_evaluations(store, summary.run_id, config.environment),
           # evaluation.training_interface (--training-interface): the same points on the run's training
           # interface, where it differed from the pristine one.
           "training_interface_evaluations": stored_evaluations(store, summary.run_id,
                                                                f"{config.environment}@training"),
           "wall_s": round(wall, 1),
           # 1-minute load average when the run started and ended: wall times are only comparable when these are.
           "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
           "checkpoint_every": config.training.checkpoint_every,
           # The per-label evidence: what the diagnosers saw, what A-Patch made of it, what the interface became.
           "updates": digest.updates(), "train_rewards": [round(st.mean_reward, 4) for st in digest.steps],
           "dynamic_sampling": digest.dynamic_sampling(), "labels": digest.labels,
           "label_weights": digest.final_label_weights(),
           "revisions": [{"revision": r.revision, "step": r.step, "changes": r.changes, "driven_by": r.driven_by}
                         for r in digest.revisions]}
    parts = [e.data for e in store.events(summary.run_id) if e.kind == PART_EVENT]
    resumes = [p for p in parts if p.get("from_step")]
    if resumes:
        walls = [p["previous_part_wall_s"] for p in resumes]
        row.update(
            wall_s=round(sum(w or 0.0 for w in walls) + wall, 1), wall_parts_s=[*walls, round(wall, 1)],
            wall_s_is="the sum of the run's parts (wall_parts_s, in order); a part that was cut off is timed from "
                      "its start to its process's last heartbeat (or its end when interrupted), so up to 30 s of "
                      "each cut-off part is missing; the steps after its last checkpoint, done again, are counted "
                      "twice; null: not known",
            resumed_from_step=[p["from_step"] for p in resumes],
            load=[parts[0]["load"] if parts[0].get("from_step") == 0 else None, row["load"][1]],
            load_at_resume=[p["load"] for p in resumes])
    return row


PART_EVENT = "ablation_part"  # the store event each part of a run (its start, or a resume) begins with
RESUMABLE = ("crashed", "interrupted")  # a `running` row whose local process is gone reads `crashed`


def find_resumable(store: Any, recipe_path: str, config_hash: str) -> tuple[Any, int] | None:
    """The newest run of this recipe with this config (seed and overrides are in its hash) that was cut off
    (crashed, interrupted) after a durable checkpoint, and the step it resumes at; None: start a new run. The
    caller holds the (recipe, seed) claim, so no other invocation is running it."""
    from seal_platform.checkpoints import durable_checkpoints

    for run in store.list_runs():  # newest first
        if run.recipe != recipe_path or run.config_hash != config_hash or run.status not in RESUMABLE:
            continue
        durable = durable_checkpoints(store, run.id)
        if durable:
            return run, durable[-1].step + 1
    return None


def previous_part_wall(store: Any, run: Any) -> float | None:
    """Seconds the run's last part ran: from its start (its ``ablation_part`` event, else the run's start) to
    its end (interrupted) or its last heartbeat (killed: the heartbeat is written every 30 s)."""
    parts = [e for e in store.events(run.id) if e.kind == PART_EVENT]
    start = parts[-1].at if parts else run.started_at
    end = run.ended_at or run.heartbeat_at
    if start is None or end is None:
        return None
    utc = [t if t.tzinfo else t.replace(tzinfo=UTC) for t in (start, end)]
    return max(0.0, (utc[1] - utc[0]).total_seconds())


def stored_evaluations(store: Any, run_id: str, environment: str) -> dict[str, dict]:
    """The run's evaluations of its own environment, by step: the average over categories, the per-category
    pass rates and the number of tasks (as the loop's summary gives them, but for the whole run)."""
    by_step: dict[int, dict] = {}
    for e in store.evaluations(run_id):  # ordered by step, then category
        if e.benchmark == environment or (e.benchmark == "" and "@" not in environment):
            entry = by_step.setdefault(e.step, {"per_category": {}, "n_tasks": e.n_tasks})
            entry["per_category"][e.category] = e.pass_rate
    return {str(step): {"average": sum(r["per_category"].values()) / len(r["per_category"]), **r}
            for step, r in sorted(by_step.items())}


def _claim(runs_dir: Path, recipe: str, seed: int | None) -> bool:
    """Take (recipe, seed) for this invocation, so that two invocations at once never run the same one. A
    claim holds its owner's host and pid; a claim whose process is gone (killed, machine restarted) is taken
    over, so an interrupted ablation goes on where it stopped when started again."""
    claims = runs_dir / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    path = claims / f"{recipe.replace(' ', '_').replace(os.sep, '_')}.{seed}"
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            with path.open("x") as fh:
                fh.write(me)
            return True
        except FileExistsError:
            host, _, pid = path.read_text().partition(" ")
            if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
                return False
            path.unlink(missing_ok=True)  # its owner is gone; of two invocations racing here one wins the `x`
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def load_results(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The Student-t interval of the mean of ``values`` (for paired differences: the paired-t interval). With
    few seeds this is honest where a percentile bootstrap of the mean is too narrow; one value (or none)
    gives a degenerate interval."""
    from scipy import stats

    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0.0:
        return mean, mean
    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * sd / len(values) ** 0.5
    return mean - half, mean + half


def sign_flip_p(diffs: list[float]) -> float:
    """The exact two-sided sign-flip (randomisation) p-value of paired differences: the share of the 2^n
    sign assignments whose mean is at least as far from 0 as the observed one (no distribution assumed)."""
    import itertools

    if not diffs:
        return float("nan")
    observed = abs(statistics.fmean(diffs)) - 1e-12
    flips = list(itertools.product((1, -1), repeat=len(diffs)))
    extreme = sum(abs(statistics.fmean(d * s for d, s in zip(diffs, signs))) >= observed for signs in flips)
    return extreme / len(flips)


def min_detectable_effect(diffs: list[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean paired difference a two-sided paired t-test on this many seeds detects with
    ``power``, given the spread of the observed differences: (t_{1-a/2} + t_{power}) x sd / sqrt(n)."""
    from scipy import stats

    if len(diffs) < 2:
        return float("nan")
    df = len(diffs) - 1
    return (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * statistics.stdev(diffs) / len(diffs) ** 0.5


def paired_cell(diffs: list[float]) -> str:
    """``mean [paired-t 95% interval] p=<exact sign-flip p>`` of paired differences."""
    return f"{_fmt(statistics.fmean(diffs), t_interval(diffs), sign=True)} p={sign_flip_p(diffs):.3f}"


def final_evaluation(row: dict) -> dict:
    """A run's last evaluation (its ``average`` and ``per_category`` pass rates)."""
    return row["evaluations"][max(row["evaluations"], key=int)]


def final_average(row: dict) -> float:
    return final_evaluation(row)["average"]


def _fmt(mean: float, ci: tuple[float, float], sign: bool = False) -> str:
    f = "+.1f" if sign else ".1f"
    return f"{mean:{f}} [{ci[0]:{f}}, {ci[1]:{f}}]"


def table(rows: list[dict], recipes: list[str]) -> str:
    """Markdown table: final held-out pass rate per recipe (mean over seeds, 95% t interval), the paired
    difference to vanilla GRPO (paired-t 95% interval and exact sign-flip p), the gain over the base model,
    and the wall time."""
    out = ["| recipe | seeds | held-out pass rate % (mean [95% CI]) | per seed | vs vanilla GRPO, paired (points) "
           "| gain over base (points) | per category (mean) | wall time per run |",
           "|---|---|---|---|---|---|---|---|"]
    base_rows = [r for r in rows if r["recipe"] == BASE]
    base = final_average(base_rows[0]) if base_rows else None
    vanilla = next((r for r in recipes if _is(r, "vanilla-grpo")), None)
    by_seed = {(r["recipe"], r["seed"]): final_average(r) for r in rows if r["recipe"] != BASE}
    order = [BASE, *recipes] if base_rows else recipes
    for recipe in order:
        mine = sorted(
            (r for r in rows if r["recipe"] == recipe), key=lambda r: r["seed"] if r["seed"] is not None else -1
        )
        if not mine:
            continue
        finals = [final_evaluation(r) for r in mine]
        values = [f["average"] for f in finals]
        mean = statistics.fmean(values)
        paired = "-"
        if vanilla and recipe not in (BASE, vanilla):
            diffs = [by_seed[(recipe, r["seed"])] - by_seed[(vanilla, r["seed"])] for r in mine
                     if (vanilla, r["seed"]) in by_seed]
            if diffs:
                paired = f"{paired_cell(diffs)} (n={len(diffs)})"
        gain = "-"
        if base is not None and recipe != BASE:
            gains = [v - base for v in values]
            gain = _fmt(statistics.fmean(gains), t_interval(gains), sign=True)
        cats = sorted({c for f in finals for c in f["per_category"]})
        per_cat = ", ".join(f"{c} {statistics.fmean(f['per_category'].get(c, 0.0) for f in finals):.1f}" for c in cats)
        walls = [r["wall_s"] for r in mine]
        seeds = "-" if recipe == BASE else ",".join(str(r["seed"]) for r in mine)
        out.append(f"| {_label(recipe)} | {seeds} | {_fmt(mean, t_interval(values))} | "
                   f"{' / '.join(f'{v:.1f}' for v in values)} | {paired} | {gain} | {per_cat} | "
                   f"{statistics.fmean(walls):.0f} s (± {statistics.stdev(walls) if len(walls) > 1 else 0.0:.0f}) |")
    return "\n".join(out)


def _finals(rows: list[dict]) -> dict[tuple[str, int], dict]:
    """(recipe, seed) -> the training run's last evaluation."""
    return {(r["recipe"], r["seed"]): final_evaluation(r) for r in rows if r["recipe"] != BASE}


def _paired_cells(
    finals: dict[tuple[str, int], dict], recipe: str, other: str, keys: list[str]
) -> tuple[int, list[str]]:
    """``recipe`` minus ``other`` on the seeds both have, per key (``average`` or a category; a category
    missing from a row counts as 0): the number of seeds and one "mean [95% CI]" cell per key."""
    seeds = sorted(s for (r, s) in finals if r == recipe and (other, s) in finals)

    def value(key: str, final: dict) -> float:
        return final["average"] if key == "average" else final["per_category"].get(key, 0.0)

    cells = []
    for key in keys:
        diffs = [value(key, finals[(recipe, s)]) - value(key, finals[(other, s)]) for s in seeds]
        cells.append(paired_cell(diffs) if diffs else "-")
    return len(seeds), cells


def detectable_effects(rows: list[dict], recipes: list[str]) -> str:
    """One line per recipe paired with vanilla GRPO: the minimum detectable effect (80% power, two-sided 0.05)
    for the seeds used, from the spread of the observed paired differences."""
    vanilla = next((r for r in recipes if _is(r, "vanilla-grpo")), None)
    finals = _finals(rows)
    lines = []
    for recipe in recipes:
        if vanilla is None or recipe == vanilla:
            continue
        seeds = sorted(s for (r, s) in finals if r == recipe and (vanilla, s) in finals)
        diffs = [finals[(recipe, s)]["average"] - finals[(vanilla, s)]["average"] for s in seeds]
        if len(diffs) >= 2:
            lines.append(f"minimum detectable effect, {_label(recipe)} - vanilla GRPO with {len(diffs)} seeds: "
                         f"{min_detectable_effect(diffs):.1f} points (sd of the differences "
                         f"{statistics.stdev(diffs):.1f})")
    return "\n".join(lines)


def category_table(rows: list[dict], recipes: list[str]) -> str:
    """Markdown table: per recipe and held-out category, the paired difference of the final pass rate to
    vanilla GRPO (same seed; mean over the seeds both have, paired-t 95% interval, sign-flip p), so that a difference
    in the average can be traced to the kind of request it comes from."""
    vanilla = next((r for r in recipes if _is(r, "vanilla-grpo")), None)
    finals = _finals(rows)
    cats = sorted({c for f in finals.values() for c in f["per_category"]})
    out = ["| recipe | " + " | ".join(cats) + " |", "|---|" + "---|" * len(cats)]
    for recipe in recipes:
        if vanilla is None or recipe == vanilla:
            continue
        n, cells = _paired_cells(finals, recipe, vanilla, cats)
        if n:
            out.append(f"| {_label(recipe)} (n={n}) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def controls_table(rows: list[dict], recipes: list[str]) -> str:
    """Markdown table: each label control against SEAL (real labels), paired by seed: the difference of the
    final held-out pass rate, overall and per category (mean [paired-t 95% CI] sign-flip p); empty without both."""
    seal = next((r for r in recipes if _is(r, "seal")), None)
    finals = _finals(rows)
    cats = sorted({c for f in finals.values() for c in f["per_category"]})
    out = ["| control - SEAL | average | " + " | ".join(cats) + " |", "|---|---|" + "---|" * len(cats)]
    for control in (r for r in recipes if _is(r, "random-labels") or _is(r, "fixed-label")):
        n, cells = _paired_cells(finals, control, seal, ["average", *cats]) if seal else (0, [])
        if n:
            out.append(f"| {_label(control)} (n={n}) | " + " | ".join(cells) + " |")
    return "\n".join(out) if len(out) > 2 else ""


def plot_curves(rows: list[dict], recipes: list[str], path: Path) -> None:
    """Held-out pass rate against step, one line per recipe (mean over seeds), a band from the lowest to the
    highest seed; step 0 is the base model's evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base_rows = [r for r in rows if r["recipe"] == BASE]
    base = final_average(base_rows[0]) if base_rows else None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for recipe in recipes:
        mine = [r for r in rows if r["recipe"] == recipe]
        if not mine:
            continue
        steps = sorted({int(s) for r in mine for s in r["evaluations"]} | ({0} if base is not None else set()))
        means, lows, highs, xs = [], [], [], []
        for step in steps:
            vals = [base if step == 0 and base is not None and str(step) not in r["evaluations"]
                    else r["evaluations"].get(str(step), {}).get("average") for r in mine]
            vals = [v for v in vals if v is not None]
            if not vals:
                continue
            xs.append(step)
            means.append(statistics.fmean(vals))
            lows.append(min(vals))
            highs.append(max(vals))
        line, = ax.plot(xs, means, marker="o", label=f"{_label(recipe)} (n={len(mine)})")
        ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.12)
    ax.set(xlabel="training step", ylabel="held-out pass rate (%)", ylim=(0, 100),
           title="Learning curves (mean over seeds; band: lowest to highest seed)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override applied to every run (repeatable)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/ablation"))
    parser.add_argument("--results", type=Path, default=None, help="JSON lines (default: RUNS_DIR/results.jsonl)")
    parser.add_argument("--no-base", action="store_true", help="skip the once-only evaluation before training")
    parser.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    parser.add_argument("--budget-min", type=float, default=None,
                        help="start no new run once this many minutes have passed (to hand the machine on)")
    parser.add_argument("--keep-checkpoints", action="store_true")
    parser.add_argument("--checkpoint-every", type=int, default=1, metavar="N",
                        help="training runs write a checkpoint every N steps (keeping the last and the best), so "
                             "that a run cut off is resumed from there (default 1; 0: the recipe's own setting)")
    parser.add_argument("--training-interface", action="store_true",
                        help="also score every evaluation point on the run's training interface "
                             "(evaluation.training_interface): the train/eval interface gap, in the results")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--plot", type=Path, default=None, help="write the learning curves (PNG) here")
    args = parser.parse_args()
    if args.training_interface:
        args.overrides.append("evaluation.training_interface=true")
    results = args.results or args.runs_dir / "results.jsonl"
    rows = load_results(results)
    if not args.table_only:
        args.runs_dir.mkdir(parents=True, exist_ok=True)
        todo: list[tuple[str, int | None, list[str]]] = []
        if not args.no_base:
            # Before training, greedy: one evaluation stands for every recipe and seed.
            todo.append((BASE, None, ["training.steps=0", "evaluation.before_training=true"]))
        # Checkpoints change nothing a run computes (they only read the weights, optimizer and random states);
        # before --set, so that an override there wins.
        ckpt = ([f"training.checkpoint_every={args.checkpoint_every}", "training.keep_checkpoints=1"]
                if args.checkpoint_every > 0 else [])
        todo += [(r, s, [f"seed={s}", "evaluation.before_training=false"]) for s in args.seeds for r in args.recipes]
        # Seed by seed: an interrupted ablation leaves whole seeds (paired comparisons) rather than whole recipes.
        done = {(r["recipe"], r["seed"]) for r in rows}
        new, started = 0, time.perf_counter()
        for recipe, seed, extra in todo:
            if (recipe, seed) in done:
                continue
            if args.max_runs is not None and new >= args.max_runs:
                break
            if args.budget_min is not None and (time.perf_counter() - started) / 60 > args.budget_min:
                print(f"budget of {args.budget_min} minutes used: stopping; run again to go on", flush=True)
                break
            if not _claim(args.runs_dir, recipe, seed):
                continue
            source = args.recipes[1] if recipe == BASE and len(args.recipes) > 1 else args.recipes[0]
            print(f"== {recipe} seed {seed}", flush=True)
            row = run_one(source if recipe == BASE else recipe,
                          [*([] if recipe == BASE else ckpt), *args.overrides, *extra], args.runs_dir,
                          args.keep_checkpoints)
            row.update(recipe=recipe, seed=seed, overrides=args.overrides)
            final = final_evaluation(row)
            print(f"   held-out {final['average']:.1f}%  {final['per_category']}  wall {row['wall_s']:.0f}s",
                  flush=True)
            with results.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            rows.append(row)
            new += 1
    print(table(rows, args.recipes))
    print(detectable_effects(rows, args.recipes))
    print("\nPaired difference to vanilla GRPO per held-out category (points, mean [paired-t 95% CI], exact "
          "sign-flip p, over seeds):\n")
    print(category_table(rows, args.recipes))
    controls = controls_table(rows, args.recipes)
    if controls:
        print("\nThe label controls against SEAL's real labels, paired by seed (points, mean [95% CI]):\n")
        print(controls)
    from ablation_evidence import evidence_table  # benchmarks/ (the script's folder)

    print("\nPer-label evidence (means over each recipe's runs):\n")
    print(evidence_table([r for r in rows if r["recipe"] != BASE], args.recipes, _label))
    if args.plot:
        plot_curves(rows, args.recipes, args.plot)
        print(f"learning curves: {args.plot}")


if __name__ == "__main__":
    sys.exit(main())
