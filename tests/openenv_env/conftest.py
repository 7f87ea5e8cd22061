"""Real local OpenEnv-protocol servers for the openenv tests (started as processes on free ports), and the tiny
random model of the grpo tests (tests/grpo/conftest.py, loaded by path) for the end-to-end run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("httpx")
pytest.importorskip("websockets")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SERVER = ROOT / "examples" / "openenv-thermostat" / "server.py"
BAD_SERVER = Path(__file__).with_name("bad_server.py")


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    import httpx

    from seal_platform_plugins.openenv.client import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, *[a.replace("{port}", str(port)) for a in args]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the test server {args} did not start")


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def thermostat_url() -> Iterator[str]:
    """The example thermostat server, running."""
    proc, url = _start([str(EXAMPLE_SERVER), "--port", "{port}"])
    yield url
    _stop(proc)


@pytest.fixture
def bad_server() -> Iterator[Callable[[str], str]]:
    """``bad_server(mode)``: the URL of a running misbehaving server (see bad_server.py)."""
    procs: list[subprocess.Popen] = []

    def start(mode: str) -> str:
        proc, url = _start([str(BAD_SERVER), "{port}", mode])
        procs.append(proc)
        return url

    yield start
    for proc in procs:  # a hanging server's uvicorn waits for its open request: no grace worth waiting for
        _stop(proc, grace_s=0.2)


_spec = importlib.util.spec_from_file_location("_grpo_conftest_openenv", ROOT / "tests" / "grpo" / "conftest.py")
_grpo = importlib.util.module_from_spec(_spec)
try:
    _spec.loader.exec_module(_grpo)
except pytest.skip.Exception:  # no torch/transformers: only the end-to-end run needs them (and skips)
    pass
else:
    smollm2_dir = _grpo.smollm2_dir
    tokenizer = _grpo.tokenizer
    tiny_model_dir = _grpo.tiny_model_dir
