"""`seal-platform runs` on a large store (run by hand, under the heavy-command lock; figures go to
docs/reliability.md).

    flock /tmp/heavy.lock nice -n 5 .venv/bin/python benchmarks/bench_runs_listing.py [--runs 20000] [--repeats 5]

Makes a store of ``--runs`` runs (each with a realistic resolved config of ~3 KB, a step and an event, written in
bulk) and times, best of ``--repeats``:

* ``RunStore.list_runs(limit=50)`` in process (the query, its rows checked as untrusted values, crashed marks);
* the command ``seal-platform runs --limit 50`` and ``runs --json --limit 50`` as subprocesses (wall and CPU
  time, the interpreter's start included: on a loaded machine the CPU time is the figure), and ``runs --limit
  0`` (every run) for comparison;

and prints SQLite's query plan for the listing query (it must use ``ix_runs_started_at``). The target (issue
52): under a second for ``runs --limit 50`` on 20,000 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select

from seal_platform.store import RunStore
from seal_platform.store import models as m

CONFIG = {"environment": "bfcl", "training": {"steps": 60, "tasks_per_step": 32, "group_size": 8},
          "rollout": {"engine": "vllm", "max_new_tokens": 512, "temperature": 1.0},
          "settings": {"grpo": {"lr": 1e-6, "model": "HuggingFaceTB/SmolLM2-135M-Instruct", "notes": "x" * 2500}}}


def make_store(path: Path, runs: int) -> RunStore:
    store = RunStore(f"sqlite:///{path}")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with store.session() as s:
        for first in range(0, runs, 1000):
            batch = range(first, min(first + 1000, runs))
            s.execute(
                insert(m.Run),
                [
                    dict(
                        id=f"2026-{i:06d}",
                        name=f"run-{i}",
                        recipe="recipes/seal.yaml",
                        config=CONFIG,
                        config_hash=f"{i:08x}",
                        seed=i,
                        status="completed",
                        started_at=start + timedelta(minutes=i),
                        ended_at=start + timedelta(minutes=i + 1),
                        host="bench",
                        pid=None,
                        run_dir=f"/runs/2026-{i:06d}",
                        last_step=59,
                        error=None,
                    )
                    for i in batch
                ],
            )
            s.execute(insert(m.Event), [dict(run_id=f"2026-{i:06d}", kind="run_end", message="completed", data={})
                                        for i in batch])
    return store


def best(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        t0 = time.perf_counter()
        store = make_store(path, args.runs)
        print(
            f"store of {args.runs} runs made in {time.perf_counter() - t0:.1f} s "
            f"({path.stat().st_size / 2**20:.1f} MiB)"
        )
        query = select(m.Run).order_by(m.Run.started_at.desc()).limit(50)
        with store.engine.connect() as conn:
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + str(query.compile(
                store.engine, compile_kwargs={"literal_binds": True}))).all()
        print("query plan:", "; ".join(row[-1] for row in plan))
        listed = best(args.repeats, lambda: store.list_runs(limit=50))
        print(f"RunStore.list_runs(limit=50): {listed * 1000:.1f} ms")
        store.close()
        url = f"sqlite:///{path}"
        env = {**os.environ, "COLUMNS": "120"}
        results = {}
        for name, extra in (
            ("runs --limit 50", ["--limit", "50"]),
            ("runs --json --limit 50", ["--json", "--limit", "50"]),
            ("runs --limit 0 (all)", ["--limit", "0"]),
        ):
            command = [sys.executable, "-m", "seal_platform", "runs", "--store", url, *extra]

            cpu: list[float] = []

            def once(command=command, cpu=cpu) -> None:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                assert done.returncode == 0, done.stderr

            results[name] = best(args.repeats if "all" not in name else 1, once)
            results[name + " cpu"] = min(cpu)
            print(f"seal-platform {name}: {results[name]:.2f} s wall, {min(cpu):.2f} s CPU (interpreter start "
                  "included)")
        print(json.dumps({"runs": args.runs, "list_runs_ms": round(listed * 1000, 1),
                          **{k: round(v, 2) for k, v in results.items()}, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
