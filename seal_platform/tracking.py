"""Tracking: what the run records, handed to tracker plugins (TensorBoard, MLflow, ...) as it is recorded.

The run loop calls the ``track`` hook right after each of these reaches the run store:

* ``interface`` - a training-interface revision (the pristine one at the start of a new run, then every
  revision ``evolve_interface`` produced), with ``step`` the training step that produced it;
* ``labels`` - every diagnoser's turn labels of a training step;
* ``step`` - a training step's metrics: ``reward/mean``, ``trajectories``, the optimizer's own metrics
  (``loss``, ``kl``, ...) and the stage timings as ``time/<stage>`` (seconds);
* ``evaluation`` - a held-out evaluation, ``step`` being the number of training steps done;
* ``report`` - the HTML report written at the end of ``seal-platform run`` (``event.path``), after ``end_run``
  (a tracker that closed its session there reopens it, or uploads with a client that needs none), ``step``
  being the number of training steps done. Not sent when the run is started with ``--no-report``.

:func:`scalars` is the one flat view of an event as named numbers (what TensorBoard, W&B and MLflow chart);
:func:`describe_interface` the one text view of a revision.

A tracker that raises does not stop the run: the error is recorded as a ``tracker_failed`` event and the run
goes on (tracking is observation, the store stays the record); at the end ``seal-platform run`` says so under
the run's summary, one line per failing tracker (:func:`failure_warnings`, which also names the plugins whose
``end_run`` failed), while the run's status stays ``completed``. The event itself,
:class:`~seal_platform.types.TrackEvent`, is a shared type (trackers receive it through the ``track`` hook).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .types import TrackEvent, TrackKind, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .plugins import PluginHost

def step_metrics(
    trajectories: list[Trajectory], metrics: dict[str, float], timings: dict[str, float]
) -> dict[str, float]:
    """The flat metrics a ``step`` event carries."""
    mean = sum(t.reward for t in trajectories) / len(trajectories) if trajectories else 0.0
    out = {"reward/mean": mean, "trajectories": float(len(trajectories))}
    out.update({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    out.update({f"time/{stage}": seconds for stage, seconds in timings.items()})
    return out


def scalars(event: TrackEvent) -> dict[str, float]:
    """The event as named numbers, for trackers that chart them (empty for kinds that carry none):

    * ``step``: every metric (``reward/mean``, ``loss``, ``kl``, ``time/collect``, ...) and ``apatch/<label>``,
      the A-Patch weight of each label used in the step;
    * ``evaluation``: ``eval/<category>`` and ``eval/average`` (pass rate in percent);
    * ``labels``: ``labels/<diagnoser>/<label>`` (turns given that label in the step) and
      ``label_rate/<diagnoser>/<label>`` (its share of the turns that diagnoser labelled in the step);
    * ``interface``: ``interface/revision``.
    """
    if event.kind == "step":
        return {**event.metrics, **{f"apatch/{label}": float(w) for label, w in event.label_weights.items()}}
    if event.kind == "evaluation" and event.evaluation is not None:
        result = event.evaluation
        return {**{f"eval/{c}": float(v) for c, v in result.per_category.items()}, "eval/average": result.average}
    if event.kind == "labels":
        counts = Counter((label.source, label.label) for label in event.labels)
        per_source = Counter(label.source for label in event.labels)
        out: dict[str, float] = {}
        for (source, label), n in sorted(counts.items()):
            out[f"labels/{source}/{label}"] = float(n)
            out[f"label_rate/{source}/{label}"] = n / per_source[source]
        return out
    if event.kind == "interface" and event.interface is not None:
        return {"interface/revision": float(event.interface.revision)}
    return {}


def shareable_config(ctx: RunContext) -> dict[str, Any]:
    """The run's resolved config as a tracker may log it (JSON-ready), its secrets redacted as everywhere a
    config is shown (:func:`seal_platform.recipe_secrets.redact_config`: the store URL's password, headers,
    server env, fields a plugin marks secret)."""
    from .recipe_secrets import redact_config

    models = {section: type(value) for section, value in ctx.settings.items()}
    return redact_config(ctx.config.model_dump(mode="json"), models)


def flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"a.b.c": leaf}`` (lists are leaves), for trackers whose parameters are flat."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def describe_interface(interface: Any) -> str:
    """A revision as short Markdown: its number and parent, what changed, which labels drove it."""
    changes = "\n".join(f"- {c}" for c in interface.changes) or "- (none)"
    driven = ", ".join(interface.driven_by) or "nothing"
    return f"**revision {interface.revision}** (parent {interface.parent})\n\n{changes}\n\ndriven by: {driven}"


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
