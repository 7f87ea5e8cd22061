"""The mcp environment over streamable HTTP, against the real example server run as `server.py --http PORT` (one
process, one state shared by every session: episodes are isolated by the server's reset tool)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from seal_platform.types import Generation, Interface, Message, SamplingParams
from seal_platform_plugins.mcp.diagnoser import diagnose
from seal_platform_plugins.mcp.environment import MCPEnvironment, MCPUnavailable
from seal_platform_plugins.mcp.episode import run_episodes
from seal_platform_plugins.mcp.settings import MCPSettings

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "examples/mcp-inventory/server.py")
TASKS = str(ROOT / "examples/mcp-inventory/tasks.jsonl")
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=64, stop=["</tool_call>"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server() -> Iterator[Callable[..., str]]:
    """``http_server(**env)``: the MCP endpoint URL of a running example server (with test switches in env)."""
    procs = []

    def start(**env: str) -> str:
        import os

        port = _free_port()
        proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return f"http://127.0.0.1:{port}/mcp"
            assert proc.poll() is None, "the example server exited"
            time.sleep(0.1)
        raise RuntimeError("the example server did not listen")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def settings(url: str, timeout_s: float = 5, **kw) -> MCPSettings:
    server = {"name": "inventory", "url": url, "timeout_s": timeout_s}
    return MCPSettings.model_validate({"servers": [server], "tasks": TASKS, "hidden_tools": ["reset"],
                                       "isolation": "reset", "reset_tool": "reset", **kw})


class Scripted:
    name = "scripted"

    def __init__(self, reply):
        self.reply = reply

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        return [Generation(text=self.reply(next(m.content for m in reversed(c) if m.role == "user"), c),
                           token_ids=[1], logprobs=[-0.1]) for c in conversations]


def gt_engine(tasks) -> Scripted:
    gt = {turn["user"]: turn["calls"][0] for t in tasks for turn in t.payload["turns"]}
    return Scripted(lambda user, conv: (f"<tool_call>{json.dumps(gt[user])}</tool_call>"
                                        if conv[-1].role == "user" else "done"))


def test_tools_and_episodes_over_streamable_http_with_reset_isolation(http_server):
    env = MCPEnvironment(settings(http_server()))
    assert [d["name"] for d in env.docs()] == ["get_item", "list_items", "add_stock", "remove_stock", "move_item",
                                               "set_status"]
    tasks = [t for t in env.tasks("train") if t.payload["turns"][0]["calls"][0]["name"] == "add_stock"][:1]
    # The same adding task twice on one shared server: without the reset the second would see the first's stock.
    trajs = run_episodes(env, gt_engine(tasks), [(tasks[0], "g", 0), (tasks[0], "g", 1)], Interface(), SAMPLING)
    assert [t.infra_failure for t in trajs] == [None, None] and [t.reward for t in trajs] == [1.0, 1.0]
    assert trajs[0].turn_verdicts[0].checks["check_results"] == trajs[1].turn_verdicts[0].checks["check_results"]
    assert {label.label for label in diagnose(trajs)} == {"pass"}


def test_a_url_server_needs_an_isolation_it_can_have():
    with pytest.raises(ValueError, match="cannot start a fresh process per episode"):
        MCPSettings.model_validate({"servers": [{"name": "s", "url": "http://127.0.0.1:1/mcp"}], "tasks": TASKS})
    ok = MCPSettings.model_validate({"servers": [{"name": "s", "url": "http://127.0.0.1:1/mcp",
                                                  "per_session_state": True}], "tasks": TASKS})
    assert not ok.shared_state()
    assert settings("http://127.0.0.1:1/mcp").shared_state()
    with pytest.raises(ValueError, match="exactly one of them"):
        MCPSettings.model_validate({"servers": [{"name": "s", "url": "http://x/mcp", "command": "python"}]})
    with pytest.raises(ValueError, match="exactly one of them"):
        MCPSettings.model_validate({"servers": [{"name": "s"}]})


def test_an_unreachable_url_is_one_paragraph_naming_it():
    url = f"http://127.0.0.1:{_free_port()}/mcp"
    with pytest.raises(MCPUnavailable) as info:
        MCPEnvironment(settings(url)).docs()
    assert url in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("switch", [{"INVENTORY_HANG_ON": "get_item"}, {"INVENTORY_CRASH_ON": "move_item"}])
def test_a_failing_http_server_masks_the_episode_and_the_run_goes_on(http_server, switch):
    url = http_server(**switch)
    env = MCPEnvironment(settings(url, timeout_s=1.0, n_eval=3))
    tasks = env.tasks("eval")[:3]
    trajs = run_episodes(env, gt_engine(tasks), [(t, f"g{i}", 0) for i, t in enumerate(tasks)], Interface(), SAMPLING)
    assert len(trajs) == 3
    failed = [t for t in trajs if t.infra_failure]
    assert failed, "the failing server must end the episode as an infrastructure failure"
    assert all(t.finish == "infra_failure" and url in t.infra_failure for t in failed)
    assert {label.trajectory_id for label in diagnose(trajs)} == {t.id for t in trajs if not t.infra_failure}
