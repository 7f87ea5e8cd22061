"""The tracker on its own: events in, TensorBoard event files out, read back with TensorBoard's reader."""

from __future__ import annotations

import pytest

pytest.importorskip("seal_tensorboard", reason="pip install -e examples/seal-tensorboard")

from seal_tensorboard import plugin  # noqa: E402
from seal_tensorboard.plugin import TensorBoardSettings  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.tracking import TrackEvent
from seal_platform.types import EvalResult, Interface, TurnLabel


def _ctx(tmp_path, **settings):
    return RunContext(config=RunConfig(environment="x"), run_id="r1", run_dir=tmp_path,
                      settings={"tensorboard": TensorBoardSettings(**settings)})


def test_every_kind_of_event_is_written(tmp_path):
    ctx = _ctx(tmp_path, enabled=True, log_dir=str(tmp_path / "tb"))
    revision = Interface(revision=1, parent=0, changes=["recovery hints"], driven_by=["recovery_failure"])
    labels = [
        TurnLabel(trajectory_id="t", turn=i, label=lab, source="bfcl")
        for i, lab in enumerate(["pass", "pass", "recovery_failure"])
    ]
    for event in (
        TrackEvent(kind="interface", run_id="r1", step=0, interface=revision),
        TrackEvent(kind="labels", run_id="r1", step=0, labels=labels),
        TrackEvent(kind="step", run_id="r1", step=0, metrics={"loss": 0.5, "reward/mean": 0.25}),
        TrackEvent(kind="evaluation", run_id="r1", step=1,
                   evaluation=EvalResult(split="eval", per_category={"a": 50.0, "b": 100.0}, n_tasks=4)),
    ):
        plugin.track(ctx=ctx, event=event)
    plugin.end_run(ctx=ctx, status="completed")
    events = EventAccumulator(str(tmp_path / "tb" / "r1"))
    events.Reload()
    value = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    assert value == pytest.approx({"interface/revision": 1, "labels/bfcl/pass": 2, "labels/bfcl/recovery_failure": 1,
                                   "label_rate/bfcl/pass": 2 / 3, "label_rate/bfcl/recovery_failure": 1 / 3,
                                   "loss": 0.5, "reward/mean": 0.25, "eval/a": 50, "eval/b": 100, "eval/average": 75})
    assert events.Tags()["tensors"] == ["interface"], events.Tags()
    text = events.Tensors("interface")[0].tensor_proto.string_val[0].decode()
    assert "revision 1" in text and "recovery hints" in text and "recovery_failure" in text


def test_disabled_writes_nothing(tmp_path):
    ctx = _ctx(tmp_path)
    plugin.track(ctx=ctx, event=TrackEvent(kind="step", run_id="r1", step=0, metrics={"loss": 1.0}))
    plugin.end_run(ctx=ctx, status="completed")
    assert not (tmp_path / "tensorboard").exists()
