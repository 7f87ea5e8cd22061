"""The SQLite example: a seed database and its task file for the `mcp-server-sqlite` server from PyPI (a server
this project did not write; see docs/mcp.md, "A server from PyPI: SQLite"). Deterministic: the same files
every time, both committed.

    python examples/mcp-sqlite/make_tasks.py     # writes shop.sqlite3 and tasks.jsonl next to this file

The database is one table, ``products(id, name, category, price, stock)``. Categories of tasks:

* ``update``: change one product's stock or price (``write_query``); checked by the table's rows afterwards
  (a ``check`` call on the agent's server against the same call on a reference server).
* ``insert`` / ``delete``: add or remove a product; checked the same way.
* ``lookup``: a question answered by a ``read_query``; checked by what the agent's query returned
  (``check_result``: any query returning the ground truth's rows passes) and by the agent's final answer
  (``answer_contains``).
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRODUCTS = [("lamp", "home", 12.5, 4), ("kettle", "kitchen", 24.0, 9), ("mug", "kitchen", 6.0, 30),
            ("chair", "home", 45.0, 6), ("pan", "kitchen", 19.0, 11), ("rug", "home", 60.0, 2),
            ("cable", "office", 8.0, 35), ("stapler", "office", 11.0, 14), ("desk", "office", 120.0, 3),
            ("toaster", "kitchen", 32.0, 5)]
CHECK_ALL = {
    "name": "read_query",
    "arguments": {"query": "SELECT id, name, category, price, stock FROM products ORDER BY id"},
}


def seed_database(path: Path) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, category TEXT NOT NULL, "
                   "price REAL NOT NULL, stock INTEGER NOT NULL)")
        db.executemany("INSERT INTO products (name, category, price, stock) VALUES (?, ?, ?, ?)", PRODUCTS)
    db.close()


def _turn(rng: random.Random, kind: str) -> dict:
    name, category, price, stock = rng.choice(PRODUCTS)
    if kind == "update":
        if rng.random() < 0.5:
            new = rng.randint(0, 50)
            return {"user": f"Set the stock of the {name} to {new}.", "check": [CHECK_ALL],
                    "calls": [{"name": "write_query", "arguments": {
                        "query": f"UPDATE products SET stock = {new} WHERE name = '{name}'"}}]}
        new = rng.randint(2, 150)
        return {"user": f"The {name} now costs {new}. Update its price.", "check": [CHECK_ALL],
                "calls": [{"name": "write_query", "arguments": {
                    "query": f"UPDATE products SET price = {new} WHERE name = '{name}'"}}]}
    if kind == "insert":
        new_name = rng.choice(["fan", "vase", "clock", "shelf", "kettlebell", "notebook", "blender", "pillow"])
        cat = rng.choice(["home", "kitchen", "office"])
        cost, count = rng.randint(3, 90), rng.randint(1, 20)
        return {"user": f"Add a product named {new_name} in the {cat} category, priced {cost}, with {count} in stock.",
                "check": [CHECK_ALL], "calls": [{"name": "write_query", "arguments": {
                    "query": f"INSERT INTO products (name, category, price, stock) VALUES "
                             f"('{new_name}', '{cat}', {cost}, {count})"}}]}
    if kind == "delete":
        return {
            "user": f"We no longer sell the {name}. Remove it from the products table.",
            "check": [CHECK_ALL],
            "calls": [{"name": "write_query", "arguments": {"query": f"DELETE FROM products WHERE name = '{name}'"}}],
        }
    if rng.random() < 0.5:
        count = sum(1 for p in PRODUCTS if p[1] == category)
        return {"user": f"How many products are in the {category} category?", "check_result": True,
                "answer_contains": [str(count)], "calls": [{"name": "read_query", "arguments": {
                    "query": f"SELECT COUNT(*) FROM products WHERE category = '{category}'"}}]}
    return {
        "user": f"How many {name}s do we have in stock?",
        "check_result": True,
        "answer_contains": [str(stock)],
        "calls": [{"name": "read_query", "arguments": {"query": f"SELECT stock FROM products WHERE name = '{name}'"}}],
    }


def make(n_train: int = 120, n_eval: int = 40, seed: int = 3) -> list[dict]:
    tasks = []
    for split, n in (("train", n_train), ("eval", n_eval)):
        rng = random.Random(f"mcp-sqlite:{seed}:{split}")
        for i in range(n):
            kind = ("update", "insert", "delete", "lookup")[i % 4]
            tasks.append({"id": f"{split}-{i}", "split": split, "category": kind, "turns": [_turn(rng, kind)]})
    return tasks


if __name__ == "__main__":
    seed_database(HERE / "shop.sqlite3")
    with open(HERE / "tasks.jsonl", "w", encoding="utf-8") as out:
        for task in make():
            out.write(json.dumps(task, sort_keys=True) + "\n")
