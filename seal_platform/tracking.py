"""Tracking: what the run records, handed to tracker plugins (TensorBoard, MLflow, ...) as it is recorded.

The run loop calls the ``track`` hook right after each of these reaches the run store:

* ``interface`` - a training-interface revision (the pristine one at the start of a new run, then every
  revision ``evolve_interface`` produced), with ``step`` the training step that produced it;
* ``labels`` - every diagnoser's turn labels of a training step;
* ``step`` - a training step's metrics: ``reward/mean``, ``trajectories``, the optimizer's own metrics
  (``loss``, ``kl``, ...) and the stage timings as ``time/<stage>`` (seconds);
* ``evaluation`` - a held-out evaluation, ``step`` being the number of training steps done.

A tracker that raises does not stop the run: the error is recorded as a ``tracker_failed`` event and the run
goes on (tracking is observation, the store stays the record); at the end ``seal-platform run`` says so under
the run's summary, one line per failing tracker (:func:`failure_warnings`, which also names the plugins whose
``end_run`` failed), while the run's status stays ``completed``. The event itself,
:class:`~seal_platform.types.TrackEvent`, is a shared type (trackers receive it through the ``track`` hook).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

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


# Store events of plugin failures that do not change a run's outcome, and the hook each comes from.
PLUGIN_FAILURE_EVENTS = {"tracker_failed": "track", "end_run_failed": "end_run"}


def failure_warnings(events: Iterable[Any]) -> list[str]:
    """One warning line per plugin and hook among ``events`` (store events: ``kind``, ``message``, ``data``)
    that records a tracker's or an ``end_run``'s failure: the first failure's message and how many more
    there were. A run's status does not change for them; the terminal must still say so."""
    failures: dict[tuple[str, str], list[str]] = {}
    for event in events:
        if event.kind in PLUGIN_FAILURE_EVENTS:
            plugin = str((event.data or {}).get("plugin") or event.message)  # events of older versions name none
            failures.setdefault((event.kind, plugin), []).append(str(event.message))
    lines = []
    for (kind, _plugin), messages in failures.items():
        more = f" (and {len(messages) - 1} more failure(s) of it)" if len(messages) > 1 else ""
        lost = "what it tracks of this run is incomplete" if kind == "tracker_failed" else \
            "what it does at a run's end may not be done"
        lines.append(f"warning: {messages[0]}{more}; {lost} (the run store has every failure: {kind} events)")
    return lines
