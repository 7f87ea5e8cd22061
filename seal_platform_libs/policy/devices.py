"""Can this machine give the recipe the devices it asks for? (the grpo plugin's ``check_machine``)

A run never falls back to the CPU when it asked for a GPU: a 7B update on CPUs over gloo "works" for hours and
learns nothing useful. What counts as asking for a GPU:

* ``settings.policy.device`` naming a CUDA device (``cuda``, ``cuda:1``);
* ``device: auto`` (the default) on a machine that has an NVIDIA GPU: auto means the GPU there, so a GPU that
  torch cannot use is an error, not a reason to use the CPU (a machine without any NVIDIA GPU gets the CPU);
* Ray placements with GPUs (``ray.trainer_gpus`` / ``ray.engine_gpus`` above 0).

Each problem is one paragraph: what was asked, what this machine has, what to do. Only cheap probes: torch's
build and ``torch.cuda.is_available()``, ``/proc/driver/nvidia/version`` and ``nvidia-smi`` for the driver.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .settings import RuntimeSettings

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.registry import Cluster

# The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA toolkit release notes, "minor version
# compatibility": 12.x needs >= 525.60.13, 13.x >= 580.65.06, 11.x >= 450.80.02).
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}


def driver_version() -> tuple[int, ...] | None:
    """The NVIDIA kernel driver's version on this machine, or None when there is no NVIDIA driver."""
    proc = Path("/proc/driver/nvidia/version")
    text = proc.read_text(errors="replace") if proc.is_file() else ""
    if not text and shutil.which("nvidia-smi"):
        try:
            text = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
    match = re.search(r"\b(\d{3,})\.(\d+)(?:\.(\d+))?\b", text)
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU (with its kernel driver) is present, whether or not torch can use it."""
    return driver_version() is not None or Path("/dev/nvidia0").exists()


def _fmt(version: tuple[int, ...]) -> str:
    return ".".join(str(v) for v in version)


def cuda_unusable_reason() -> str | None:
    """Why torch cannot use CUDA here (None when it can): a CPU build of torch, no NVIDIA driver, or a driver
    older than the one torch's CUDA needs."""
    import torch

    if torch.cuda.is_available():
        return None
    built = torch.version.cuda
    if not built:
        return (f"this torch ({torch.__version__}) is a CPU-only build; install the CUDA build (`make install "
                "CUDA=1`, or pip's `cuda` extra) on a machine with an NVIDIA GPU")
    driver = driver_version()
    if driver is None:
        return (
            f"torch {torch.__version__} is built for CUDA {built}, but no NVIDIA driver was found (no GPU, or the "
            "driver is not loaded)"
        )
    major = int(built.split(".")[0])
    need = MIN_DRIVER.get(major)
    if need is not None and driver < need:
        return (f"torch {torch.__version__} is built for CUDA {built}, which needs NVIDIA driver >= {_fmt(need)}; "
                f"this machine's driver is {_fmt(driver)}: update the driver, or install vLLM's and torch's builds "
                "for an older CUDA together (see docs/install.md, 'The CUDA stack')")
    return (f"torch {torch.__version__} (CUDA {built}) cannot use the GPU although driver {_fmt(driver)} is loaded "
            "(torch.cuda.is_available() is False: check CUDA_VISIBLE_DEVICES and the container's GPU access)")


def problems(config: Any, policy: Any, uses_policy: bool, grpo: RuntimeSettings | None = None,
             cluster: Cluster | None = None) -> list[str]:
    """The device problems of a run of ``config`` whose policy settings are ``policy`` (``uses_policy``: the
    run loads grpo's policy, i.e. trains with grpo or rolls out on one of its engines; ``grpo``: its settings,
    whose ``train_workers`` above 1 run the update in trainer actors placed by Ray per ``grpo.placement`` when
    ``cluster``, the run's cluster (:class:`seal_platform.registry.Cluster`), is Ray)."""
    from .on_ray import RAY

    grpo = grpo or RuntimeSettings()
    out: list[str] = []
    place, train_workers = grpo.placement, grpo.train_workers
    on_ray = cluster is not None and cluster.name == RAY
    ray_gpus = bool(on_ray and (place.trainer_gpus > 0 or place.engine_gpus > 0))
    ray_trainers = on_ray and train_workers > 1 and config.stages.optimize == "grpo"
    if uses_policy and ray_trainers and place.engine_gpus > 0 and place.trainer_gpus == 0:
        out.append(
            f"settings.grpo.placement.engine_gpus is {place.engine_gpus} but settings.grpo.placement.trainer_gpus is 0 "
            f"with {train_workers} trainer actors: Ray would hide the GPUs from them and the update would run on their "
            "CPUs; set settings.grpo.placement.trainer_gpus (e.g. 1, or 0.5 with settings.grpo.placement.colocate: "
            "true), or settings.grpo.placement.engine_gpus: 0 for a CPU run"
        )
    device = str(policy.device)
    asked = device.startswith("cuda")
    auto_gpu = device == "auto" and has_nvidia_gpu()
    if not (uses_policy and (asked or auto_gpu)) and not ray_gpus:
        return out
    if ray_gpus and cluster is not None and cluster.address:
        return out  # the GPUs are the cluster's, not this machine's: Ray places the actors there
    reason = cuda_unusable_reason()
    if reason is None:
        if asked and ":" in device:
            import torch

            index = int(device.split(":", 1)[1]) if device.split(":", 1)[1].isdigit() else -1
            if not 0 <= index < torch.cuda.device_count():
                out.append(f"settings.policy.device is {device!r}, but this machine has {torch.cuda.device_count()} "
                           "usable GPU(s): name one of them (cuda:0 ...)")
        return out
    what = (f"settings.policy.device is {device!r}" if asked else
            "settings.policy.device is 'auto' on a machine with an NVIDIA GPU" if auto_gpu else
            f"the recipe places Ray actors on GPUs (settings.grpo.placement.trainer_gpus {place.trainer_gpus}, "
            f"settings.grpo.placement.engine_gpus {place.engine_gpus})")
    out.append(
        f"{what}, but CUDA is not usable: {reason}. The run does not fall back to the CPU; for a CPU run "
        "set settings.policy.device=cpu"
        + (" and settings.grpo.placement.trainer_gpus=0 settings.grpo.placement.engine_gpus=0" if ray_gpus else "")
        + "."
    )
    return out
