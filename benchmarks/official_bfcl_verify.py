"""A thin command around bfcl_eval's official multi-turn checker, for timing against `seal-platform verify`.

    python benchmarks/official_bfcl_verify.py FILE.jsonl [--restore]

Reads the same input as ``seal-platform verify --benchmark bfcl`` (one ``{"task_id", "turns"}`` object per
line) and prints one ``{"task_id", "success"}`` per line. Entries and ground truth come from bfcl_eval's own
loaders; each transcript is checked by ``multi_turn_checker`` as bfcl_eval's runner calls it (a transcript
with the wrong number of turns is force-terminated; one step per turn), under a model name never used before
whose cached backend instances are deleted afterwards. ``--restore`` also puts bfcl's long-context module
data back before every check (the official backends mutate it in place), as tests/bfcl/official_cases.py's
official_verdict does; on the 3,200 benchmark cases the verdicts are the same without it, and it makes the
official side about 4x slower, so the fair (fastest) comparison leaves it off. Imports nothing from this
project.
"""

from __future__ import annotations

import copy
import json
import re
import sys


def _restore(live, saved) -> None:
    """Put ``saved`` back into ``live`` in place, keeping the identities of nested dicts and lists."""
    pairs = list(saved.items()) if isinstance(saved, dict) else list(enumerate(saved))
    if isinstance(live, dict):
        for key in [k for k in live if k not in saved]:
            del live[key]
    else:
        del live[len(saved):]
        live.extend(None for _ in range(len(saved) - len(live)))
    for key, value in pairs:
        current = live.get(key) if isinstance(live, dict) else live[key]
        if isinstance(current, dict) and isinstance(value, dict):
            current.clear()
            current.update(copy.deepcopy(value))
        elif isinstance(current, list) and isinstance(value, list):
            current[:] = copy.deepcopy(value)
        else:
            live[key] = copy.deepcopy(value)


def main(path: str, restore: bool = False) -> int:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    categories = sorted({r["task_id"].rsplit("_", 1)[0] for r in records})
    entries: dict[str, dict] = {}
    for category in categories:
        truth = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
        for entry in load_dataset_entry(category, include_language_specific_hint=False):
            entries[entry["id"]] = {**entry, "ground_truth": truth[entry["id"]]}
    snapshot = {k: copy.deepcopy(v) for k, v in vars(long_context).items()
                if not k.startswith("_") and isinstance(v, (dict, list))}

    out = []
    for number, record in enumerate(records):
        entry = entries[record["task_id"]]
        turns = record["turns"]
        if len(turns) != len(entry["ground_truth"]):
            out.append(json.dumps({"task_id": entry["id"], "success": False}))
            continue
        if restore:
            for name, saved in snapshot.items():  # undo the previous check's in-place edits
                _restore(getattr(long_context, name), saved)
        model = f"official{number}x"
        test_entry = {k: copy.deepcopy(v) for k, v in entry.items() if k != "ground_truth"}
        try:
            result = multi_turn_checker([[list(t)] if t else [] for t in turns], entry["ground_truth"], test_entry,
                                        entry["id"].rsplit("_", 1)[0], model)
            valid = bool(result["valid"])
        except Exception:  # the official checker asserts / getattr-fails in some states
            valid = False
        finally:
            space = vars(multi_turn_utils)
            prefix = re.sub(r"[-./:]", "_", model)
            for key in [k for k in space if k.startswith(prefix)]:
                del space[key]
        out.append(json.dumps({"task_id": entry["id"], "success": valid}))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], restore="--restore" in sys.argv[2:]))
