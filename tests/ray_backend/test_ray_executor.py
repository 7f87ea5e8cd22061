"""The ray executor on a local Ray: results in order, bugs propagate, and every kind of infrastructure loss
(an InfraError inside the episode, the time limit, a killed actor) becomes ``on_infra_failure``."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from seal_platform.infra import InfraError  # noqa: E402
from seal_platform_plugins.ray_backend.settings import RaySettings  # noqa: E402


@pytest.fixture(scope="module")
def executor(local_ray):
    from seal_platform_plugins.ray_backend.executor import RayExecutor

    ex = RayExecutor(RaySettings(enabled=True, num_cpus=4, episode_actors=2, episode_cpus=0.25), workers=4,
                     episode_timeout_s=3.0)
    yield ex
    ex.close()


def square(x):
    return x * x


def picky(x):
    if x == 2:
        raise InfraError("tool worker host went away")
    if x == 3:
        raise ValueError("a bug in the environment")
    return x


def slow(x):
    time.sleep(30 if x == 1 else 0.01)
    return x


def test_results_in_order_and_progress(executor):
    seen = []
    executor.on_progress = lambda done, total: seen.append((done, total))
    try:
        assert executor.map(square, range(10)) == [x * x for x in range(10)]
    finally:
        executor.on_progress = None
    assert seen[0] == (0, 10) and seen[-1] == (10, 10)


def test_infra_errors_are_stood_in_for_and_bugs_raise(executor):
    lost = lambda item, why: ("lost", item, why)  # noqa: E731
    assert executor.map(picky, [0, 1, 2], on_infra_failure=lost) == [
        0,
        1,
        ("lost", 2, "InfraError: tool worker host went away"),
    ]
    with pytest.raises(ValueError, match="a bug"):
        executor.map(picky, [0, 3], on_infra_failure=lost)
    with pytest.raises(InfraError):
        executor.map(picky, [2])


def test_an_episode_past_its_time_limit_is_an_infra_failure(executor):
    started = time.perf_counter()
    out = executor.map(slow, [0, 1, 2], on_infra_failure=lambda item, why: why)
    assert out[0] == 0 and out[2] == 2 and "time limit of 3 s" in out[1]
    assert time.perf_counter() - started < 20


def test_a_killed_actor_loses_its_episodes_only_and_is_replaced(executor, tmp_path):
    pids = executor.actor_pids()

    def kill_once_running():  # as soon as an episode runs in actor 0 (it leaves a marker file)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(tmp_path.glob(f"{pids[0]}-*")):
            time.sleep(0.05)
        os.kill(pids[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_once_running, daemon=True)
    killer.start()
    out = executor.map(
        sleepy, [(i, str(tmp_path)) for i in range(8)], on_infra_failure=lambda item, why: f"lost: {why}"
    )
    killer.join()
    lost = [o for o in out if isinstance(o, str)]
    assert 1 <= len(lost) <= 4 and all("Actor" in o or "Worker" in o for o in lost), out
    assert [o for o in out if not isinstance(o, str)] == [i for i, o in enumerate(out) if not isinstance(o, str)]
    assert executor.map(square, [3, 4]) == [9, 16]  # the actor came back
    assert executor.actor_pids()[0] != pids[0]


def sleepy(item):
    x, marks = item
    open(os.path.join(marks, f"{os.getpid()}-{x}"), "w").close()
    time.sleep(2.0)
    return x
