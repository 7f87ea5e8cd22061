"""Stress the run store (run by hand, under the heavy-command lock; figures go to docs/reliability.md).

    .venv/bin/python benchmarks/store_stress.py writers [--writers 8] [--seconds 180] [--url URL]
        N processes, each its own run, write training steps (one transaction each: step row, 8 compressed
        trajectories, labels, label weights), events and evaluations into ONE store for the given time, while
        a reader lists runs. Reports steps written and every error (a "database is locked" is a failure).

    .venv/bin/python benchmarks/store_stress.py kills [--kills 1000]
        A writer (forked, so a cycle costs milliseconds) writes steps; SIGKILL at a random moment, again and
        again. Each step's number is reported to the parent right after its commit returned. At the end
        ``PRAGMA integrity_check`` must say ok and every reported step must be in the store.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from seal_platform.capability import CapabilityState
from seal_platform.store import RunStore
from seal_platform.types import EvalResult, Message, Trajectory, TurnLabel, TurnVerdict


def _trajectories(step: int, n: int = 8) -> list[Trajectory]:
    return [
        Trajectory(task_id=f"task-{i}", category="multi_turn_base", group=f"{step}:{i // 4}", sample=i % 4,
                   messages=[Message(role="user", content="list the files " * 20),
                             Message(role="assistant", content="[ls(a=True)] " * 30, token_ids=list(range(64)),
                                     logprobs=[-0.5] * 64, trainable=True)],
                   reward=float(i % 2), turn_verdicts=[TurnVerdict(turn=0, passed=bool(i % 2))])
        for i in range(n)
    ]


def _write_step(store: RunStore, run_id: str, step: int) -> None:
    trajs = _trajectories(step)
    labels = [TurnLabel(trajectory_id=t.id, turn=0, label="pass" if t.reward else "state_mismatch", source="bfcl")
              for t in trajs]
    store.record_step(run_id, step=step, epoch=0, trajectories=trajs, labels=labels,
                      label_weights={"pass": 1.0, "state_mismatch": 1.3}, state=CapabilityState(),
                      interface_revision=0, metrics={"loss": 0.1 * step}, timings={"collect": 0.01})


def _new_run(store: RunStore, run_id: str) -> None:
    store.create_run(run_id, name="stress", recipe="", config={}, config_hash="h", seed=0, run_dir="/tmp", plugins=[])


def _writer(url: str, index: int, seconds: float, out) -> None:
    errors: list[str] = []
    steps = 0
    try:
        store = RunStore(url)
        run_id = f"writer-{index}-{os.getpid()}"
        _new_run(store, run_id)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                _write_step(store, run_id, steps)
                if steps % 10 == 0:
                    store.add_event(run_id, "note", f"step {steps}")
                    store.add_evaluation(run_id, steps, EvalResult(split="eval", per_category={"a": 50.0}, n_tasks=2))
                    store.get_run(run_id)
                steps += 1
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
        store.finish_run(run_id, "completed")
    except Exception as exc:
        errors.append(f"setup {type(exc).__name__}: {exc}"[:300])
    out.put((index, steps, errors))


def _reader(url: str, seconds: float, out) -> None:
    errors, reads = [], 0
    store = RunStore(url)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            for run in store.list_runs():
                store.steps(run.id)
            reads += 1
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        time.sleep(0.2)
    out.put(("reader", reads, errors))


def writers(args: argparse.Namespace) -> int:
    url = args.url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'store.sqlite'}"
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, i, args.seconds, out)) for i in range(args.writers)]
    procs.append(ctx.Process(target=_reader, args=(url, args.seconds, out)))
    started = time.monotonic()
    for p in procs:
        p.start()
    results = [out.get(timeout=args.seconds + 300) for _ in procs]
    for p in procs:
        p.join()
    total_steps, all_errors = 0, []
    for who, count, errors in sorted(results, key=str):
        print(f"{who!s:>8}: {count} {'reads' if who == 'reader' else 'steps'}, {len(errors)} errors")
        total_steps += count if who != "reader" else 0
        all_errors += errors
    locked = sum("locked" in e for e in all_errors)
    print(
        f"{args.writers} writers x {args.seconds:.0f} s on {url}: {total_steps} steps "
        f"({total_steps / (time.monotonic() - started):.1f}/s), {len(all_errors)} errors, {locked} 'database is locked'"
    )
    for e in all_errors[:5]:
        print("  ", e)
    return 1 if all_errors else 0


def _kill_child(url: str, run_id: str, first_step: int, wfd: int) -> None:
    store = RunStore(url, migrate=False)
    step = first_step
    while True:
        _write_step(store, run_id, step)
        os.write(wfd, f"{step}\n".encode())  # after the commit returned: this step must survive any kill
        step += 1


def kills(args: argparse.Namespace) -> int:
    path = Path(tempfile.mkdtemp()) / "store.sqlite"
    url = f"sqlite:///{path}"
    store = RunStore(url)
    run_id = "killed-writer"
    _new_run(store, run_id)
    store.close()
    rng = random.Random(args.seed)
    committed: set[int] = set()
    next_step = 0
    started = time.monotonic()
    for _ in range(args.kills):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            try:
                _kill_child(url, run_id, next_step, wfd)
            finally:
                os._exit(1)
        os.close(wfd)
        time.sleep(rng.uniform(0.0, args.max_delay))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = b""
        while chunk := os.read(rfd, 65536):
            data += chunk
        os.close(rfd)
        done = [int(x) for x in data.decode().split()]
        committed.update(done)
        # The next writer continues after the last step in the store (a killed, uncommitted step is redone).
        with sqlite3.connect(path) as conn:
            last = conn.execute("SELECT max(step) FROM steps WHERE run_id = ?", (run_id,)).fetchone()[0]
        next_step = (last + 1) if last is not None else 0
    with sqlite3.connect(path) as conn:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        present = {r[0] for r in conn.execute("SELECT step FROM steps WHERE run_id = ?", (run_id,))}
        traj_rows = conn.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        step_rows = conn.execute("SELECT count(*) FROM steps").fetchone()[0]
    missing = sorted(committed - present)
    partial = traj_rows != 8 * step_rows
    print(f"{args.kills} SIGKILLs in {time.monotonic() - started:.0f} s: integrity_check={integrity}; "
          f"{len(committed)} steps reported committed, {len(present)} in the store, missing {len(missing)}; "
          f"{step_rows} step rows / {traj_rows} trajectory rows ({'PARTIAL STEPS' if partial else 'no partial step'})")
    return 0 if integrity == "ok" and not missing and not partial else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("writers")
    w.add_argument("--writers", type=int, default=8)
    w.add_argument("--seconds", type=float, default=180)
    w.add_argument("--url", default=None)
    k = sub.add_parser("kills")
    k.add_argument("--kills", type=int, default=1000)
    k.add_argument("--max-delay", type=float, default=0.08)
    k.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    return writers(args) if args.mode == "writers" else kills(args)


if __name__ == "__main__":
    sys.exit(main())
