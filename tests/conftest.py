"""Fixtures shared across test folders."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray for every test that needs it (starting one costs ~6 s); the recipe section it uses."""
    pytest.importorskip("ray")
    from seal_platform.config import RayConfig
    from seal_platform_plugins.ray_backend import cluster

    config = RayConfig(enabled=True, num_cpus=8, engine_cpus=1, trainer_cpus=1, episode_cpus=0.25)
    cluster.acquire(config)
    yield config
    cluster.release()
