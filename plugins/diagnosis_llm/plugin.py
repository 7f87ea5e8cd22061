"""The diagnosis_llm plugin: an LLM judge that labels failing turns in the SEAL taxonomy, with a rationale and
a confidence, alone (``mode: judge``) or refining the heuristic diagnoser's labels (``mode: refine``).

Thin hook implementations; the judge lives in :mod:`.judge`, its backends in :mod:`.backends`, the
agreement report in :mod:`.agreement`. ``diagnose`` is a pluggy *wrapper*: it receives the labels of the
other enabled diagnosers (the heuristic one among them), judges, and returns their results with its own
list appended. The judge is advisory: whatever goes wrong in it is recorded as an event and never stops a
step (a misconfigured backend does stop the run at ``start_run``, with a message saying what to fix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, MetricSpec

if TYPE_CHECKING:  # pragma: no cover
    import click

    from seal_platform.context import RunContext
    from seal_platform.types import Trajectory, TurnLabel

SECTION = "diagnosis_llm"
BACKEND_KEY = "diagnosis_llm.backend"


def _settings(ctx: RunContext) -> Any:
    from .settings import DiagnosisLlmSettings

    return ctx.settings_for(SECTION, DiagnosisLlmSettings)


def _enabled(ctx: RunContext) -> bool:
    from .judge import SOURCE

    return SOURCE in ctx.diagnosers and _settings(ctx).backend != "none"  # the core's list of enabled diagnosers


@hookimpl
def register_settings() -> dict[str, Any]:
    from .settings import DiagnosisLlmSettings

    return {SECTION: DiagnosisLlmSettings}


@hookimpl
def register_metrics() -> list[MetricSpec]:
    from .metrics import METRIC_SPECS

    return list(METRIC_SPECS)


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .judge import LABELS, REFERENCE_OF, SOURCE

    return [
        DiagnoserSpec(
            SOURCE,
            "an LLM judge (the run's engine, a second local model or an OpenAI-compatible endpoint) labels failing "
            "turns from the transcript, with a rationale and a confidence; alone or refining the heuristic labels",
            labels=tuple(LABELS),
            reference={label: (ref,) for label, ref in REFERENCE_OF.items()},
            meanings=dict(LABELS),
            # It generates (with the run's policy by default) for every failing turn: a cost a recipe opts into
            # by naming it, never one a recipe without a diagnosis section pays because the plugin is installed.
            explicit=True,
        )
    ]


@hookimpl
def register_commands(cli: click.Group) -> None:
    from .agreement import command

    cli.add_command(command)


@hookimpl
def start_run(ctx: RunContext, resumed: bool) -> None:
    """Check what can be checked before the first step: the endpoint's model and API key variable."""
    settings = _settings(ctx)
    if not _enabled(ctx) or settings.backend != "openai":
        return
    from seal_platform.errors import ConfigError

    from .backends import api_key

    if not settings.openai.model:
        raise ConfigError("settings.diagnosis_llm.openai.model is empty: name the model the endpoint serves.")
    api_key(settings.openai)  # raises, naming the variable, when it is not set


def _backend(ctx: RunContext, settings: Any) -> Any:
    """The judge's backend, built on first use and kept for the run (closed at ``end_run``)."""
    backend = ctx.shared.get(BACKEND_KEY)
    if backend is not None:
        return backend
    from .backends import EngineBackend, OpenAIBackend, build_local_engine, local_identity

    if settings.backend == "openai":
        backend = OpenAIBackend(settings)
    elif settings.backend == "local":
        engine = build_local_engine(ctx, settings.local)
        backend = EngineBackend(engine, settings, local_identity(settings.local), owned=True)
    else:
        engine = ctx.shared.get("engine")
        if engine is None:
            return None
        backend = EngineBackend(engine, settings, f"run:{engine.name}")
    ctx.shared[BACKEND_KEY] = backend
    return backend


@hookimpl(wrapper=True)
def diagnose(ctx: RunContext, environment: Any, trajectories: list[Trajectory], step: int) -> Any:
    results = yield  # the other enabled diagnosers' label lists
    results = list(results or [])
    if not _enabled(ctx):
        return results
    settings = _settings(ctx)
    from .judge import heuristic_source

    source = heuristic_source(ctx.config, settings)
    heuristic = [lab for labels in results for lab in (labels or []) if getattr(lab, "source", None) == source]
    return [*results, _judge(ctx, settings, trajectories, heuristic, step)]


def _judge(
    ctx: RunContext, settings: Any, trajectories: list[Trajectory], heuristic: list[TurnLabel], step: int
) -> list[TurnLabel]:
    try:
        from .judge import Judge

        backend = _backend(ctx, settings)
        if backend is None:
            ctx.event(
                "diagnosis_llm.no_engine",
                "no rollout engine in ctx.shared['engine']; the LLM judge labelled nothing",
                step=step,
            )
            return []
        judge = Judge(backend, settings, ctx.store, ctx.run_id, ctx.event)
        labels = judge.label(trajectories, heuristic, step)
        # The fallback rate per step, with the step's metrics (`show`, the report, trackers).
        ctx.add_step_metrics(**judge.step_metrics())
        return labels
    except Exception as exc:  # the judge is advisory: a failing judge must not stop training
        ctx.event(
            "diagnosis_llm.failed",
            f"the LLM judge failed and labelled nothing: {type(exc).__name__}: {exc}"[:1000],
            step=step,
        )
        return []


@hookimpl
def end_run(ctx: RunContext, status: str) -> None:
    backend = ctx.shared.pop(BACKEND_KEY, None)
    if backend is not None:
        backend.close()
