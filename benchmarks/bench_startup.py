"""Time the command line's start-up: whole commands in fresh processes, as a user runs them.

Each round runs every command once, in turn (so a change in the machine's load hits all of them alike), and
reports per command the median and the range over the rounds:

* ``python -c pass`` (the interpreter alone: the floor),
* ``seal-platform --help`` (the CLI with every plugin's commands),
* ``seal-platform plugins --json`` (the plugin listing),
* ``seal-platform verify --benchmark bfcl FILE`` on a one-line FILE (``multi_turn_base_0``'s ground truth, so
  the verdict is a pass: start-up is nearly all of it, and it is the serial part of ``verify`` on any file),
* ``seal-platform config show`` (the default recipe resolved).

Every command must exit 0 (the verify line must pass). The load average is printed before and after.

``--baseline DIR`` (more than once: each) also times every command (but ``python -c pass``) with the packages
imported from DIR instead, in the same rounds: DIR holds another revision laid out as installed, so a change is
compared with what it changes before and after alternating, on a shared machine too::

    mkdir -p /tmp/base/src && git archive HEAD seal_platform plugins recipes | tar -x -C /tmp/base/src
    ln -s src/seal_platform /tmp/base/; ln -s src/plugins /tmp/base/seal_platform_plugins
    ln -s src/recipes /tmp/base/seal_platform_recipes

(the editable install's finder comes after ``PYTHONPATH``, and the entry points name the same modules). A
baseline runs with one more entry on ``sys.path`` than the console script; for like for like, lay the working
tree out the same way (a copy) and give it as another ``--baseline``. Run by hand (under the shared lock on a
shared machine)::

    flock /tmp/heavy.lock .venv/bin/python benchmarks/bench_startup.py \\
        [--rounds 15] [--only verify,help] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_line_file() -> str:
    """A temporary .jsonl (the caller deletes it) with one ``verify --benchmark bfcl`` line: the ground truth of
    task multi_turn_base_0, as benchmarks/bench_verifier.py writes its cases."""
    from seal_platform_plugins.bfcl.data import load_tasks

    task = next(t for t in load_tasks(split="all") if t.id == "multi_turn_base_0")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write(json.dumps({"task_id": task.id, "turns": task.payload["ground_truth"]}) + "\n")
    return fh.name


def commands(path: str, baselines: list[str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Label -> (argv, environment) of every timed command."""
    script = Path(sys.executable).parent / "seal-platform"
    # The console script where it is installed; else (the checkout on PYTHONPATH) the module.
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "seal_platform"]
    env = {**os.environ, "COLUMNS": "100"}
    shown = {
        "--help": ["--help"],
        "plugins --json": ["plugins", "--json"],
        "verify (1 line)": ["verify", "--benchmark", "bfcl", path],
        "config show": ["config", "show"],
    }
    timed = {"python -c pass": ([sys.executable, "-c", "pass"], env)}
    for name, args in shown.items():
        timed[name] = ([*cli, *args], env)
        for baseline in baselines:  # the console script's own code, the packages from DIR
            base_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [baseline, env.get("PYTHONPATH")]))}
            label = "baseline" if len(baselines) == 1 else Path(baseline).name
            timed[f"{name} [{label}]"] = ([sys.executable, "-c", _CONSOLE_SCRIPT, *args], base_env)
    return timed


# What the installed console script runs (``seal_platform.__main__:main``), for ``--baseline``.
_CONSOLE_SCRIPT = "import sys; from seal_platform.__main__ import main; sys.argv[0] = 'seal-platform'; sys.exit(main())"


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check(name: str, done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    if name.startswith("verify") and json.loads(done.stdout.splitlines()[0]).get("success") is not True:
        raise SystemExit(f"{name}: the ground truth did not pass: {done.stdout[:500]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (each runs every command once)")
    parser.add_argument("--only", default="", help="comma-separated substrings: time only the matching commands")
    parser.add_argument("--baseline", action="append", default=[], metavar="DIR",
                        help="also time the commands with the packages from DIR (another revision), interleaved; "
                             "may be given more than once (each labelled with its folder's name)")
    args = parser.parse_args()

    path = one_line_file()
    try:
        chosen = {name: spec for name, spec in commands(path, args.baseline).items()
                  if not args.only or any(part and part in name for part in args.only.split(","))}
        # One untimed run each: files in the page cache, and bytecode written for every module a command
        # imports that has none or an outdated one, as a pip install leaves it (where PYTHONDONTWRITEBYTECODE
        # is set, an edited module would otherwise be compiled again by every timed run).
        for name, (argv, env) in chosen.items():
            warm = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
            check(name, subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=warm))
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in chosen}
        cpu: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(args.rounds):
            for name, (argv, env) in chosen.items():
                cpu_before = cpu_of_children()
                started = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
                times[name].append(time.perf_counter() - started)
                cpu[name].append(cpu_of_children() - cpu_before)
                check(name, done)
        load_after = os.getloadavg()
    finally:
        os.unlink(path)
    # CPU time (user + sys of the command's processes) moves less than wall time on a shared machine.
    print(f"{'command':<29} {'median':>7} {'min':>7} {'max':>7} {'CPU':>7}   ({args.rounds} rounds, alternating; "
          "seconds: wall time, median CPU time)")
    for name, seconds in times.items():
        print(f"{name:<29} {statistics.median(seconds):7.3f} {min(seconds):7.3f} {max(seconds):7.3f} "
              f"{statistics.median(cpu[name]):7.3f}")
    print(f"load average (1, 5, 15 min): before {', '.join(f'{x:.2f}' for x in load_before)}; "
          f"after {', '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
