"""Tracking: what the run records, handed to tracker plugins (TensorBoard, MLflow, ...) as it is recorded.

The run loop calls the ``track`` hook right after each of these reaches the run store:

* ``interface`` - a training-interface revision (the pristine one at the start of a new run, then every
  revision ``evolve_interface`` produced), with ``step`` the training step that produced it;
* ``labels`` - every diagnoser's turn labels of a training step;
* ``step`` - a training step's metrics: ``reward/mean``, ``trajectories``, the optimizer's own metrics
  (``loss``, ``kl``, ...) and the stage timings as ``time/<stage>`` (seconds);
* ``evaluation`` - a held-out evaluation, ``step`` being the number of training steps done.

A tracker that raises does not stop the run: the error is recorded as a ``tracker_failed`` event and the run
goes on (tracking is observation, the store stays the record). The event itself,
:class:`~seal_platform.types.TrackEvent`, is a shared type (trackers receive it through the ``track`` hook).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .types import TrackEvent, TrackKind, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .plugins import PluginHost

def step_metrics(trajectories: list[Trajectory], metrics: dict[str, float], timings: dict[str, float]) -> dict[str, float]:
    """The flat metrics a ``step`` event carries."""
    mean = sum(t.reward for t in trajectories) / len(trajectories) if trajectories else 0.0
    out = {"reward/mean": mean, "trajectories": float(len(trajectories))}
    out.update({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    out.update({f"time/{stage}": seconds for stage, seconds in timings.items()})
    return out


def track(host: PluginHost, ctx: RunContext, kind: TrackKind, step: int, **fields: Any) -> None:
    """Hand one event to every plugin that implements ``track``; a failing tracker is recorded, not raised."""
    trackers = [impl.plugin_name for impl in host.pm.hook.track.get_hookimpls()]
    if not trackers:
        return
    event = TrackEvent(kind=kind, run_id=ctx.run_id, step=step, **fields)
    for plugin in trackers:  # one at a time, so one failing tracker does not silence the others
        try:
            host.call_subset("track", [plugin], ctx=ctx, event=event)
        except Exception as exc:
            ctx.event("tracker_failed", f"tracker {plugin!r} failed on a {kind!r} event of step {step}: "
                      f"{type(exc).__name__}: {exc}", plugin=plugin)
