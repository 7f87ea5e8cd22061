"""Kill-anywhere: SIGKILL a tiny-model training run at random moments, resume it each time, and compare the
finished store and final weights with an uninterrupted run of the same recipe and seed.

The run: the seal-arithmetic environment (rollouts, diagnosis, A-Patch reweighting, a GRPO update with an
entropy bonus so every update moves the weights), the Hugging Face engine, a 2-layer random Llama with the
SmolLM2 tokenizer, a checkpoint after every step and an evaluation every 2 steps. Each attempt is a forked
child of this (pre-imported) process running ``seal-platform run`` / ``run --resume``, so an attempt starts
in milliseconds and kills land all over the run: model loading, rollouts, updates, checkpoint writes, store
writes, evaluations. One torch thread (OMP_NUM_THREADS=1), so the arithmetic is reproducible.

    .venv/bin/python benchmarks/kill_anywhere.py --kills 25 [--model DIR] [--seed 0] [--json out.json]

Prints one line per kill (when, and what the store held afterwards) and the comparison; exits 1 on any
difference. tests/grpo/test_kill_anywhere.py runs it (a few kills in make test, 20+ in the slow suite).
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
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

STEPS = 6

_MAKE_TINY = """
import sys, torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from seal_platform_plugins.grpo.policy import ensure_converted
src, out = ensure_converted(), sys.argv[1]
tok = AutoTokenizer.from_pretrained(src)
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
config = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                     tie_word_embeddings=True)
torch.manual_seed(0)
model = LlamaForCausalLM(config)
model.generation_config.eos_token_id = tok.eos_token_id
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
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
    """Report where the attempt is (for the kill log only; behaviour unchanged): each stage the loop
    announces, store writes and checkpoint writes, each as one line on ``fd``."""
    from seal_platform import loop
    from seal_platform.store import RunStore

    def mark(text: str) -> None:
        os.write(fd, (text + "\n").encode())

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
    around(loop.Runner, "_checkpoint", lambda step: f"checkpoint write (step {step})", lambda step: f"checkpoint {step} done")
    around(RunStore, "record_step", lambda run_id, step, **k: f"store write (step {step})",
           lambda run_id, step, **k: f"step {step} stored")
    around(RunStore, "add_evaluation", lambda run_id, step, result: f"store write (evaluation {step})",
           lambda run_id, step, result: f"evaluation {step} stored")
    mark("startup done")


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


def attempt(argv: list[str], kill_after: float | None) -> tuple[int | None, float, str]:
    """Run one attempt; SIGKILL it after ``kill_after`` seconds unless it ended.
    Returns (exit code or None if killed, seconds, where it was when it ended)."""
    started = time.monotonic()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(argv, wfd)
    os.close(wfd)
    os.set_blocking(rfd, False)
    deadline = None if kill_after is None else started + kill_after
    marks = b""

    def drain() -> None:
        nonlocal marks
        try:
            while chunk := os.read(rfd, 65536):
                marks += chunk
        except BlockingIOError:
            pass

    code: int | None = None
    while True:
        drain()
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if deadline is not None and time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.002)
    elapsed = time.monotonic() - started
    drain()
    os.close(rfd)
    last = marks.decode(errors="replace").strip().splitlines()
    where = last[-1] if last else "startup (imports, plugins, store, model)"
    if where == "startup done":
        where = "startup (store, model, engine)"
    return code, elapsed, where


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
        labels = sorted((step, by_traj.get(tid), turn, label, ref, source) for step, tid, turn, label, ref, source in _rows(
            conn, "SELECT step, trajectory_id, turn, label, reference_label, source FROM turn_labels WHERE run_id = ?", run_id))
        return {
            "run_id": run_id, "status": status, "last_step": last_step, "steps": steps,
            "trajectories": sorted(trajectories),
            "labels": labels,
            "label_weights": _rows(conn, "SELECT step, label, weight FROM label_weights WHERE run_id = ? ORDER BY step, label", run_id),
            "evaluations": _rows(conn, "SELECT step, split, category, pass_rate, n_tasks FROM evaluations WHERE run_id = ? "
                                       "ORDER BY step, category", run_id),
            "interfaces": _rows(conn, "SELECT revision, parent, step, changes FROM interface_revisions WHERE run_id = ? "
                                      "ORDER BY revision", run_id),
            "checkpoints": [r[0] for r in _rows(conn, "SELECT step FROM checkpoints WHERE run_id = ? ORDER BY step", run_id)],
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


def run_killed(root: Path, recipe: Path, kills: int, horizon: float, rng: random.Random,
               first: int = 1) -> tuple[list[dict], int]:
    db = root / "runs" / "store.sqlite"
    log: list[dict] = []
    attempts = 0
    while True:
        attempts += 1
        run_id = None
        if db.exists():
            with sqlite3.connect(db) as conn:
                ids = _rows(conn, "SELECT id FROM runs")
            run_id = ids[0][0] if ids else None
        argv = (["run", "--quiet", "--resume", run_id, "--store", f"sqlite:///{db}"] if run_id
                else ["run", "--quiet", str(recipe)])
        kill_after = rng.uniform(0.05, horizon) if len(log) < kills else None
        code, elapsed, where = attempt(argv, kill_after)
        if code is None:
            run_dir = _run_dir(db)
            log.append({"attempt": attempts, "killed_after_s": round(elapsed, 3), "resumed": bool(run_id),
                        "killed_in": where, "store_after": _state_after_kill(db, run_dir)})
            print(f"kill {first + len(log) - 1:3d}: {elapsed:6.2f} s into {'a resume' if run_id else 'a new run'}, "
                  f"in {where}; then {log[-1]['store_after']}", flush=True)
            continue
        if code != 0:
            raise SystemExit(f"attempt {attempts} ({' '.join(argv)}) exited {code}")
        return log, attempts


def compare(reference: dict[str, Any], killed: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("status", "last_step", "steps", "trajectories", "labels", "label_weights", "evaluations",
                "interfaces", "checkpoints"):
        if reference[key] != killed[key]:
            problems.append(f"{key} differs")
    return problems


def killed_runs(work: Path, model: Path, seed: int, kills: int, horizon: float, rng: random.Random,
                reference: dict[str, Any], ref_weights: dict[str, Any]) -> dict[str, Any]:
    """Killed-and-resumed runs of the recipe, one after another, until ``kills`` kills have landed; each
    finished run is compared with the uninterrupted one."""
    import torch

    log: list[dict] = []
    runs, attempts, problems, max_diff = 0, 0, [], 0.0
    while len(log) < kills:
        runs += 1
        root = work / f"killed-{runs}"
        root.mkdir(parents=True, exist_ok=True)
        recipe = write_recipe(root, model, seed)
        run_log, run_attempts = run_killed(root, recipe, kills - len(log), horizon, rng, first=len(log) + 1)
        for entry in run_log:
            entry["run"] = runs
        log += run_log
        attempts += run_attempts
        killed = snapshot(root / "runs" / "store.sqlite")
        run_dir = root / "runs" / killed["run_id"]
        weights = final_weights(run_dir)
        leftovers = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".tmp"))
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
    return {"kills": len(log), "runs": runs, "attempts": attempts, "problems": problems,
            "max_abs_weight_diff": max_diff, "log": log}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0, help="the recipe's seed")
    parser.add_argument("--kill-seed", type=int, default=1, help="seed of the kill times")
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
    code, ref_time, _ = attempt(["run", "--quiet", str(write_recipe(ref_root, model, args.seed))], None)
    if code != 0:
        print(f"the uninterrupted run failed (exit {code})")
        return 1
    reference = snapshot(ref_root / "runs" / "store.sqlite")
    ref_weights = final_weights(ref_root / "runs" / reference["run_id"])
    from safetensors.torch import load_file

    initial = load_file(str(next(Path(model).glob("*.safetensors"))))
    moved = any(k in initial and not torch.equal(v, initial[k]) for k, v in ref_weights.items())
    print(f"uninterrupted run: {ref_time:.2f} s, {len(reference['steps'])} steps, evaluations at "
          f"{sorted({e[0] for e in reference['evaluations']})}, {len(reference['trajectories'])} trajectories", flush=True)
    started = time.monotonic()
    summary = killed_runs(work, model, args.seed, args.kills, ref_time * 1.1, random.Random(args.kill_seed),
                          reference, ref_weights)
    summary.update(seconds=round(time.monotonic() - started, 1), reference_seconds=round(ref_time, 2),
                   steps=len(reference["steps"]), evaluations=sorted({e[0] for e in reference["evaluations"]}),
                   weights_bitwise_equal=summary["max_abs_weight_diff"] == 0.0 and not any(
                       "weights" in p for p in summary["problems"]), weights_changed_by_training=moved)
    print(f"{summary['kills']} kills over {summary['runs']} killed runs ({summary['attempts']} attempts) in "
          f"{summary['seconds']} s: {'every store identical to the uninterrupted run and final weights bitwise equal' if not summary['problems'] else str(len(summary['problems'])) + ' problem(s)'}",
          flush=True)
    for p in summary["problems"]:
        print("  PROBLEM:", p)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
