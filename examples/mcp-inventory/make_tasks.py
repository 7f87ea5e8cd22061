"""Generate the example's task file (deterministic: the same file every time; committed as tasks.jsonl).

    python examples/mcp-inventory/make_tasks.py > examples/mcp-inventory/tasks.jsonl

One or two user turns per task, one ground-truth call per turn, each turn checked by ``get_item`` on the item
it touched. Categories: ``named`` (the request names the tool), ``direct`` (the tools' own words) and
``paraphrase`` (everyday words to map onto the enumerated locations and statuses).
"""

from __future__ import annotations

import json
import random

ITEMS = ("widget", "gadget", "bolt", "lamp", "cable", "chair")
LOCATIONS = {
    "warehouse": ["warehouse", "depot"],
    "store": ["store", "shop floor"],
    "backroom": ["backroom", "back room"],
}
STATUSES = {"active": ["active", "available again"], "discontinued": ["discontinued", "no longer sold"],
            "backorder": ["backorder", "on back order"]}
CATEGORIES = ("named", "direct", "paraphrase")


def _turn(rng: random.Random, style: str) -> dict:
    item = rng.choice(ITEMS)
    kind = rng.choice(["move", "status", "add", "remove"])
    if kind == "move":
        loc = rng.choice(list(LOCATIONS))
        word = rng.choice(LOCATIONS[loc]) if style == "paraphrase" else loc
        text = {"named": f"Use move_item to move the {item} to the {word}.",
                "direct": f"Move the {item} to the {word}.",
                "paraphrase": f"Put the {item}s in the {word}."}[style]
        call = {"name": "move_item", "arguments": {"name": item, "location": loc}}
    elif kind == "status":
        status = rng.choice(list(STATUSES))
        word = rng.choice(STATUSES[status]) if style == "paraphrase" else status
        text = {"named": f"Use set_status to set the {item} status to {word}.",
                "direct": f"Set the status of {item} to {word}.",
                "paraphrase": f"Mark the {item} as {word}."}[style]
        call = {"name": "set_status", "arguments": {"name": item, "status": status}}
    elif kind == "add":
        qty = rng.randint(1, 20)
        loc = rng.choice(list(LOCATIONS))
        word = rng.choice(LOCATIONS[loc]) if style == "paraphrase" else loc
        text = {"named": f"Use add_stock to add {qty} {item} at the {word}.",
                "direct": f"Add {qty} units of {item} at the {word}.",
                "paraphrase": f"We received {qty} more {item}s for the {word}."}[style]
        call = {"name": "add_stock", "arguments": {"name": item, "quantity": qty, "location": loc}}
    else:
        qty = 1
        text = {"named": f"Use remove_stock to remove {qty} {item}.",
                "direct": f"Remove {qty} unit of {item} from stock.",
                "paraphrase": f"We just sold one {item}."}[style]
        call = {"name": "remove_stock", "arguments": {"name": item, "quantity": qty}}
    return {"user": text, "calls": [call], "check": [{"name": "get_item", "arguments": {"name": item}}]}


def make(n_train: int = 240, n_eval: int = 60, seed: int = 7) -> list[dict]:
    tasks = []
    for split, n in (("train", n_train), ("eval", n_eval)):
        rng = random.Random(f"mcp-inventory:{seed}:{split}")
        for i in range(n):
            style = CATEGORIES[i % len(CATEGORIES)]
            turns = [_turn(rng, style) for _ in range(rng.randint(1, 2))]
            tasks.append({"id": f"{split}-{i}", "split": split, "category": style, "turns": turns})
    return tasks


if __name__ == "__main__":
    for task in make():
        print(json.dumps(task, sort_keys=True))
