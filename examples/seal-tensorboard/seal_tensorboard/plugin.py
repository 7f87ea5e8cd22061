"""Hook implementations of the seal-tensorboard tracker.

Switched on by a recipe (``settings.tensorboard.enabled: true``); it then writes one TensorBoard event file
per run under ``RUN_DIR/tensorboard`` (or ``settings.tensorboard.log_dir/RUN_ID``):

* ``step`` events: every metric as a scalar (``reward/mean``, ``loss``, ``kl``, ``time/collect``, ...);
* ``evaluation`` events: ``eval/<category>`` and ``eval/average`` (pass rate in percent);
* ``labels`` events: ``labels/<diagnoser>/<label>``, how many turns got that label in the step;
* ``interface`` events: a text summary ``interface`` (revision, parent, what changed, which labels drove it)
  and the scalar ``interface/revision``.

``tensorboard --logdir runs/`` shows them. Heavy imports stay inside the functions that write.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from seal_platform import hookimpl

SECTION = "tensorboard"
SHARED_KEY = "tensorboard.writer"


class TensorBoardSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Write TensorBoard event files for this run.")
    log_dir: str | None = Field(default=None, description="Parent folder of the runs' event folders; null: RUN_DIR/tensorboard.")


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


def _describe_interface(interface: Any) -> str:
    changes = "\n".join(f"- {c}" for c in interface.changes) or "- (none)"
    driven = ", ".join(interface.driven_by) or "nothing"
    return f"**revision {interface.revision}** (parent {interface.parent})\n\n{changes}\n\ndriven by: {driven}"


@hookimpl
def track(ctx: Any, event: Any) -> None:
    if not ctx.settings_for(SECTION, TensorBoardSettings).enabled:
        return
    if event.kind == "step":
        _scalars(ctx, event.step, event.metrics)
    elif event.kind == "evaluation" and event.evaluation is not None:
        result = event.evaluation
        _scalars(ctx, event.step, {**{f"eval/{c}": v for c, v in result.per_category.items()},
                                   "eval/average": result.average})
    elif event.kind == "labels":
        counts = Counter(f"labels/{label.source}/{label.label}" for label in event.labels)
        if counts:
            _scalars(ctx, event.step, dict(counts))
    elif event.kind == "interface" and event.interface is not None:
        _scalars(ctx, event.step, {"interface/revision": event.interface.revision})
        _text(ctx, event.step, "interface", _describe_interface(event.interface))
    _writer(ctx).flush()


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    writer = ctx.shared.pop(SHARED_KEY, None)
    if writer is not None:
        writer.close()
