"""No silent fallback to the CPU: a recipe asking for a GPU this machine cannot give stops before any work
(grpo's ``check_machine``). These tests run on a machine without a usable GPU (they are skipped on one)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from seal_platform.config import RunConfig  # noqa: E402
from seal_platform_libs.policy.devices import MIN_DRIVER, cuda_unusable_reason, problems  # noqa: E402
from seal_platform_libs.policy.loading import PolicySettings  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402
from seal_platform_plugins.ray_backend.cluster import RayCluster  # noqa: E402
from seal_platform_plugins.ray_backend.settings import RaySettings  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusals on a machine without CUDA")


def _config() -> RunConfig:
    return RunConfig(environment="bfcl", stages={"optimize": "grpo"})


def _ray(address: str | None = None) -> RayCluster:
    """The run's cluster when the recipe enables Ray (``settings.ray``), as the core hands it to check_machine."""
    return RayCluster(RaySettings(enabled=True, address=address))


def _grpo(train_workers: int, **placement: float) -> GRPOSettings:
    return GRPOSettings(train_workers=train_workers, placement=placement)


def test_asking_for_cuda_without_it_is_one_paragraph_saying_why_and_what_to_do():
    (problem,) = problems(_config(), PolicySettings(device="cuda"), uses_policy=True)
    assert "settings.policy.device is 'cuda'" in problem and cuda_unusable_reason() in problem
    assert "does not fall back to the CPU" in problem and "settings.policy.device=cpu" in problem
    assert "\n" not in problem
    if not torch.version.cuda:
        assert "CPU-only build" in problem and "CUDA=1" in problem


def test_what_a_cpu_run_asks_for_passes():
    assert problems(_config(), PolicySettings(device="cpu"), uses_policy=True) == []
    # A recipe that never loads grpo's policy is not grpo's to judge.
    assert problems(_config(), PolicySettings(device="cuda"), uses_policy=False) == []


def test_ray_gpus_without_trainer_gpus_and_gpu_actors_on_a_cpu_machine_are_refused():
    config, gpus = _config(), {"engine_gpus": 1.0, "trainer_gpus": 0.0}
    found = problems(config, PolicySettings(device="cpu"), True, _grpo(2, **gpus), _ray())
    assert any("settings.grpo.placement.trainer_gpus is 0 with 2 trainer actors" in p for p in found)
    assert any("places Ray actors on GPUs" in p for p in found)  # local Ray on a machine with no usable GPU
    # One trainer in the driver: trainer_gpus does not apply; GPU actors are still impossible here.
    assert not any(
        "trainer actors" in p for p in problems(config, PolicySettings(device="cpu"), True, _grpo(1, **gpus), _ray())
    )
    # Without Ray the placement is not used: nothing placed on GPUs.
    assert problems(config, PolicySettings(device="cpu"), True, _grpo(2, **gpus), None) == []
    # On a cluster (settings.ray.address) the GPUs are the cluster's: nothing to check on this machine.
    remote = _grpo(2, engine_gpus=1.0, trainer_gpus=1.0)
    assert problems(config, PolicySettings(device="cpu"), True, remote, _ray("ray://head:10001")) == []


def test_the_minimum_drivers_are_ordered_by_cuda_version():
    assert sorted(MIN_DRIVER) == list(MIN_DRIVER) and sorted(MIN_DRIVER.values()) == list(MIN_DRIVER.values())


def test_run_with_device_cuda_exits_within_seconds_and_starts_no_run(tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    started = time.perf_counter()
    result = CliRunner().invoke(cli, ["run", "seal-embedded", "settings.policy.device=cuda", f"runs_dir={tmp_path}",
                                      "--quiet"])
    assert result.exit_code == 2 and time.perf_counter() - started < 30
    assert "settings.policy.device is 'cuda'" in result.output and "Traceback" not in result.output
    store = tmp_path / "store.sqlite"
    assert not store.exists() or RunStore(f"sqlite:///{store}").list_runs() == []
