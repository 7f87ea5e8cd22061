"""How step metrics are shown is declared by the plugin that records them (``register_metrics``): a third-party
optimizer's own metric names count as policy updates, headline metrics, trained tokens and reasons for a skipped
step in ``show``, the summary, the progress line and the report, as grpo's do; a metric nobody declares is shown
by name, whatever its prefix."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from seal_platform import hookimpl
from seal_platform.capability import CapabilityState
from seal_platform.plugins import make_plugin_manager
from seal_platform.present.digest import load_digest
from seal_platform.present.html_report import run_report_html
from seal_platform.present.metrics import MetricCatalog
from seal_platform.present.progress import RichProgress
from seal_platform.present.reporting import show_run, step_update_text
from seal_platform.present.summary import run_summary
from seal_platform.registry import MetricSpec
from seal_platform.store import RunStore
from seal_platform.types import EvalResult, Trajectory

RUN = "20260101-000000-metric"


class PPOish:
    """A third-party optimizer (and a critic of its own) that shares no metric name with grpo."""

    @hookimpl
    def register_metrics(self) -> list[MetricSpec]:
        return [
            MetricSpec("policy_loss", "the clipped surrogate loss", label="policy loss", role="update"),
            MetricSpec("value_loss", "the critic's loss", label="value loss", role="update"),
            MetricSpec("opt_steps", "optimizer steps taken", role="updates", skip_reason="policy frozen"),
            MetricSpec("rollouts_used", role="trained_sequences"),
            MetricSpec("rollouts_dropped", "longer than the context", role="skipped_sequences"),
            MetricSpec("tokens_seen", role="trained_tokens"),
            MetricSpec("train_seconds", role="update_seconds"),
            MetricSpec("train_tps", role="tokens_per_s"),
            MetricSpec("stale_batches", "batches older than the policy", skip_reason="every batch was stale"),
            MetricSpec("critic_agreement", "agreement of the critic with the verifier", label="agreement",
                       percent=True, group="critic checks", plotted=True),
            MetricSpec("critic_misses", "turns the critic did not score", label="misses", format=".0f",
                       group="critic checks", note="The critic missed turns: raise its budget."),
        ]


class Broken:
    @hookimpl
    def register_metrics(self) -> list[MetricSpec]:
        raise RuntimeError("no metrics today")


STEPS = [
    {"policy_loss": 0.5, "value_loss": 1.25, "opt_steps": 2.0, "rollouts_used": 6.0, "rollouts_dropped": 2.0,
     "tokens_seen": 600.0, "train_seconds": 3.0, "train_tps": 200.0, "critic_agreement": 0.75, "critic_misses": 0.0},
    {"opt_steps": 0.0, "stale_batches": 3.0, "rollouts_used": 0.0, "rollouts_dropped": 8.0, "tokens_seen": 0.0,
     "critic_agreement": 0.5, "critic_misses": 2.0},
    # A step without headline metrics: its first metrics by name, a judge_ one of this plugin's included.
    {"opt_steps": 1.0, "judge_score": 0.9, "zeta": 1.0},
]


@pytest.fixture
def catalog() -> MetricCatalog:
    return MetricCatalog.from_host(make_plugin_manager(allow=[], extra=[("broken", Broken()), ("ppoish", PPOish())]))


@pytest.fixture
def store(tmp_path: Path):
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run(RUN, name="ppoish", recipe="r.yaml", config={"environment": "toy"}, config_hash="0123456789abcdef",
                     seed=0, run_dir=str(tmp_path / RUN), plugins=[])
    for step, metrics in enumerate(STEPS):
        trajectories = [Trajectory(task_id=f"t{k}", category="c", group=f"g{k // 2}", reward=k % 2) for k in range(4)]
        store.record_step(RUN, step=step, epoch=0, trajectories=trajectories, labels=[], label_weights={},
                          state=CapabilityState(), interface_revision=0, metrics=metrics, timings={"optimize": 1.0})
    for step in (0, 3):
        store.add_evaluation(RUN, step, EvalResult(split="test", per_category={"c": 10.0 * (1 + step)}, n_tasks=4))
    store.finish_run(RUN, "completed")
    yield store
    store.close()


def test_a_third_party_optimizer_declares_its_headline_metrics_and_skip_reasons(catalog):
    assert step_update_text(STEPS[0], catalog) == "policy_loss 0.5, value_loss 1.25"
    assert step_update_text(STEPS[1], catalog) == "skipped (every batch was stale)"
    # Undeclared metrics are shown by name: a plugin's judge_* metric is not hidden.
    assert step_update_text(STEPS[2], catalog) == "judge_score 0.9, opt_steps 1, zeta 1"
    # The plugin whose hook raised is left out; the others' declarations stand.
    assert catalog.get("policy_loss") is not None and catalog.name_of("updates") == "opt_steps"


def test_show_and_the_summary_count_the_declared_updates_and_tokens(catalog, store):
    out = io.StringIO()
    show_run(store, RUN, Console(file=out, width=250), catalog=catalog)
    shown = out.getvalue()
    assert "policy_loss 0.5, value_loss 1.25" in shown and "skipped (every batch was stale)" in shown
    assert "critic checks" in shown and "agreement 75%, misses 0" in shown and "agreement 50%, misses 2" in shown

    summary = io.StringIO()
    Console(file=summary, width=250).print(run_summary(load_digest(store, RUN), catalog=catalog))
    text = summary.getvalue()
    assert "3 policy update(s) in between" in text
    assert (
        "policy updates: 3, trajectories trained 6, skipped 10 (longer than the context), 200 trained tokens/s" in text
    )


def test_the_progress_line_reads_the_declared_throughput_and_no_update_reason(catalog):
    progress = RichProgress(Console(file=io.StringIO(), width=140), catalog=catalog)
    progress.step_done(0, 0.5, STEPS[0])
    assert progress.info == "reward 0.500  200 tok/s"
    progress.step_done(1, 0.25, STEPS[1])
    assert progress.info == "reward 0.250  no update (policy frozen)"


def test_the_report_plots_the_declared_headline_metrics_and_groups(catalog, store):
    page = run_report_html(load_digest(store, RUN), catalog=catalog)
    optimizer = page.split("<h2>Optimizer metrics over steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert (
        "<th>policy loss</th><th>value loss</th>" in optimizer
        and "<tr><td>0</td><td>0.5</td><td>1.25</td></tr>" in optimizer
    )
    assert "steps without a policy update (nothing to learn or skipped): 1, 2" in optimizer
    group = page.split("<h2>Critic checks per step</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<th>agreement</th><th>misses</th>" in group and "<tr><td>1</td><td>50%</td><td>2</td></tr>" in group
    assert "The critic missed turns: raise its budget." in group and 'alt="agreement"' in group


def test_a_metric_spec_with_an_unknown_role_is_refused():
    with pytest.raises(ValueError, match="unknown role 'loss'"):
        MetricSpec("x", role="loss")
