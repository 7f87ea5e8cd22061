"""The control diagnosers: random labels drawn (seeded) from what the run has seen, and a fixed label."""

from __future__ import annotations

from collections import Counter

from seal_platform.capability import CapabilityState
from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.store import RunStore
from seal_platform.types import Trajectory, TurnLabel, TurnVerdict
from seal_platform_plugins.controls import plugin


def _trajs(n: int, turns: int = 2) -> list[Trajectory]:
    return [Trajectory(task_id=f"t{i}", category="c", group=f"g{i}",
                       turn_verdicts=[TurnVerdict(turn=k, passed=False) for k in range(turns)]) for i in range(n)]


def _ctx(tmp_path, diagnosers, seed=0, store=None, run_id="r1"):
    """A context as the core makes it: ``ctx.diagnosers`` is the run's enabled diagnosers (the plan's)."""
    config = RunConfig(environment="smarthome", seed=seed, diagnosis={"diagnosers": diagnosers})
    enabled = [] if diagnosers is None else list(diagnosers)
    return RunContext(config=config, run_id=run_id, run_dir=tmp_path, store=store, diagnosers=enabled)


def _store_with_step0(tmp_path) -> tuple[RunStore, list[TurnLabel]]:
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r1", name="t", recipe="", config={}, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[])
    trajs = _trajs(10)
    real = [TurnLabel(trajectory_id=t.id, turn=k, label="argument_mismatch" if (i + k) % 4 else "pass",
                      reference_label="state_mismatch" if (i + k) % 4 else "pass", source="smarthome")
            for i, t in enumerate(trajs) for k in range(2)]
    store.record_step("r1", step=0, epoch=0, trajectories=trajs, labels=real, label_weights={},
                      state=CapabilityState(), interface_revision=0, metrics={}, timings={})
    return store, real


def test_fixed_label_labels_every_turn_the_same():
    ctx = _ctx(None, ["smarthome", "fixed_label"])
    labels = plugin.diagnose(ctx=ctx, trajectories=_trajs(3, turns=3), step=0)
    assert len(labels) == 9
    assert {(lab.label, lab.reference_label, lab.source) for lab in labels} == {
        ("state_mismatch", "state_mismatch", "fixed_label")
    }


def test_controls_run_only_when_the_recipe_names_them(tmp_path):
    assert plugin.diagnose(ctx=_ctx(tmp_path, None), trajectories=_trajs(2), step=0) == []
    assert plugin.diagnose(ctx=_ctx(tmp_path, ["smarthome"]), trajectories=_trajs(2), step=0) == []


def test_random_labels_follow_the_seen_distribution_and_are_seeded(tmp_path):
    store, real = _store_with_step0(tmp_path)
    first = plugin.diagnose(ctx=_ctx(tmp_path, ["random_labels"], store=store), trajectories=_trajs(200), step=0)
    assert {lab.label for lab in first} == {"state_mismatch"}  # nothing seen before step 0: the initial label
    ctx = _ctx(tmp_path, ["random_labels"], store=store)
    drawn = plugin.diagnose(ctx=ctx, trajectories=_trajs(200), step=1)
    again = plugin.diagnose(ctx=_ctx(tmp_path, ["random_labels"], store=store), trajectories=_trajs(200), step=1)
    other = plugin.diagnose(
        ctx=_ctx(tmp_path, ["random_labels"], seed=5, store=store), trajectories=_trajs(200), step=1
    )
    pairs = Counter((lab.label, lab.reference_label) for lab in drawn)
    assert set(pairs) == {(lab.label, lab.reference_label) for lab in real}
    assert 0.6 < pairs[("argument_mismatch", "state_mismatch")] / len(drawn) < 0.9  # 15 of the 20 seen
    assert [lab.label for lab in drawn] == [lab.label for lab in again]
    assert [lab.label for lab in drawn] != [lab.label for lab in other]
    assert all(lab.source == "random_labels" for lab in drawn)
    # Its own labels never feed the distribution it draws from.
    trajs = _trajs(10)
    store.record_step("r1", step=1, epoch=0, trajectories=trajs,
                      labels=[lab.model_copy(update={"label": "odd"}) for lab in drawn[:20]], label_weights={},
                      state=CapabilityState(), interface_revision=0, metrics={}, timings={})
    later = plugin.diagnose(ctx=ctx, trajectories=_trajs(50), step=2)
    assert "odd" not in {lab.label for lab in later}
