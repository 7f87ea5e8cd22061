"""Where the wall time of one ``seal-platform verify --benchmark bfcl FILE`` goes: time stamps from inside the
command, run as the console script runs it.

    .venv/bin/python benchmarks/verify_phases.py FILE.jsonl [--runs 3]
    .venv/bin/python benchmarks/verify_phases.py --cases [--runs 3]   # the 3,200 cases of bench_verifier.py

Each run is a fresh interpreter (``python benchmarks/verify_phases.py --child FILE``) that marks: the plugin
modules and the CLI imported, the parent's warm-up before forking (``bfcl.verifier._warm_up``), the lanes'
forks, the forked verification's end and the command's end. The interpreter's start and exit are the run's wall
time less the script's. Then the CPU time of the parent and of its children. The serial part is everything
outside the forked verification; with k lanes the rest is shared out, so wall ~ serial + lanes' CPU / k.
``benchmarks/cpu_scaling_verify.sh`` runs it on all usable CPUs after the ratios (issue 26 item 6).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(path: str) -> None:
    """One traced run of the verify command on ``path`` (its output discarded); marks go to stderr."""
    t0 = time.perf_counter()
    marks: list[tuple[str, float]] = []
    forks: list[tuple[float, float]] = []  # (when it began, how long it took)
    cpu: dict[str, float] = {}  # this process's CPU seconds at the first fork and when the lanes are done

    def cpu_now() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return own.ru_utime + own.ru_stime

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter() - t0))

    from seal_platform_plugins.bfcl import fork_verify, verifier

    warm_up, start, verify_forked = verifier._warm_up, fork_verify._Lane.start, fork_verify.verify_forked

    def traced_warm_up(*args):
        mark("warm-up start")
        warm_up(*args)
        mark("warm-up end")

    def traced_start(self, *args):
        begun = time.perf_counter()
        cpu.setdefault("first fork", cpu_now())
        start(self, *args)
        forks.append((begun - t0, time.perf_counter() - begun))

    def traced_verify_forked(*args, **kwargs):
        out = verify_forked(*args, **kwargs)
        cpu["lanes done"] = cpu_now()
        mark("forked verification done")
        return out

    verifier._warm_up, fork_verify._Lane.start = traced_warm_up, traced_start
    fork_verify.verify_forked = traced_verify_forked
    mark("plugin modules imported")
    from seal_platform.cli import main

    mark("CLI imported")
    try:
        with open(os.devnull, "w") as sink:
            sys.stdout = sink
            main(["verify", "--benchmark", "bfcl", path])
    except SystemExit:
        pass
    finally:
        sys.stdout = sys.__stdout__
    mark("command done")
    for name, t in marks:
        print(f"  {t:6.3f} s  {name}", file=sys.stderr)
    if forks:
        took = sorted(ms for _, ms in forks)
        print(f"  {len(forks)} lane(s) forked from {forks[0][0]:.3f} s to {forks[-1][0] + forks[-1][1]:.3f} s, "
              f"{1000 * took[0]:.1f}-{1000 * took[-1]:.1f} ms a fork", file=sys.stderr)
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime
    print(f"  CPU: parent {total:.2f} s, children {kids.ru_utime + kids.ru_stime:.2f} s; "
          f"parent peak RSS {own.ru_maxrss / 1024:.0f} MB", file=sys.stderr)
    if len(cpu) == 2:
        print(f"  parent CPU: {cpu['first fork']:.3f} s before the first fork, "
              f"{cpu['lanes done'] - cpu['first fork']:.3f} s while the lanes ran, "
              f"{total - cpu['lanes done']:.3f} s after", file=sys.stderr)
    print(f"SCRIPT {time.perf_counter() - t0:.6f}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="a verify input file (JSON Lines)")
    parser.add_argument("--cases", action="store_true", help="use bench_verifier.py's 3,200 agreement cases")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.file)
        return 0
    if not args.file and not args.cases:
        parser.error("name a FILE or --cases")
    path = args.file
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_verifier import agreement_cases, compile_imports, write_cases

    compile_imports()  # every run from bytecode, as bench_verifier.py --commands times it
    if args.cases:
        path = write_cases(agreement_cases()[1])
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"verify phases on {path} ({usable} usable CPUs; load {os.getloadavg()[0]:.2f})")
    try:
        for run in range(1, args.runs + 1):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--child", path], capture_output=True, text=True,
                                  cwd=tempfile.gettempdir())
            wall = time.perf_counter() - started
            lines = done.stderr.rstrip().splitlines()
            script = float(lines.pop()[len("SCRIPT "):]) if lines and lines[-1].startswith("SCRIPT ") else None
            outside = f"; interpreter start and exit {wall - script:.2f} s" if script is not None else ""
            print(f"run {run}: {wall:.2f} s wall (rc {done.returncode}){outside}")
            print("\n".join(lines))
    finally:
        if args.cases:
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
