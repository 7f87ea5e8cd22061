"""The live display of `run` and `eval` (rich): phases named, an episodes bar with counts and ETA, nothing drawn
when the output is not a terminal, a resumed run announced."""

from __future__ import annotations

import io

from rich.console import Console

from seal_platform.present.progress import RichProgress
from seal_platform.types import EvalResult


def _display(terminal: bool) -> tuple[RichProgress, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=140, color_system=None)
    return RichProgress(console), out


def _evaluation() -> EvalResult:
    return EvalResult(split="test", per_category={"a": 50.0, "b": 100.0}, n_tasks=4)


def test_a_terminal_gets_phases_and_an_episodes_bar_with_counts_and_eta():
    progress, out = _display(terminal=True)
    progress.stage(0, "load model")
    assert progress.bar is not None and "load model" in progress.bar.tasks[0].description
    progress.start(3, 0)
    progress.stage(0, "collect")
    progress.episodes(3, 8)
    assert progress.bar is not None and progress.episode_task is not None
    task = next(t for t in progress.bar.tasks if t.id == progress.episode_task)
    assert (task.completed, task.total) == (3, 8) and "collect episodes" in task.description
    progress.bar.refresh()
    progress.stage(0, "checkpoint")  # a new phase drops the previous phase's episodes bar
    assert progress.episode_task is None and len(progress.bar.tasks) == 1
    assert "step 1/3  checkpoint" in progress.bar.tasks[0].description
    progress.stop()
    text = out.getvalue()
    assert "3/8" in text and "eta" in text and "collect" in text


def test_not_a_terminal_draws_nothing_but_prints_evaluations():
    progress, out = _display(terminal=False)
    progress.stage(0, "load model")
    progress.start(3, 0)
    progress.stage(0, "evaluate")
    progress.episodes(2, 4)
    progress.evaluated(0, _evaluation())
    progress.stop()
    assert progress.bar is None
    assert out.getvalue().strip() == "evaluation after 0 step(s) on test (4 tasks): average 75.0%"


def test_a_resumed_run_says_from_which_step():
    progress, out = _display(terminal=False)
    progress.start(5, 2)
    progress.stop()
    assert "resumed: steps 1-2 restored from the checkpoint; continuing with step 3 of 5" in out.getvalue()
    fresh, fresh_out = _display(terminal=False)
    fresh.start(5, 0)
    assert "resumed" not in fresh_out.getvalue()
