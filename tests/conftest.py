"""Fixtures shared across test folders."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray for every test that needs it (starting one costs ~6 s): the run's cluster as grpo's engine
    replicas and trainer groups get it (an ``OnRay``: the ``ray`` cluster, through the core's contract, and
    ``grpo.placement``); ``local_ray.cluster.settings`` is the ``settings.ray`` section."""
    pytest.importorskip("ray")
    from seal_platform_libs.policy.on_ray import OnRay
    from seal_platform_plugins.grpo.settings import PlacementSettings
    from seal_platform_plugins.ray_backend.cluster import RayCluster
    from seal_platform_plugins.ray_backend.settings import RaySettings

    ray = RayCluster(RaySettings(enabled=True, num_cpus=8, episode_cpus=0.25))
    ray.acquire()
    yield OnRay(ray, PlacementSettings(engine_cpus=1, trainer_cpus=1))
    ray.release()
