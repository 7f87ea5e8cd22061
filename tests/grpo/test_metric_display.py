"""The grpo plugin declares how its step metrics are shown (``register_metrics``); the core reads the
declarations, not grpo's names. A GRPO run's summary line, progress line and report read as they always did."""

from __future__ import annotations

import io

from rich.console import Console

from seal_platform.plugins import make_plugin_manager
from seal_platform.present.digest import EvalPoint, RunDigest, StepPoint
from seal_platform.present.html_report import run_report_html
from seal_platform.present.metrics import MetricCatalog
from seal_platform.present.progress import RichProgress
from seal_platform.present.reporting import step_update_text
from seal_platform.present.summary import run_summary

UPDATED = {"loss": 0.25, "grad_norm": 1.5, "kl": 0.0, "entropy": 0.7, "clip_frac": 0.1, "lr": 1e-5, "updates": 1.0,
           "skipped_updates": 0.0, "trained_sequences": 12.0, "skipped_sequences": 4.0, "trained_tokens": 1000.0,
           "update_s": 2.0, "tokens_per_s": 500.0, "ds_rounds": 2.0, "ds_groups_drawn": 8.0, "ds_groups_kept": 3.0,
           "ds_groups_uniform": 4.0, "ds_groups_surplus": 1.0}
ZERO_ADVANTAGE = {"loss": 0.0, "grad_norm": 0.0, "updates": 0.0, "skipped_updates": 0.0, "trained_sequences": 0.0,
                  "skipped_sequences": 16.0, "trained_tokens": 0.0, "update_s": 0.1, "tokens_per_s": 0.0}


def _catalog() -> MetricCatalog:
    return MetricCatalog.from_host(make_plugin_manager(allow=["grpo"]))


def _digest() -> RunDigest:
    steps = [StepPoint(step=i, mean_reward=0.5, interface_revision=0, metrics=m)
             for i, m in enumerate((UPDATED, ZERO_ADVANTAGE, UPDATED))]
    evaluations = {"toy:test": [EvalPoint(step=0, per_category={"c": 10.0}, n_tasks=4),
                                EvalPoint(step=3, per_category={"c": 30.0}, n_tasks=4)]}
    return RunDigest(id="r", name="grpo-run", status="completed", steps=steps, evaluations=evaluations)


def test_show_names_grpo_s_headline_metrics_and_why_a_step_was_skipped():
    catalog = _catalog()
    assert step_update_text(UPDATED, catalog) == "loss 0.25, grad_norm 1.5, kl 0, entropy 0.7, clip_frac 0.1"
    assert step_update_text(ZERO_ADVANTAGE, catalog) == "skipped (every advantage was 0)"
    assert step_update_text({**ZERO_ADVANTAGE, "ds_groups_kept": 0.0}, catalog) == \
        "skipped (no group with mixed outcomes was drawn)"
    assert step_update_text({"updates": 0.0, "skipped_updates": 1.0, "trained_sequences": 8.0}, catalog) == \
        "skipped (non-finite gradient)"


def test_the_summary_counts_grpo_s_updates_and_trained_tokens():
    out = io.StringIO()
    Console(file=out, width=250).print(run_summary(_digest(), catalog=_catalog()))
    text = out.getvalue()
    assert "evaluated after step 0 and after step 3, 2 policy update(s) in between" in text
    assert "policy updates: 2, trajectories trained 24, skipped 24 (advantage 0, nothing to learn), " \
           "500 trained tokens/s" in text  # the zero-advantage step's seconds not counted
    assert "dynamic sampling: 16 groups drawn in 4 collect rounds, 6 trained on (mixed outcomes), 8 dropped " \
           "(all rewards equal), 2 mixed beyond the step's quota" in text


def test_the_progress_line_shows_grpo_s_throughput_or_no_update():
    progress = RichProgress(Console(file=io.StringIO(), width=140), catalog=_catalog())
    progress.step_done(0, 0.5, UPDATED)
    assert progress.info == "reward 0.500  500 tok/s"
    progress.step_done(1, 0.0, ZERO_ADVANTAGE)
    assert progress.info == "reward 0.000  no update (advantages 0)"


def test_the_report_titles_grpo_s_metrics_and_dynamic_sampling():
    page = run_report_html(_digest(), catalog=_catalog())
    optimizer = page.split("<h2>Optimizer metrics over steps</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<th>step</th><th>loss</th><th>grad norm</th><th>KL</th><th>entropy</th><th>clip fraction</th>" in optimizer
    assert "<tr><td>0</td><td>0.25</td><td>1.5</td><td>0</td><td>0.7</td><td>0.1</td></tr>" in optimizer
    assert "steps without a policy update (nothing to learn or skipped): 1</p>" in optimizer
    sampling = page.split("<h2>Dynamic sampling</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<th>step</th><th>rounds</th><th>drawn</th><th>kept (mixed)</th><th>dropped (all equal)</th>" \
           "<th>dropped (beyond quota)</th>" in sampling
    assert "<tr><td>total</td><td>4</td><td>16</td><td>6</td><td>8</td><td>2</td></tr>" in sampling
