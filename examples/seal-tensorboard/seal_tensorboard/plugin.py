"""Hook implementations of the seal-tensorboard tracker.

Switched on by a recipe (``settings.tensorboard.enabled: true``); it then writes one TensorBoard event file
per run under ``RUN_DIR/tensorboard`` (or ``settings.tensorboard.log_dir/RUN_ID``):

* ``step`` events: every metric as a scalar (``reward/mean``, ``loss``, ``kl``, ``time/collect``, ...) and
  ``apatch/<label>``, the A-Patch weights (names: :func:`seal_platform.tracking.scalars`);
* ``evaluation`` events: ``eval/<category>`` and ``eval/average`` (pass rate in percent);
* ``labels`` events: ``labels/<diagnoser>/<label>``, how many turns got that label in the step, and
  ``label_rate/<diagnoser>/<label>``, its share of the turns that diagnoser labelled;
* ``interface`` events: a text summary ``interface`` (revision, parent, what changed, which labels drove it)
  and the scalar ``interface/revision``.

``tensorboard --logdir runs/`` shows them. Heavy imports stay inside the functions that write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from seal_platform import hookimpl
from seal_platform.config import Section
from seal_platform.tracking import describe_interface, scalars

SECTION = "tensorboard"
SHARED_KEY = "tensorboard.writer"


class TensorBoardSettings(Section):
    enabled: bool = Field(default=False, description="Write TensorBoard event files for this run.")
    log_dir: str | None = Field(
        default=None, description="Parent folder of the runs' event folders; null: RUN_DIR/tensorboard."
    )


@hookimpl
def register_settings() -> dict[str, type[BaseModel]]:
    return {SECTION: TensorBoardSettings}


def run_log_dir(ctx: Any) -> Path:
    """Where this run's event file goes."""
    settings = ctx.settings_for(SECTION, TensorBoardSettings)
    return Path(settings.log_dir) / ctx.run_id if settings.log_dir else Path(ctx.run_dir) / "tensorboard"


def _writer(ctx: Any) -> Any:
    writer = ctx.shared.get(SHARED_KEY)
    if writer is None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        directory = run_log_dir(ctx)
        directory.mkdir(parents=True, exist_ok=True)
        writer = ctx.shared[SHARED_KEY] = EventFileWriter(str(directory))
    return writer


def _scalars(ctx: Any, step: int, values: dict[str, float]) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
    _writer(ctx).add_event(Event(wall_time=time.time(), step=step, summary=summary))


def _text(ctx: Any, step: int, tag: str, text: str) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.text.summary_v2 import text_pb

    _writer(ctx).add_event(Event(wall_time=time.time(), step=step, summary=text_pb(tag, text)))


@hookimpl
def track(ctx: Any, event: Any) -> None:
    if not ctx.settings_for(SECTION, TensorBoardSettings).enabled or event.kind == "report":
        return
    values = scalars(event)
    if values:
        _scalars(ctx, event.step, values)
    if event.kind == "interface" and event.interface is not None:
        _text(ctx, event.step, "interface", describe_interface(event.interface))
    _writer(ctx).flush()


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    writer = ctx.shared.pop(SHARED_KEY, None)
    if writer is not None:
        writer.close()
