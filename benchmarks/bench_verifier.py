"""Time our BFCL verifier against bfcl_eval's official multi_turn_checker on the same cases.

Cases are those of tests/bfcl/test_agreement.py: the 800 ground-truth answers plus deterministic
perturbations. Both sides check every case once per round (the official one with a fresh model name per
check and its cached instances deleted afterwards, as the agreement test does); verdicts must agree.
Prints per-case times and the ratio official / ours. Run by hand:

    .venv/bin/python benchmarks/bench_verifier.py [--per-task 3] [--rounds 3] [--executor] [--without-ground-truths]

``--executor`` also times our verifier through the worker-process executor (what training uses).
``--commands`` times whole commands on the same cases written to one JSONL file, as a user runs them:
``seal-platform verify --benchmark bfcl FILE`` against ``benchmarks/official_bfcl_verify.py FILE`` (the
thinnest official command: bfcl_eval's data files read with ``json``, ``multi_turn_checker`` called directly),
start-up and imports included, same Python, both with their bytecode compiled (ours and bfcl_eval's),
run alternately ``--rounds`` times each (median reported) with the load average printed; the verdicts must
agree line by line. ``seal-platform verify`` forks one lane per CPU it may use and the official command runs in
one process, so the ratio depends on the machine's cores: ``taskset -c 0-3 python benchmarks/bench_verifier.py
--commands`` measures both on four of them (``benchmarks/cpu_scaling_verify.sh`` runs 1, 2, 4, ... CPUs).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_helpers():
    spec = importlib.util.spec_from_file_location("bfcl_test_helpers", ROOT / "tests" / "bfcl" / "official_cases.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


SEED = 20260323
TARGET = 2.5  # `seal-platform verify` against the thin official command, whole commands (issue 51)


def agreement_cases(per_task: int = 3, seed: int = SEED) -> tuple[list, list]:
    """Every task (split ``all``) and the agreement test's cases on them: (tasks, [(entry, turns, _), ...])."""
    from seal_platform_plugins.bfcl.data import load_tasks

    tasks = load_tasks(split="all")
    return tasks, _load_helpers().agreement_cases([task.payload for task in tasks], per_task, seed)


def write_cases(cases: list) -> str:
    """``cases`` as one ``seal-platform verify --benchmark bfcl`` input file (a temporary .jsonl the caller
    deletes); returns its path."""
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        for entry, turns, _ in cases:
            fh.write(json.dumps({"task_id": entry["id"], "turns": turns}) + "\n")
    return fh.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=3, help="perturbations per task (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per side; the median is reported")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--executor", action="store_true", help="also time verification in worker processes")
    parser.add_argument("--commands", action="store_true", help="time whole commands (ours vs the official thin one)")
    parser.add_argument("--without-ground-truths", action="store_true",
                        help="leave the 800 ground-truth answers out: only perturbations (with --per-task 1, one "
                             "transcript per task, so no task's transcripts share a ground-truth replay)")
    args = parser.parse_args()

    from seal_platform_libs.toolenv.calls import parse_call
    from seal_platform_plugins.bfcl.verifier import verify

    helpers = _load_helpers()
    tasks, cases = agreement_cases(args.per_task, args.seed)
    by_id = {task.id: task for task in tasks}
    if args.without_ground_truths:
        cases = [case for case in cases if case[2] != "ground_truth"]
        print(f"{len(cases)} cases (perturbations only, {args.per_task} per task)")
    else:
        print(f"{len(cases)} cases ({len(tasks)} ground truths + {len(cases) - len(tasks)} perturbations)")
    if args.commands:
        return time_commands(cases, args.rounds)
    helpers.official_verdict(cases[0][0], cases[0][1])  # snapshot of the long-context module objects
    parsed = [[[parse_call(c) for c in turn] for turn in turns] for _, turns, _ in cases]

    def ours_round() -> tuple[float, list]:
        started = time.perf_counter()
        verdicts = []
        for (entry, _, _), turns in zip(cases, parsed):
            outcome = verify(by_id[entry["id"]], turns)
            verdicts.append((outcome.success, outcome.error_type))
        return time.perf_counter() - started, verdicts

    def official_round() -> tuple[float, list]:
        started = time.perf_counter()
        verdicts = [helpers.official_verdict(entry, turns) for entry, turns, _ in cases]
        return time.perf_counter() - started, verdicts

    ours_times, official_times = [], []
    for _ in range(args.rounds):
        seconds, ours = ours_round()
        ours_times.append(seconds)
        seconds, theirs = official_round()
        official_times.append(seconds)
        disagreements = sum(a != b for a, b in zip(ours, theirs))
        if disagreements:
            print(f"DISAGREEMENT on {disagreements} cases", file=sys.stderr)
            return 1
    ours_s, official_s = statistics.median(ours_times), statistics.median(official_times)
    n = len(cases)
    print(f"ours (in-process):  {ours_s:7.2f} s  {1000 * ours_s / n:6.3f} ms/case")
    print(f"official checker:   {official_s:7.2f} s  {1000 * official_s / n:6.3f} ms/case")
    print(f"ratio official/ours: {official_s / ours_s:.1f}x  (verdicts agree on all {n} cases)")

    if args.executor:
        from seal_platform_plugins.bfcl.executor import ToolExecutor

        with ToolExecutor(max_workers=2) as executor:
            executor.verify(by_id[cases[0][0]["id"]], parsed[0])  # start the workers
            started = time.perf_counter()
            for (entry, _, _), turns in zip(cases, parsed):
                executor.verify(by_id[entry["id"]], turns)
            seconds = time.perf_counter() - started
        print(f"ours (worker, 1 thread): {seconds:7.2f} s  {1000 * seconds / n:6.3f} ms/case  "
              f"ratio official/ours {official_s / seconds:.1f}x")
    return 0


# What the two timed commands import, listed by a child that imports it all: ours (the CLI, the BFCL plugin's
# verification modules, every multi-turn backend class) and the official command (its checker, which executes
# those same classes). Then each imported module's source file.
_IMPORTS = """
import sys
import seal_platform.cli
from seal_platform_plugins.bfcl import _worker, diagnoser, environment, executor, fork_verify, verifier
from seal_platform_plugins.bfcl.backend import BACKEND_MODULES, backend_class
for name in BACKEND_MODULES:
    backend_class(name)
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
for module in list(sys.modules.values()):
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    if isinstance(origin, str) and origin.endswith(".py"):
        print(origin)
"""


def compile_imports() -> None:
    """Like for like: both commands start from bytecode for everything they import, as a ``pip install``
    leaves it. Where ``PYTHONDONTWRITEBYTECODE`` is set (CI, containers) nothing else writes it, so a module
    installed without bytecode -- our editable checkout, a wheel installed with ``pip --no-compile``, a whole
    environment installed by ``uv`` (which compiles nothing by default: the lent device machines' image) -- is
    compiled again by every process that imports it: 0.3 s for mpmath alone (imported by bfcl_eval's math
    backend, so by both commands) on a lent machine. This writes the bytecode each imported module lacks
    (``py_compile``, in place; up-to-date files are left alone) and says what it could not write."""
    import importlib.util
    import py_compile
    import subprocess

    listed = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True, cwd=ROOT)
    if listed.returncode != 0:
        raise SystemExit(f"importing what the commands import failed:\n{listed.stderr[-2000:]}")
    written, unwritable = 0, []
    for source in sorted(set(listed.stdout.split())):
        cached = importlib.util.cache_from_source(source)
        try:
            if Path(cached).stat().st_mtime >= Path(source).stat().st_mtime:
                continue
        except OSError:
            pass
        try:
            py_compile.compile(source, cfile=cached, doraise=True)
            written += 1
        except (OSError, py_compile.PyCompileError):
            unwritable.append(source)
    if written:
        print(f"compiled the bytecode of {written} imported modules that had none", file=sys.stderr)
    if unwritable:
        print(f"note: could not write the bytecode of {len(unwritable)} imported modules (e.g. {unwritable[0]}); "
              "each command compiles them as it imports them", file=sys.stderr)


def time_commands(cases: list, rounds: int) -> int:
    """Whole-command wall time of ours and the official thin command on one JSONL file of ``cases``."""
    import json
    import os
    import resource
    import subprocess
    import tempfile

    path = write_cases(cases)
    compile_imports()
    script = Path(sys.executable).parent / "seal-platform"
    # The console script where it is installed; else (a machine with the checkout on PYTHONPATH) the module.
    entry = [str(script)] if script.exists() else ["-m", "seal_platform"]
    ours = [sys.executable, *entry, "verify", "--benchmark", "bfcl", path]
    official = [sys.executable, str(ROOT / "benchmarks" / "official_bfcl_verify.py"), path]

    def cpu_of_children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cpu: dict[str, list[float]] = {"ours": [], "official": []}

    def timed(command: list[str]) -> tuple[float, list[bool]]:
        cpu_before = cpu_of_children()
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=tempfile.gettempdir())
        seconds = time.perf_counter() - started
        cpu["ours" if command is ours else "official"].append(cpu_of_children() - cpu_before)
        if done.returncode != 0:
            raise SystemExit(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return seconds, [json.loads(line)["success"] for line in done.stdout.splitlines() if line.strip()]

    load_before = os.getloadavg()[0]
    try:
        times: dict[str, list[float]] = {"ours": [], "official": []}
        for _ in range(rounds):
            t, ours_v = timed(ours)
            times["ours"].append(t)
            t, official_v = timed(official)
            times["official"].append(t)
            if len(ours_v) != len(cases) or ours_v != official_v:
                bad = sum(a != b for a, b in zip(ours_v, official_v)) + abs(len(ours_v) - len(official_v))
                print(f"DISAGREEMENT on {bad} of {len(cases)} cases", file=sys.stderr)
                return 1
    finally:
        os.unlink(path)
    ours_s, official_s = statistics.median(times["ours"]), statistics.median(times["official"])
    print(f"seal-platform verify (whole command): {ours_s:6.2f} s  (rounds: {[round(t, 2) for t in times['ours']]})")
    print(
        f"official thin command:                {official_s:6.2f} s  "
        f"(rounds: {[round(t, 2) for t in times['official']]})"
    )
    print(f"ratio official/ours: {official_s / ours_s:.2f}x  (verdicts agree on all {len(cases)} cases)")
    paired = sorted(o / u for u, o in zip(times["ours"], times["official"]))  # each round's own ratio
    print(f"per-round ratios: {paired[0]:.2f}-{paired[-1]:.2f}x, median {statistics.median(paired):.2f}x "
          f"({sum(r >= TARGET for r in paired)} of {len(paired)} rounds at least {TARGET}x, the target)")
    print(f"CPU time (user+sys, all processes; median): ours {statistics.median(cpu['ours']):.2f} s, "
          f"official {statistics.median(cpu['official']):.2f} s (under load, the wall-time ratio of a forking "
          "command drifts towards the CPU-time ratio)")
    # seal-platform verify forks one lane per CPU it may run on (fork_verify.default_lanes); the official
    # command runs in one process whatever the machine.
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs, "
          f"{usable} usable by these commands (verify's lanes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
