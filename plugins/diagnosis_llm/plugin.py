"""The diagnosis_llm plugin: an LLM judge that labels failing turns in the SEAL taxonomy, with a rationale.

Thin hook implementations; the judge lives in :mod:`.judge`. It needs a rollout engine: the run's own by
default (the core puts the built engine in ``ctx.shared["engine"]``); without one it labels nothing and
records an event saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.context import RunContext
    from seal_platform.types import Trajectory, TurnLabel

SECTION = "diagnosis_llm"


@hookimpl
def register_settings() -> dict[str, Any]:
    from .judge import DiagnosisLlmSettings

    return {SECTION: DiagnosisLlmSettings}


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .judge import LABELS, REFERENCE_OF

    return [
        DiagnoserSpec(
            "llm_judge",
            "an LLM judge labels the failing turns of failing trajectories from the transcript, with a rationale",
            labels=tuple(LABELS),
            reference={label: (ref,) for label, ref in REFERENCE_OF.items()},
            meanings=dict(LABELS),
        )
    ]


@hookimpl
def diagnose(ctx: RunContext, environment: Any, trajectories: list[Trajectory], step: int) -> list[TurnLabel]:
    from .judge import DiagnosisLlmSettings, judge

    settings = ctx.settings_for(SECTION, DiagnosisLlmSettings)
    if settings.engine == "none":
        return []
    engine = ctx.shared.get("engine")
    if engine is None:
        ctx.event("diagnosis_llm.no_engine", "no rollout engine in ctx.shared['engine']; the LLM judge labelled nothing", step=step)
        return []
    try:
        return judge(trajectories, engine, settings, ctx.event)
    except Exception as exc:  # the judge is advisory: a failing judge model must not stop training
        ctx.event("diagnosis_llm.failed", f"the LLM judge failed and labelled nothing: {type(exc).__name__}: {exc}", step=step)
        return []
