"""The thinnest command around bfcl_eval's official multi-turn checker, for timing against `seal-platform verify`.

    python benchmarks/official_bfcl_verify.py FILE.jsonl

Reads the same input as ``seal-platform verify --benchmark bfcl`` (one ``{"task_id", "turns"}`` object per
line) and prints one ``{"task_id", "success"}`` per line. The entries and their ground truth are read with
``json`` straight from the data files of the installed ``bfcl_eval`` package (``bfcl_eval/data/
BFCL_v4_<category>.json`` and ``data/possible_answer/``; JSON Lines), not through bfcl's
``load_dataset_entry`` loaders (which also attach function docs and hints the checker never reads). Each
transcript is checked by ``multi_turn_checker`` as bfcl_eval's runner calls it: a transcript with the wrong
number of turns is force-terminated, each turn is one step, and the checker runs under a model name never
used before whose cached backend instances are deleted afterwards (the checker caches instances by model
name and task id; reusing a name would carry one check's state into the next). The checker deep-copies the
initial config itself, so the entry is passed as read. Imports nothing from this project.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys


def data_dir() -> str:
    """The installed bfcl_eval package's data directory (found without importing the package)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("bfcl_eval is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(path: str) -> int:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    records = read_jsonl(path)
    root = data_dir()
    entries: dict[str, dict] = {}
    truth: dict[str, list] = {}
    for category in sorted({r["task_id"].rsplit("_", 1)[0] for r in records}):
        name = f"BFCL_v4_{category}.json"
        entries.update((e["id"], e) for e in read_jsonl(os.path.join(root, name)))
        truth.update((e["id"], e["ground_truth"]) for e in read_jsonl(os.path.join(root, "possible_answer", name)))

    space = vars(multi_turn_utils)
    out = []
    for number, record in enumerate(records):
        task_id, turns = record["task_id"], record["turns"]
        ground_truth = truth[task_id]
        if len(turns) != len(ground_truth):
            out.append(json.dumps({"task_id": task_id, "success": False}))
            continue
        model = f"official{number}x"
        try:
            result = multi_turn_checker([[list(t)] if t else [] for t in turns], ground_truth, entries[task_id],
                                        task_id.rsplit("_", 1)[0], model)
            valid = bool(result["valid"])
        except Exception:  # the official checker asserts / getattr-fails in some states
            valid = False
        finally:
            prefix = re.sub(r"[-./:]", "_", model)
            for key in [k for k in space if k.startswith(prefix)]:
                del space[key]
        out.append(json.dumps({"task_id": task_id, "success": valid}))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
