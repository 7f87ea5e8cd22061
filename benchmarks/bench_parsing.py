"""Parsing cost of long model messages (run by hand; target: a 64 KB message parses in under 50 ms, and the
cost grows linearly with the length).

    .venv/bin/python benchmarks/bench_parsing.py [--repeats 5]

Shapes, each at 8, 16, 32 and 64 KB: python-format call lists (many small calls: the worst case for the
Python parser), one call with a long string argument, prose, hermes blocks, unclosed hermes tags (quadratic
before), nested brackets, long digit runs. Prints the best of ``--repeats`` runs per shape and size, in CPU time of this process (wall time on a busy
machine measures the other processes).
"""

from __future__ import annotations

import argparse
import time

from seal_platform_plugins.bfcl.formats import HermesFormat, PythonFormat

SIZES = (8_000, 16_000, 32_000, 64_000)


def shapes(n: int) -> dict[str, tuple[object, str]]:
    one = "f(a=1, b='x')"
    block = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n'
    return {
        "python: many small calls": (PythonFormat(), "[" + ", ".join([one] * (n // (len(one) + 2))) + "]"),
        "python: 512 calls (most kept)": (PythonFormat(), "[" + ", ".join(
            [f"f(a=1, b='{'x' * max(1, n // 512 - 16)}')"] * 512) + "]"),
        "python: one long argument": (PythonFormat(), "[echo(content='" + "x" * (n - 20) + "')]"),
        "python: prose": (PythonFormat(), ("The answer is that we need to think about it. " * (n // 46))[:n]),
        "python: nested brackets": (PythonFormat(), "[" * (n // 2) + "]" * (n // 2)),
        "hermes: many blocks": (HermesFormat(), block * (n // len(block))),
        "hermes: unclosed tags": (HermesFormat(), "<tool_call>" * (n // 11)),
        "hermes: long digits": (HermesFormat(), '<tool_call>{"name": "f", "arguments": {"a": ' + "9" * (n - 60) + "}}</tool_call>"),
        "hermes: nested brackets": (HermesFormat(), "<tool_call>" + "[" * (n // 2 - 12) + "]" * (n // 2 - 12) + "</tool_call>"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'shape':28s}" + "".join(f"{n // 1000:>8d} KB" for n in SIZES))
    worst = 0.0
    for name in shapes(1000):
        row = []
        for n in SIZES:
            fmt, text = shapes(n)[name]
            best = float("inf")
            for _ in range(args.repeats):
                start = time.process_time()  # CPU time: the shared machine's load does not inflate it
                fmt.parse(text)  # type: ignore[attr-defined]
                best = min(best, time.process_time() - start)
            row.append(best)
        worst = max(worst, row[-1])
        print(f"{name:28s}" + "".join(f"{1000 * t:8.1f} ms" for t in row))
    print(f"slowest 64 KB message: {1000 * worst:.1f} ms (target < 50 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
