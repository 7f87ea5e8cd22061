"""Kill-anywhere: SIGKILL a tiny-model training run at moments spread over its stages, resume it each time,
and compare the finished store and final weights with an uninterrupted run of the same recipe and seed.

The run: the seal-arithmetic environment (rollouts, diagnosis, A-Patch reweighting, a GRPO update with an
entropy bonus so every update moves the weights), the Hugging Face engine, a 2-layer random Llama with the
SmolLM2 tokenizer, a checkpoint after every step and an evaluation every 2 steps. Each attempt is a forked
child of this (pre-imported) process running ``seal-platform run`` / ``run --resume``; it writes a progress
mark (with its CLOCK_MONOTONIC time) as it enters each stage. One torch thread (OMP_NUM_THREADS=1), so the
arithmetic is reproducible.

Where the kills go (random times over the whole run put three quarters of them in start-up): the
uninterrupted run's marks give each stage's length; each kill is aimed at the target stage (start-up,
rollout, update, store write, checkpoint write, evaluation) with the fewest kills landed so far, at a random
one of its next two occurrences in the attempt, a uniformly random time into it. A kill *lands* where the
attempt's last mark says it was, which is what is counted (a short stage is sometimes over before the
kill). It goes on until ``--kills`` kills have landed, at least ``--per-stage`` in every target stage, and at
least one kill left a partial checkpoint directory (which the next resume must remove).

    .venv/bin/python benchmarks/kill_anywhere.py --kills 24 --per-stage 3 [--model DIR] [--json out.json]

Prints one line per kill (aimed at, landed in, what the store held afterwards), the per-stage counts and the
comparison; exits 1 on any difference. tests/grpo/test_kill_anywhere.py runs it (slow).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

STEPS = 6

_MAKE_TINY = """
import sys
from seal_platform_libs.policy.testing import save_tiny_llama
save_tiny_llama(sys.argv[1], hidden_size=64, intermediate_size=128, max_position_embeddings=2048)
"""


def make_tiny_model(directory: Path) -> Path:
    """A tiny random Llama saved as a Hugging Face directory (in a separate process: this one forks later
    and must not have run torch ops)."""
    if not (directory / "config.json").is_file():
        subprocess.run([sys.executable, "-c", _MAKE_TINY, str(directory)], check=True)
    return directory


def write_recipe(root: Path, model: Path, seed: int) -> Path:
    recipe = {
        "name": "kill-anywhere",
        "seed": seed,
        "environment": "arithmetic",
        "runs_dir": str(root / "runs"),
        "store": f"sqlite:///{root / 'runs' / 'store.sqlite'}",
        "training": {"steps": STEPS, "tasks_per_step": 2, "group_size": 2, "checkpoint_every": 1},
        "rollout": {"engine": "hf", "temperature": 1.0, "max_new_tokens": 6, "workers": 1},
        "evaluation": {"every": 2, "max_tasks": 4, "max_new_tokens": 4},
        "diagnosis": {"primary": "arithmetic", "diagnosers": ["arithmetic"]},
        "stages": {"reweight": "grpo", "optimize": "grpo"},
        "settings": {
            "policy": {"model": str(model), "device": "cpu", "dtype": "float32"},
            "grpo": {"lr": 1e-3, "kl_coef": 0.0, "entropy_coef": 0.05, "mini_batch_tasks": 2, "micro_batch_size": 4},
            "arithmetic": {"n_train": 12, "n_eval": 4, "max_new_tokens": 6, "worked_examples": 0},
        },
    }
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _instrument(fd: int) -> None:
    """Report where the attempt is (behaviour unchanged): each stage the loop announces, store writes and
    checkpoint writes, each as one line ``<time.monotonic()> <what>`` on ``fd`` (CLOCK_MONOTONIC is the same
    clock in the parent, so the parent can time a kill from the moment a stage began)."""
    from seal_platform import loop
    from seal_platform.store import RunStore

    def mark(text: str) -> None:
        os.write(fd, f"{time.monotonic():.6f} {text}\n".encode())

    def around(owner: Any, name: str, before: Any, after: Any = None) -> None:
        original = getattr(owner, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            mark(before(*args, **kwargs))
            result = original(self, *args, **kwargs)
            if after:
                mark(after(*args, **kwargs))
            return result

        setattr(owner, name, wrapper)

    around(loop.Progress, "stage", lambda step, stage: f"{stage} (step {step})")
    around(loop.Runner, "_restore", lambda *a: "resume: restoring the checkpoint", lambda *a: "resume: restored")
    around(
        loop.Runner,
        "_checkpoint",
        lambda step: f"checkpoint write (step {step})",
        lambda step: f"checkpoint {step} done",
    )
    around(RunStore, "record_step", lambda run_id, step, **k: f"store write (step {step})",
           lambda run_id, step, **k: f"step {step} stored")
    around(RunStore, "add_evaluation", lambda run_id, step, result, **k: f"store write (evaluation {step})",
           lambda run_id, step, result, **k: f"evaluation {step} stored")
    mark("startup done")


# The stages a kill is aimed at (the list, plus start-up), and the stage each progress mark opens.
# A kill "lands" in the stage of the last mark the attempt wrote before it died.
TARGETS = ("startup", "rollout", "update", "store write", "checkpoint write", "evaluation")


def stage_of(mark: str | None) -> str:
    if mark is None or mark == "startup done" or mark.startswith("resume:"):
        return "startup"
    for prefix, stage in (("collect", "rollout"), ("optimize", "update"), ("store write", "store write"),
                          ("checkpoint write", "checkpoint write"),
                          ("checkpoint (", "checkpoint write"),  # the loop's own progress mark inside the write
                          ("evaluate", "evaluation"),
                          ("evaluation ", "evaluation"),  # "evaluation N stored": the rest of _evaluate
                          ("diagnose", "diagnosis, A-Patch"), ("reweight", "diagnosis, A-Patch"),
                          ("evolve_interface", "diagnosis, A-Patch")):
        if mark.startswith(prefix):
            return stage
    return "between stages"  # "step N stored", "checkpoint N done": bookkeeping after a stage


def _child(argv: list[str], marks: int | None = None) -> None:
    """Body of a forked attempt: the CLI, then exit without running the parent's atexit handlers."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        if marks is not None:
            _instrument(marks)
        from seal_platform.cli import main

        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        code = 1
    finally:
        os._exit(code)


@dataclass
class KillPlan:
    """Kill the attempt ``delay`` seconds after its ``occurrence``-th mark of ``stage`` (for start-up:
    ``delay`` seconds after the attempt began)."""

    stage: str
    occurrence: int
    delay: float


@dataclass
class Attempt:
    code: int | None  # exit code, None if killed
    seconds: float
    where: str  # the last mark before the end
    marks: list[tuple[float, str]]  # (seconds since the attempt began, mark)


def attempt(argv: list[str], plan: KillPlan | None) -> Attempt:
    """Run one attempt; SIGKILL it as ``plan`` says unless it ended first."""
    import select

    started = time.monotonic()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(argv, wfd)
    os.close(wfd)
    os.set_blocking(rfd, False)
    buffer = b""
    marks: list[tuple[float, str]] = []
    deadline = started + plan.delay if plan is not None and plan.stage == "startup" else None
    seen = 0

    def drain() -> None:
        nonlocal buffer, deadline, seen
        try:
            while chunk := os.read(rfd, 65536):
                buffer += chunk
        except BlockingIOError:
            pass
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            stamp, _, text = line.decode(errors="replace").partition(" ")
            marks.append((float(stamp) - started, text))
            if plan is not None and plan.stage != "startup" and deadline is None and stage_of(text) == plan.stage \
                    and not text.startswith("evaluation "):
                seen += 1
                if seen == plan.occurrence:
                    deadline = float(stamp) + plan.delay  # from when the stage began, not when we read it

    code: int | None = None
    while True:
        drain()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        wait = 0.005 if deadline is None else max(0.0, min(0.005, deadline - now))
        select.select([rfd], [], [], wait)
    elapsed = time.monotonic() - started
    drain()
    os.close(rfd)
    return Attempt(code, elapsed, marks[-1][1] if marks else "startup (imports)", marks)


def stage_durations(marks: list[tuple[float, str]], total: float) -> dict[str, list[float]]:
    """How long each occurrence of each stage lasted in an attempt (until the next mark)."""
    out: dict[str, list[float]] = {}
    first = next((t for t, text in marks if stage_of(text) != "startup"), total)
    out["startup"] = [first]
    for (t, text), (t_next, _) in zip(marks, marks[1:] + [(total, "")]):
        stage = stage_of(text)
        if stage != "startup" and not text.startswith("evaluation "):  # entry marks only
            out.setdefault(stage, []).append(t_next - t)
    return out


class Schedule:
    """Where the next kill is aimed: at the target stage with the fewest kills landed so far, at a random
    one of its next few occurrences, a random fraction of the way through it (the stage's length taken
    from the uninterrupted run's timeline). Done when ``kills`` kills have landed, at least ``per_stage``
    in every target stage and at least one of them left a partial checkpoint directory -- or after
    ``max_attempts`` kills, whatever landed."""

    def __init__(self, durations: dict[str, list[float]], kills: int, per_stage: int, rng: random.Random,
                 max_attempts: int):
        self.durations, self.kills, self.per_stage, self.rng = durations, kills, per_stage, rng
        self.max_attempts = max_attempts
        self.landed: dict[str, int] = {}
        self.partial_dirs_left = 0
        self.fired = 0

    def done(self) -> bool:
        if self.fired >= self.max_attempts:
            return True
        return (
            sum(self.landed.values()) >= self.kills
            and all(self.landed.get(s, 0) >= self.per_stage for s in TARGETS)
            and self.partial_dirs_left >= 1
        )

    def next(self) -> KillPlan | None:
        if self.done():
            return None
        self.fired += 1
        wanted = [s for s in TARGETS if self.landed.get(s, 0) < self.per_stage] or list(TARGETS)
        if self.partial_dirs_left == 0 and self.landed.get("checkpoint write", 0) >= self.per_stage:
            wanted = ["checkpoint write"]
        fewest = min(self.landed.get(s, 0) for s in wanted)
        stage = self.rng.choice([s for s in wanted if self.landed.get(s, 0) == fewest])
        lengths = self.durations.get(stage) or [0.05]
        length = sum(lengths) / len(lengths)
        if stage == "startup":
            return KillPlan(stage, 0, self.rng.uniform(0.05, max(0.1, length)))
        return KillPlan(stage, self.rng.randint(1, 2), self.rng.uniform(0.0, length))

    def record(self, landed_in: str, partial_dir: bool) -> None:
        self.landed[landed_in] = self.landed.get(landed_in, 0) + 1
        self.partial_dirs_left += partial_dir


def _rows(conn: sqlite3.Connection, sql: str, *args: Any) -> list[tuple]:
    return [tuple(r) for r in conn.execute(sql, args)]


def _clean_metrics(metrics: str) -> dict[str, Any]:
    # Wall-clock figures differ between any two runs; everything else must match exactly.
    data = json.loads(metrics)
    return {k: v for k, v in data.items() if not any(w in k for w in ("time", "per_s", "seconds", "_s_"))
            and not k.endswith("_s")}


def snapshot(db: Path) -> dict[str, Any]:
    """What a run left in the store, without ids, timestamps and timings."""
    with sqlite3.connect(db) as conn:
        (run_id, status, last_step), = _rows(conn, "SELECT id, status, last_step FROM runs")
        steps = [(s, e, r, n, i, _clean_metrics(m), json.loads(c)) for s, e, r, n, i, m, c in _rows(
            conn, "SELECT step, epoch, mean_reward, n_trajectories, interface_revision, metrics, capability_state "
                  "FROM steps WHERE run_id = ? ORDER BY step", run_id)]
        trajectories = []
        for step, phase, task, group, sample, reward, finish, tokens, blob in _rows(
                conn, "SELECT step, phase, task_id, \"group\", sample, reward, finish, generated_tokens, blob "
                      "FROM trajectories WHERE run_id = ?", run_id):
            data = json.loads(zlib.decompress(blob))
            messages = [(m["role"], m["content"], m.get("token_ids"), m.get("logprobs")) for m in data["messages"]]
            trajectories.append((step, phase, task, group, sample, reward, finish, tokens, json.dumps(messages)))
        by_traj = {tid: (step, task, group, sample) for tid, step, task, group, sample in _rows(
            conn, "SELECT id, step, task_id, \"group\", sample FROM trajectories WHERE run_id = ?", run_id)}
        labels = sorted(
            (step, by_traj.get(tid), turn, label, ref, source)
            for step, tid, turn, label, ref, source in _rows(
                conn,
                "SELECT step, trajectory_id, turn, label, reference_label, source FROM turn_labels WHERE run_id = ?",
                run_id,
            )
        )
        return {
            "run_id": run_id,
            "status": status,
            "last_step": last_step,
            "steps": steps,
            "trajectories": sorted(trajectories),
            "labels": labels,
            "label_weights": _rows(
                conn, "SELECT step, label, weight FROM label_weights WHERE run_id = ? ORDER BY step, label", run_id
            ),
            "evaluations": _rows(
                conn,
                "SELECT step, split, category, pass_rate, n_tasks FROM evaluations WHERE run_id = ? "
                "ORDER BY step, category",
                run_id,
            ),
            "interfaces": _rows(
                conn,
                "SELECT revision, parent, step, changes FROM interface_revisions WHERE run_id = ? ORDER BY revision",
                run_id,
            ),
            "checkpoints": [
                r[0] for r in _rows(conn, "SELECT step FROM checkpoints WHERE run_id = ? ORDER BY step", run_id)
            ],
        }


def final_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"step-{STEPS - 1:06d}" / "grpo" / "model.safetensors"))


def _state_after_kill(db: Path, run_dir: Path | None) -> str:
    if not db.exists():
        return "no store yet"
    try:
        with sqlite3.connect(db) as conn:
            runs = _rows(conn, "SELECT id FROM runs")
            if not runs:
                return "store, no run"
            steps = _rows(conn, "SELECT count(*) FROM steps")[0][0]
            evals = len(_rows(conn, "SELECT DISTINCT step FROM evaluations"))
            ckpts = len(_rows(conn, "SELECT step FROM checkpoints"))
    except sqlite3.DatabaseError as exc:
        return f"store unreadable: {exc}"
    partial = sorted(p.name for p in (run_dir / "checkpoints").glob(".tmp-step-*")) if run_dir else []
    # (a partial directory seen here is removed by the next resume; the final check makes sure)
    extra = f", partial checkpoint dir {partial[0]}" if partial else ""
    return f"{steps} steps, {evals} evaluations, {ckpts} checkpoints in the store{extra}"


def _run_dir(db: Path) -> Path | None:
    if not db.exists():
        return None
    with sqlite3.connect(db) as conn:
        rows = _rows(conn, "SELECT run_dir FROM runs")
    return Path(rows[0][0]) if rows else None


def _partial_dirs(run_dir: Path | None) -> list[str]:
    if run_dir is None or not (run_dir / "checkpoints").is_dir():
        return []
    return sorted(p.name for p in (run_dir / "checkpoints").glob(".tmp-step-*"))


def run_killed(root: Path, recipe: Path, schedule: Schedule, first: int = 1) -> tuple[list[dict], int]:
    """One run, killed as the schedule says and resumed after each kill, until an attempt finishes."""
    db = root / "runs" / "store.sqlite"
    log: list[dict] = []
    attempts = 0
    seen_partial: set[str] = set()  # a partial directory stays until the next resume gets that far
    while True:
        attempts += 1
        run_id = None
        if db.exists():
            with sqlite3.connect(db) as conn:
                ids = _rows(conn, "SELECT id FROM runs")
            run_id = ids[0][0] if ids else None
        argv = (["run", "--quiet", "--resume", run_id, "--store", f"sqlite:///{db}"] if run_id
                else ["run", "--quiet", str(recipe)])
        plan = schedule.next()
        result = attempt(argv, plan)
        if result.code is None:
            assert plan is not None
            run_dir = _run_dir(db)
            landed = stage_of(result.marks[-1][1] if result.marks else None)
            new_partial = [name for name in _partial_dirs(run_dir) if name not in seen_partial]
            seen_partial.update(new_partial)
            schedule.record(landed, bool(new_partial))
            log.append({"attempt": attempts, "killed_after_s": round(result.seconds, 3), "resumed": bool(run_id),
                        "aimed_at": plan.stage, "landed_in": landed, "killed_in": result.where,
                        "left_partial_checkpoint_dirs": new_partial, "store_after": _state_after_kill(db, run_dir)})
            print(f"kill {first + len(log) - 1:3d}: aimed at {plan.stage:16s} landed in {landed:16s} "
                  f"{result.seconds:6.2f} s into {'a resume' if run_id else 'a new run'} (last mark: {result.where}); "
                  f"then {log[-1]['store_after']}", flush=True)
            continue
        if result.code != 0:
            raise SystemExit(f"attempt {attempts} ({' '.join(argv)}) exited {result.code}")
        return log, attempts


def compare(reference: dict[str, Any], killed: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("status", "last_step", "steps", "trajectories", "labels", "label_weights", "evaluations",
                "interfaces", "checkpoints"):
        if reference[key] != killed[key]:
            problems.append(f"{key} differs")
    return problems


def _partial_dirs_removed(db: Path) -> int:
    """How many partial checkpoint directories the resumes of a run removed (their 'resume' events)."""
    with sqlite3.connect(db) as conn:
        messages = [r[0] for r in _rows(conn, "SELECT message FROM events WHERE kind = 'resume'")]
    return sum(int(m.split()[1]) for m in messages if m.startswith("removed ") and m.split()[1].isdigit())


def killed_runs(work: Path, model: Path, seed: int, schedule: Schedule, reference: dict[str, Any],
                ref_weights: dict[str, Any]) -> dict[str, Any]:
    """Killed-and-resumed runs of the recipe, one after another, until the schedule is done; each finished
    run is compared with the uninterrupted one."""
    import torch

    log: list[dict] = []
    runs, attempts, problems, max_diff, removed = 0, 0, [], 0.0, 0
    while not schedule.done():
        runs += 1
        root = work / f"killed-{runs}"
        root.mkdir(parents=True, exist_ok=True)
        recipe = write_recipe(root, model, seed)
        run_log, run_attempts = run_killed(root, recipe, schedule, first=len(log) + 1)
        for entry in run_log:
            entry["run"] = runs
        log += run_log
        attempts += run_attempts
        db = root / "runs" / "store.sqlite"
        killed = snapshot(db)
        removed += _partial_dirs_removed(db)
        run_dir = root / "runs" / killed["run_id"]
        weights = final_weights(run_dir)
        # A complete checkpoint the store never recorded (killed between its rename and its row) is kept
        # aside as .orphan-step-* by the resume, not deleted: not a leftover.
        leftovers = sorted(
            p.name
            for p in (run_dir / "checkpoints").iterdir()
            if not p.name.startswith(".orphan-")
            and (p.name.startswith(".tmp") or p.name not in {f"step-{s:06d}" for s in killed["checkpoints"]})
        )
        found = [f"run {runs}: {p}" for p in compare(reference, killed)]
        if leftovers:
            found.append(f"run {runs}: partial checkpoint directories left: {leftovers}")
        same_keys = weights.keys() == ref_weights.keys()
        diff = max(float((weights[k] - ref_weights[k]).abs().max()) for k in weights) if same_keys else float("inf")
        max_diff = max(max_diff, diff)
        if not (same_keys and all(torch.equal(weights[k], ref_weights[k]) for k in weights)):
            found.append(f"run {runs}: final weights differ (max abs diff {diff:g})")
        print(f"run {runs}: {len(run_log)} kill(s), {run_attempts} attempts; "
              f"{'identical to the uninterrupted run' if not found else '; '.join(found)}", flush=True)
        problems += found
    per_stage = {
        stage: sum(1 for e in log if e["landed_in"] == stage) for stage in sorted({e["landed_in"] for e in log})
    }
    return {"kills": len(log), "runs": runs, "attempts": attempts, "problems": problems,
            "max_abs_weight_diff": max_diff, "kills_per_stage": per_stage,
            "kills_aimed_per_stage": {s: sum(1 for e in log if e["aimed_at"] == s) for s in TARGETS},
            "kills_leaving_partial_checkpoint_dir": sum(bool(e["left_partial_checkpoint_dirs"]) for e in log),
            "partial_checkpoint_dirs_removed_at_resume": removed, "log": log}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=24, help="at least this many kills in all")
    parser.add_argument(
        "--per-stage", type=int, default=3, help=f"at least this many kills landed in each of {', '.join(TARGETS)}"
    )
    parser.add_argument(
        "--max-kills", type=int, default=None, help="give up aiming after this many kills (default: 4 x --kills)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the recipe's seed")
    parser.add_argument("--kill-seed", type=int, default=1, help="seed of the kill schedule")
    parser.add_argument("--model", type=Path, default=None, help="a tiny HF model directory (made if absent)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill-anywhere-"))
    model = args.model or make_tiny_model(work / "tiny-model")
    # Import what the children need once, here, without running torch ops (fork-safe).
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import seal_platform.cli  # noqa: F401

    ref_root = work / "reference"
    ref_root.mkdir(parents=True, exist_ok=True)
    ref = attempt(["run", "--quiet", str(write_recipe(ref_root, model, args.seed))], None)
    if ref.code != 0:
        print(f"the uninterrupted run failed (exit {ref.code})")
        return 1
    reference = snapshot(ref_root / "runs" / "store.sqlite")
    ref_weights = final_weights(ref_root / "runs" / reference["run_id"])
    from safetensors.torch import load_file

    initial = load_file(str(next(Path(model).glob("*.safetensors"))))
    moved = any(k in initial and not torch.equal(v, initial[k]) for k, v in ref_weights.items())
    durations = stage_durations(ref.marks, ref.seconds)
    print(
        f"uninterrupted run: {ref.seconds:.2f} s, {len(reference['steps'])} steps, evaluations at "
        f"{sorted({e[0] for e in reference['evaluations']})}, {len(reference['trajectories'])} trajectories",
        flush=True,
    )
    print("stage timeline of the uninterrupted run (mean length, occurrences): " + "; ".join(
        f"{stage} {1000 * sum(d) / len(d):.0f} ms x{len(d)}" for stage, d in sorted(durations.items())), flush=True)
    started = time.monotonic()
    schedule = Schedule(durations, args.kills, args.per_stage, random.Random(args.kill_seed),
                        args.max_kills or 4 * args.kills)
    summary = killed_runs(work, model, args.seed, schedule, reference, ref_weights)
    short = [s for s in TARGETS if summary["kills_per_stage"].get(s, 0) < args.per_stage]
    if short or summary["kills"] < args.kills:
        summary["problems"].append(f"schedule not met after {summary['kills']} kills: fewer than {args.per_stage} "
                                   f"landed in {', '.join(short) or '-'}")
    summary.update(seconds=round(time.monotonic() - started, 1), reference_seconds=round(ref.seconds, 2),
                   steps=len(reference["steps"]), evaluations=sorted({e[0] for e in reference["evaluations"]}),
                   reference_stage_ms={s: round(1000 * sum(d) / len(d), 1) for s, d in durations.items()},
                   weights_bitwise_equal=summary["max_abs_weight_diff"] == 0.0 and not any(
                       "weights" in p for p in summary["problems"]), weights_changed_by_training=moved)
    outcome = ("every store identical to the uninterrupted run and final weights bitwise equal"
               if not summary["problems"] else str(len(summary["problems"])) + " problem(s)")
    print(
        f"{summary['kills']} kills over {summary['runs']} killed runs ({summary['attempts']} attempts) in "
        f"{summary['seconds']} s: {outcome}",
        flush=True,
    )
    print(
        "kills landed per stage: "
        + ", ".join(f"{s} {n}" for s, n in summary["kills_per_stage"].items())
        + f"; {summary['kills_leaving_partial_checkpoint_dir']} left a partial checkpoint directory, "
        f"{summary['partial_checkpoint_dirs_removed_at_resume']} partial directories removed by the resumes",
        flush=True,
    )
    for p in summary["problems"]:
        print("  PROBLEM:", p)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
