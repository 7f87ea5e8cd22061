"""benchmarks/ablation.py resumes a run whose process was killed: the next invocation takes the same run id
up again from its last checkpoint (not step 0), and the row it writes equals an uninterrupted run's with the
same seed (every evaluation, the training rewards, labels, label weights and interface revisions)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import yaml

from seal_platform.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ablation.py"
STEPS = 8


def _recipe(tmp_path: Path, optimize_sleep_s: float = 0.3) -> Path:
    """The toy recipe; its steps sleep ``optimize_sleep_s`` (time to kill the run between two checkpoints)."""
    recipe = {
        "name": "toy-ablation", "seed": 0, "environment": "toy", "plugins": {"allow": ["toy"]},
        "training": {"steps": STEPS, "tasks_per_step": 4, "group_size": 2, "checkpoint_every": 0},
        "rollout": {"engine": "toy-engine", "workers": 1},
        "evaluation": {"every": 2, "max_tasks": 6},
        "stages": {"evolve_interface": "toy", "reweight": "toy", "optimize": "toy"},
        # restore_rng: the toy engine's checkpoint holds its random state, as grpo's holds the generators'.
        "settings": {"toy": {"n_tasks": 10, "restore_rng": True, "optimize_sleep_s": optimize_sleep_s}},
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "toy-ablation.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _harness(site: Path, recipe: Path, runs: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH"))
                                                        if p)}
    return subprocess.Popen([sys.executable, str(SCRIPT), "--recipes", str(recipe), "--seeds", "3", "--no-base",
                             "--runs-dir", str(runs)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)


def _checkpoints(runs: Path) -> int:
    if not list(runs.glob("*/checkpoints/step-*/core.json")):
        return 0
    try:
        # closed here, not left to the garbage collector (tests/core/test_store_races.py: what an open one did)
        with closing(sqlite3.connect(f"file:{runs / 'store.sqlite'}?mode=ro", uri=True, timeout=5)) as db:
            return db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    return out


def _rows(runs: Path) -> list[dict]:
    return [json.loads(line) for line in (runs / "results.jsonl").read_text().splitlines() if line.strip()]


def test_a_killed_run_is_resumed_from_its_checkpoint_and_ends_as_an_uninterrupted_one(toy_site, tmp_path):
    recipe = _recipe(tmp_path)
    runs = tmp_path / "interrupted"
    proc = _harness(toy_site, recipe, runs)
    deadline = time.monotonic() + 60
    while not _checkpoints(runs):  # the first durable checkpoint: on disk and recorded in the store
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (runs / "results.jsonl").exists()
    store = RunStore(f"sqlite:///{runs / 'store.sqlite'}")
    [killed] = store.list_runs()
    assert killed.status == "crashed"
    last = store.checkpoints(killed.id)[-1].step
    assert 0 <= last < STEPS - 1  # cut off before its end

    resumed = _harness(toy_site, recipe, runs)
    out = _finish(resumed)  # the claim of the killed process is taken over
    [row] = _rows(runs)
    assert f"resuming run {killed.id} (crashed) from step {last + 1}" in out
    assert row["run_id"] == killed.id and [r.id for r in store.list_runs()] == [killed.id]  # no new run
    ended = store.get_run(killed.id)
    events = [(e.kind, e.message) for e in store.events(killed.id)]
    assert (ended.status, ended.pid) == ("completed", resumed.pid), (ended.status, ended.pid, proc.pid, ended.error,
                                                                     ended.heartbeat_at, events, out[-3000:])
    assert row["resumed_from_step"] == [last + 1] and row["checkpoint_every"] == 1
    first, second = row["wall_parts_s"]
    assert first is not None and first >= 0 and second > 0 and row["wall_s"] == round(first + second, 1)
    assert len(row["load"]) == 2 and row["load"][0] is not None and len(row["load_at_resume"]) == 1
    assert sorted(row["evaluations"], key=int) == ["2", "4", "6", "8"]  # those before the kill included

    clean = tmp_path / "uninterrupted"
    # The same recipe but for the sleep, which only gave the first run time to be killed: what the row holds is
    # computed, not timed.
    out = _finish(_harness(toy_site, _recipe(tmp_path / "clean", optimize_sleep_s=0.0), clean))
    [reference] = _rows(clean)
    assert "resuming" not in out and "resumed_from_step" not in reference
    assert len({e["average"] for e in reference["evaluations"].values()}) > 1  # a learning curve, not a constant
    for key in ("evaluations", "steps", "train_rewards", "updates", "labels", "label_weights", "revisions",
                "interface_revision"):
        assert row[key] == reference[key], key
