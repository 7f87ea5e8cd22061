"""A small inventory service as a stdio MCP server (the example of docs/mcp.md, used by the tests);
``server.py --http PORT`` serves it over streamable HTTP instead (one state shared by all sessions).

Five tools over a fixed starting stock, with required arguments and enumerated values, plus ``reset`` (the
server's own per-episode reset, for a recipe that keeps one process). State lives in this process only.

Test switches (environment variables, set in a recipe's server ``env``; off by default):
``INVENTORY_HANG_ON=<tool>`` the tool never answers; ``INVENTORY_CRASH_ON=<tool>`` the process exits in the
tool; ``INVENTORY_HOSTILE=1`` ``get_item`` answers with an oversized result full of control characters;
``INVENTORY_GARBAGE_ON=<tool>`` the process writes a stray non-JSON line to stdout in the tool (then answers).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

Location = Literal["warehouse", "store", "backroom"]
Status = Literal["active", "discontinued", "backorder"]
START = {
    "widget": {"quantity": 10, "location": "warehouse", "status": "active"},
    "gadget": {"quantity": 4, "location": "store", "status": "active"},
    "bolt": {"quantity": 120, "location": "backroom", "status": "active"},
    "lamp": {"quantity": 2, "location": "store", "status": "backorder"},
    "cable": {"quantity": 35, "location": "warehouse", "status": "active"},
    "chair": {"quantity": 6, "location": "store", "status": "active"},
}
STOCK: dict[str, dict] = copy.deepcopy(START)

mcp = MCPServer("inventory")


def _switches(tool: str) -> None:
    if os.environ.get("INVENTORY_HANG_ON") == tool:
        time.sleep(3600)
    if os.environ.get("INVENTORY_CRASH_ON") == tool:
        os._exit(3)
    if os.environ.get("INVENTORY_GARBAGE_ON") == tool:
        sys.stdout.write("this is not json-rpc\n")
        sys.stdout.flush()


def _item(name: str) -> dict:
    if name not in STOCK:
        raise ToolError(f"no item named {name!r}; known items: {', '.join(sorted(STOCK))}")
    return STOCK[name]


@mcp.tool()
def get_item(name: str) -> str:
    """Look up one item: its quantity, location and status."""
    _switches("get_item")
    if os.environ.get("INVENTORY_HOSTILE") == "1":
        return "\x1b[31m\x00\x07\u202e" + "A" * 200_000  # terminal escapes, NUL, bell, bidi override; 200 kB
    return json.dumps({"name": name, **_item(name)}, sort_keys=True)


@mcp.tool()
def list_items(location: Location | None = None) -> str:
    """List the items (all of them, or those at one location)."""
    _switches("list_items")
    names = sorted(n for n, it in STOCK.items() if location is None or it["location"] == location)
    return json.dumps(names)


@mcp.tool()
def add_stock(name: str, quantity: int, location: Location) -> str:
    """Add units of an item at a location (a new item is created there)."""
    _switches("add_stock")
    if not 1 <= quantity <= 1000:
        raise ToolError("quantity must be between 1 and 1000")
    item = STOCK.setdefault(name, {"quantity": 0, "location": location, "status": "active"})
    item["quantity"] += quantity
    item["location"] = location
    return json.dumps({"name": name, "quantity": item["quantity"]})


@mcp.tool()
def remove_stock(name: str, quantity: int) -> str:
    """Take units of an item out of stock."""
    _switches("remove_stock")
    item = _item(name)
    if not 1 <= quantity <= item["quantity"]:
        raise ToolError(f"quantity must be between 1 and {item['quantity']} (in stock)")
    item["quantity"] -= quantity
    return json.dumps({"name": name, "quantity": item["quantity"]})


@mcp.tool()
def move_item(name: str, location: Location) -> str:
    """Move an item to another location."""
    _switches("move_item")
    _item(name)["location"] = location
    return json.dumps({"name": name, "location": location})


@mcp.tool()
def set_status(name: str, status: Status) -> str:
    """Set an item's status."""
    _switches("set_status")
    _item(name)["status"] = status
    return json.dumps({"name": name, "status": status})


@mcp.tool()
def reset() -> str:
    """Restore the starting stock (the per-episode reset)."""
    STOCK.clear()
    STOCK.update(copy.deepcopy(START))
    return "ok"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":  # streamable HTTP at http://127.0.0.1:PORT/mcp
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
