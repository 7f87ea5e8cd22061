"""Time-boxed fuzzing of everything that reads untrusted input (run by hand, outside `make test`).

The same strategies and checks as tests/bfcl/test_untrusted_input.py, run for a time budget per target
instead of a fixed number of cases: hermes and python message parsing, the BFCL call parser, the executor's
argument checks (in-process Backend), the diagnoser (trajectories and verify traces) and the verify input
path (one record per line). Prints the number of cases tried per target and any failing example (each
becomes a regression test in test_untrusted_input.py).

    .venv/bin/python benchmarks/fuzz_untrusted.py [--seconds-per-target 60]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "bfcl"))

import untrusted as u  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from seal_platform_libs.toolenv.formats import HermesFormat, PythonFormat  # noqa: E402


def _targets():
    from seal_platform.verify import score_line
    from seal_platform_plugins.bfcl.backend import Backend
    from seal_platform_plugins.bfcl.data import load_tasks
    from seal_platform_plugins.bfcl.environment import BfclEnvironment
    from seal_platform_plugins.bfcl.executor import _payload_for_worker
    from seal_platform_plugins.bfcl.settings import BfclSettings

    task = next(t for t in load_tasks(split="all") if "GorillaFileSystem" in t.payload["involved_classes"])
    backend = Backend.for_payload(_payload_for_worker(task))
    names = sorted(backend.method_names)
    env = BfclEnvironment(BfclSettings(executor_workers=1))

    def verify(lines):
        for number, line in enumerate(lines, 1):
            record = score_line(env, number, line)
            assert isinstance(record, dict) and ("error" in record or "success" in record)

    return env, {
        "hermes parse": (u.hermes_messages(), lambda t: u.check_format_parse(HermesFormat(), t)),
        "python parse": (u.python_messages(), lambda t: u.check_format_parse(PythonFormat(), t)),
        "call parser": (st.one_of(u.python_calls(), u.fragments, st.text()), u.check_parse_call),
        "executor argument checks": (u.parsed_calls(names), lambda c: u.check_backend_execute(backend, c)),
        "diagnoser (trajectories)": (u.trajectories(), u.check_diagnose),
        "diagnoser (verify traces)": (st.lists(u.verdict_mappings, max_size=3), u.check_label_turns),
        "verify input lines": (u.verify_lines_strategy, verify),
    }


def fuzz(strategy, check, budget_s: float, chunk: int = 500) -> tuple[int, str | None]:
    """Run ``check`` on fresh examples until the budget is spent; (cases tried, first failure or None)."""
    count = 0

    def counted(value):
        nonlocal count
        count += 1
        check(value)

    run = settings(max_examples=chunk, deadline=None, database=None, derandomize=False,
                   suppress_health_check=list(HealthCheck))(given(strategy)(counted))
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        try:
            run()
        except BaseException:  # hypothesis re-raises the shrunk failure with its example in the notes
            return count, traceback.format_exc(limit=6)
    return count, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds-per-target", type=float, default=60.0)
    parser.add_argument("--only", default=None, help="run the targets whose name contains this")
    args = parser.parse_args()
    env, targets = _targets()
    total, failures = 0, 0
    try:
        for name, (strategy, check) in targets.items():
            if args.only and args.only not in name:
                continue
            started = time.monotonic()
            count, failure = fuzz(strategy, check, args.seconds_per_target)
            total += count
            status = "ok" if failure is None else "FAILED"
            print(f"{name:28s} {count:8d} cases in {time.monotonic() - started:6.1f} s  {status}", flush=True)
            if failure:
                failures += 1
                print(failure, flush=True)
    finally:
        env.close()
    print(f"total: {total} cases, {failures} failing target(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
