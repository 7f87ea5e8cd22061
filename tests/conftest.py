"""Fixtures shared across test folders, and how `make test` spreads the suite over processes.

`make test` runs the suite on pytest-xdist workers (``-n``, ``--dist loadgroup``). The tests that share one
machine-wide thing run on one worker, one after another: every test using a local Ray (:func:`local_ray`: one
cluster per worker would start several Rays on the machine) is in the group ``ray``. Everything else is spread
test by test. A test leaves no thread running behind it where it can help it: bfcl's verification forks only in
a process with no other thread (tests/bfcl/test_fork_verify.py checks it does), and a later test on the same
worker would take the other path.

One torch (OpenMP) thread per test process, unless ``OMP_NUM_THREADS`` says otherwise: the tests' models are
tiny, and two threads synchronising on every small kernel cost more than they share out; on a busy machine each
parallel region also waits for a descheduled thread (the GRPO step tests of test_architectures.py took several
times longer with two). The processes the tests start inherit it. `make test` spreads the suite over the cores
instead (one worker each).
"""

from __future__ import annotations

import json
import os

# Before anything imports torch (this file is read before the test modules are collected).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# tqdm's monitor thread, started by the first progress bar (vLLM's weight loading shows one), outlives the bar for
# the rest of the process (see the docstring); the tests' bars need no monitor.
try:
    import tqdm

    tqdm.tqdm.monitor_interval = 0
except ImportError:
    pass

# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment where the pytest that started it
# had neither: the CLI's consoles (rich) would take them for the terminal's size and keep it, so the tests of
# wide output got 80 columns. The first process notes the terminal variables it has; each worker keeps those.
_TERMINAL = ("COLUMNS", "LINES")
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["SEAL_TEST_TERMINAL"] = json.dumps({k: os.environ[k] for k in _TERMINAL if k in os.environ})
elif "SEAL_TEST_TERMINAL" in os.environ:
    _started_with = json.loads(os.environ["SEAL_TEST_TERMINAL"])
    for _key in _TERMINAL:
        if _key in _started_with:
            os.environ[_key] = _started_with[_key]
        else:
            os.environ.pop(_key, None)

import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "local_ray" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the tests of a module that need it (starting one costs ~6 s): the run's cluster as
    grpo's engine replicas and trainer groups get it (an ``OnRay``: the ``ray`` cluster, through the core's
    contract, and ``grpo.placement``); ``local_ray.cluster.settings`` is the ``settings.ray`` section.

    Module-scoped, not session-scoped: Ray's driver threads must not outlive the tests that use it, since the
    process's later tests may fork (bfcl's verification forks only when no other thread runs:
    tests/bfcl/test_fork_verify.py). These tests are one xdist group (above), which xdist hands out first."""
    pytest.importorskip("ray")
    from seal_platform_libs.policy.on_ray import OnRay
    from seal_platform_plugins.grpo.settings import PlacementSettings
    from seal_platform_plugins.ray_backend.cluster import RayCluster
    from seal_platform_plugins.ray_backend.settings import RaySettings

    ray = RayCluster(RaySettings(enabled=True, num_cpus=8, episode_cpus=0.25))
    ray.acquire()
    yield OnRay(ray, PlacementSettings(engine_cpus=1, trainer_cpus=1))
    ray.release()
