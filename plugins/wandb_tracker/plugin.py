"""Weights & Biases tracker: switched on by ``settings.wandb.enabled: true`` (needs the ``trackers`` extra).

One W&B run per seal-platform run, its id derived from the run id, so ``seal-platform run --resume`` continues
the same W&B run. What is logged (names: :func:`seal_platform.tracking.scalars`):

* every numeric event as a history row, against the custom x-axis ``seal/step`` (the training step; a resumed
  run that repeats steps logs them again instead of being dropped as W&B drops steps that go back);
* each interface revision as ``interfaces/revision-NNN.md`` in the run's files;
* the HTML report, at the end of ``seal-platform run``, as an artifact of type ``report`` (the W&B run is
  reopened for it: the report is written after the run's end);
* the resolved config (:func:`seal_platform.tracking.shareable_config`) as the run's config.

Nothing else: W&B's system metadata (command line, host, git, environment), console capture and code saving
are switched off, so a secret given on the command line or in the environment never reaches W&B. The API key
comes from W&B's own ``WANDB_API_KEY`` / ``wandb login``, never from a recipe. ``mode: offline`` writes the run
under ``dir`` for a later ``wandb sync``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from seal_platform import hookimpl
from seal_platform.config import Section
from seal_platform.tracking import describe_interface, scalars, shareable_config

SECTION = "wandb"
RUN_KEY = "wandb.run"
STEP_AXIS = "seal/step"


class WandbSettings(Section):
    enabled: bool = Field(default=False, description="Log this run to Weights & Biases.")
    project: str = Field(default="seal-platform", description="The W&B project.")
    entity: str | None = Field(default=None, description="The W&B entity (user or team); null: your default.")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        default=None, description="W&B's mode; null: WANDB_MODE, else online. offline: write under dir, upload "
        "later with `wandb sync`.")
    dir: str | None = Field(default=None, description="Where W&B writes its files; null: the run folder.")
    tags: list[str] = Field(default_factory=list, description="Tags of the W&B run.")
    log_config: bool = Field(default=True, description="Log the resolved recipe as the W&B run's config.")


@hookimpl
def register_settings() -> dict[str, type[BaseModel]]:
    return {SECTION: WandbSettings}


def wandb_id(run_id: str) -> str:
    """The W&B run id of a seal-platform run (W&B ids may not hold ``/\\#?%:``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)[:120]


def _settings(ctx: Any) -> WandbSettings:
    return ctx.settings_for(SECTION, WandbSettings)


def _init(ctx: Any, settings: WandbSettings, *, with_config: bool) -> Any:
    import wandb

    options = wandb.Settings(x_disable_meta=True, x_disable_stats=True, disable_git=True, save_code=False,
                             console="off", silent=True)
    directory = Path(settings.dir) if settings.dir else Path(ctx.run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    config = shareable_config(ctx) if with_config and settings.log_config else None
    return wandb.init(project=settings.project, entity=settings.entity, id=wandb_id(ctx.run_id), name=ctx.run_id,
                      resume="allow", dir=str(directory), mode=settings.mode, config=config, tags=settings.tags,
                      reinit="create_new", settings=options)


def _run(ctx: Any, settings: WandbSettings) -> Any:
    run = ctx.shared.get(RUN_KEY)
    if run is None:
        run = ctx.shared[RUN_KEY] = _init(ctx, settings, with_config=True)
        run.define_metric(STEP_AXIS)
        run.define_metric("*", step_metric=STEP_AXIS)
    return run


@hookimpl
def track(ctx: Any, event: Any) -> None:
    settings = _settings(ctx)
    if not settings.enabled:
        return
    if event.kind == "report":
        _log_report(ctx, settings, event.path)
        return
    run = _run(ctx, settings)
    values = scalars(event)
    if values:
        run.log({**values, STEP_AXIS: event.step})
    if event.kind == "interface" and event.interface is not None:
        path = Path(run.dir) / "interfaces" / f"revision-{event.interface.revision:03d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(describe_interface(event.interface) + "\n")
        run.save(str(path), base_path=run.dir, policy="end")


def _log_report(ctx: Any, settings: WandbSettings, path: str | None) -> None:
    import wandb

    if not path:
        return
    run = ctx.shared.pop(RUN_KEY, None) or _init(ctx, settings, with_config=False)
    try:
        artifact = wandb.Artifact(f"report-{wandb_id(ctx.run_id)}", type="report")
        artifact.add_file(path)
        run.log_artifact(artifact)
    finally:
        run.finish()


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    run = ctx.shared.pop(RUN_KEY, None)
    if run is not None:
        run.finish(exit_code=0 if status == "completed" else 1)
