"""Compare two ablation results files (benchmarks/ablation.py's results.jsonl) figure by figure.

    .venv/bin/python benchmarks/compare_ablation_rows.py runs/before/results.jsonl runs/after/results.jsonl

Rows are paired by (recipe, seed). Every field is compared (held-out evaluations per step and category, the
per-step training reward, updates, dynamic sampling, labels, A-Patch weights, interface revisions, ...) except
those that measure the machine or name the run: wall times, load averages and the run id (``--ignore`` adds
more). Prints each differing field as ``recipe seed0 field.path: A != B`` and each row found in one file only;
exits 0 when every row is identical, 1 otherwise: the evidence that a change left an ablation's figures as they
were (two runs of the same recipes, seeds and ``--set`` on the code before and after).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Fields that measure the machine or name the run, not what the run computed.
VOLATILE = ("run_id", "wall_s", "wall_parts_s", "wall_s_is", "load", "load_at_resume")


def load_rows(path: Path) -> dict[tuple[str, Any], dict]:
    """The rows of a results file keyed by (recipe, seed); a (recipe, seed) appearing twice is an error."""
    rows: dict[tuple[str, Any], dict] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        key = (row["recipe"], row.get("seed"))
        if key in rows:
            raise SystemExit(f"{path}:{number}: a second row for recipe {key[0]!r} seed {key[1]}")
        rows[key] = row
    return rows


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """``path: a != b`` for every leaf where ``a`` and ``b`` differ (dict keys and list items by position)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b), key=str):
            here = f"{where}.{key}" if where else str(key)
            if key not in a or key not in b:
                found.append(f"{here}: {a.get(key, '<missing>')!r} != {b.get(key, '<missing>')!r}")
            else:
                found += differences(a[key], b[key], here)
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def compare(a: dict[tuple[str, Any], dict], b: dict[tuple[str, Any], dict], ignore: tuple[str, ...]) -> list[str]:
    """Every difference between two results files' rows, one line each, ``ignore``'s top-level fields left out."""
    lines = []
    for key in sorted(set(a) | set(b), key=str):
        name = f"{key[0]} seed{key[1]}"
        if key not in b:
            lines.append(f"{name}: only in the first file")
        elif key not in a:
            lines.append(f"{name}: only in the second file")
        else:
            mine = {k: v for k, v in a[key].items() if k not in ignore}
            theirs = {k: v for k, v in b[key].items() if k not in ignore}
            lines += [f"{name} {d}" for d in differences(mine, theirs)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--ignore", nargs="*", default=[], metavar="FIELD",
                        help=f"top-level fields not compared, besides {', '.join(VOLATILE)}")
    args = parser.parse_args(argv)
    a, b = load_rows(args.first), load_rows(args.second)
    lines = compare(a, b, (*VOLATILE, *args.ignore))
    for line in lines:
        print(line)
    if lines:
        print(f"{len(lines)} differences")
        return 1
    print(f"identical: {len(a)} rows ({', '.join(f'{r} seed{s}' for r, s in sorted(a, key=str))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
