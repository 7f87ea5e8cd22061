"""The live progress display of ``seal-platform run`` (rich): one line that says what the run is doing.

    step 1/2  collect  reward 0.000  41 tok/s        ━━━━━━━━━━━━  0:01:12  eta 0:01:10
      episodes                                   ━━━━━━━━━━━━  3/4  0:00:20  eta 0:00:07

and under it, while a phase runs episodes (collect, evaluation, benchmarks), a second bar with the episode count
and its own ETA. Every phase that can take long is named as it starts (load model, build environment, collect,
..., evaluate, benchmarks, checkpoint). Nothing is drawn when the console is not a terminal (output piped or
captured): only the one-line evaluation results are printed. A resumed run says so and from which step.

It also measures what the store does not time (set-up before the first stage, evaluations), for the
end-of-run summary (:attr:`RichProgress.extra_seconds`).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichBar
from rich.table import Column

from ..loop import Progress
from ..types import EvalResult
from .metrics import MetricCatalog, catalog_or_installed
from .safe import LABEL_LIMIT, clean

# The narrowest terminal that gets the progress bar (the line's counts and times need about 30 columns, the
# bar 17, the description the rest: "step 12/300  evolve_interface  reward 0.123  1234 tok/s" is 53).
WIDE = 100


class RichProgress(Progress):
    def __init__(self, console: Console, catalog: MetricCatalog | None = None):
        self.console = console
        self.catalog = catalog  # how step metrics are shown (None: the installed plugins' declarations)
        self.bar: RichBar | None = None
        self.task: Any = None  # rich's TaskID once the bar exists
        self.episode_task: Any = None  # the episodes bar of the current phase, while it has one
        self.total = 0
        self.step = 0
        self.stage_name = "starting"
        self.episodes_text = ""
        self.info = ""
        self.extra_seconds: dict[str, float] = {}
        self._created = time.perf_counter()
        self._stage_started: float | None = None

    # --- display ----------------------------------------------------------------------------------------

    def _ensure(self) -> None:
        if self.bar is not None or not self.console.is_terminal:
            return
        # The description wraps at words rather than being cut (a stage name stays whole), and the counts and
        # times never shrink; a narrow terminal drops the bar, which the counts repeat.
        description = TextColumn("{task.description}", markup=False,  # a stage's name is never markup
                                 table_column=Column(no_wrap=False, overflow="fold"))
        bar = [BarColumn(bar_width=16)] if self.console.width >= WIDE else []
        self.bar = RichBar(
            SpinnerColumn(), description, *bar, MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TimeElapsedColumn(table_column=Column(no_wrap=True)), TextColumn("eta", table_column=Column(no_wrap=True)),
            TimeRemainingColumn(table_column=Column(no_wrap=True)), console=self.console, transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("", total=None)
        self._refresh()

    def _refresh(self) -> None:
        if self.bar is None:
            return
        step = f"step {min(self.step + 1, self.total)}/{self.total}" if self.total else "before training"
        episodes = "" if self.episode_task is not None else self.episodes_text  # the episodes bar shows them
        parts = [step, self.stage_name, episodes, self.info]
        self.bar.update(self.task, description="  ".join(p for p in parts if p))

    def _close_stage(self) -> None:
        """Account the stage that just ended, if it is one the store does not time."""
        now = time.perf_counter()
        if self._stage_started is None:
            self.extra_seconds["setup"] = self.extra_seconds.get("setup", 0.0) + now - self._created
        elif self.stage_name == "evaluate":
            self.extra_seconds["evaluate"] = self.extra_seconds.get("evaluate", 0.0) + now - self._stage_started
        self._stage_started = now

    # --- Progress ---------------------------------------------------------------------------------------

    def start(self, total_steps: int, first_step: int) -> None:
        if first_step > 0:
            self.console.print(f"resumed: steps 1-{first_step} restored from the checkpoint; continuing with step "
                               f"{first_step + 1} of {total_steps}", highlight=False, markup=False)
        self._ensure()
        self.total, self.step = total_steps, first_step
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, total=max(total_steps, 1), completed=first_step)
        self._refresh()

    def stage(self, step: int, stage: str) -> None:
        self._ensure()
        self._close_stage()
        self.step, self.stage_name, self.episodes_text = step, clean(stage, LABEL_LIMIT), ""
        self._drop_episode_bar()
        self._refresh()

    def _drop_episode_bar(self) -> None:
        if self.bar is not None and self.episode_task is not None:
            self.bar.remove_task(self.episode_task)
        self.episode_task = None

    def episodes(self, done: int, total: int) -> None:
        self.episodes_text = f"{done}/{total} episodes"
        if self.bar is not None:
            if self.episode_task is None:
                self.episode_task = self.bar.add_task(f"  {self.stage_name} episodes", total=total)
            self.bar.update(self.episode_task, completed=done, total=total)
        self._refresh()

    def step_done(self, step: int, mean_reward: float, metrics: dict[str, float]) -> None:
        info = f"reward {mean_reward:.3f}"
        catalog = catalog_or_installed(self.catalog)
        tps = catalog.value(metrics, "tokens_per_s")
        reason = catalog.progress_reason(metrics)
        if tps and catalog.value(metrics, "trained_tokens"):
            info += f"  {tps:.0f} tok/s"
        elif reason is not None:
            info += "  no update" + (f" ({clean(reason, LABEL_LIMIT)})" if reason else "")
        self.info = info
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=step + 1)
        self._refresh()

    def evaluated(self, step: int, result: EvalResult) -> None:
        self._close_stage()
        self._drop_episode_bar()
        self.stage_name = "evaluated"
        self._stage_started = time.perf_counter()
        lost = (f", {result.n_infra_failures} lost to the infrastructure and not scored"
                if result.n_infra_failures else "")
        text = clean(f"evaluation after {step} step(s) on {result.split} ({result.n_tasks} tasks{lost}): average "
                     f"{result.average:.1f}%")
        self.console.print(text, highlight=False, markup=False)
        self._refresh()

    def stop(self) -> None:
        if self.bar is not None:
            if self.stage_name == "evaluate":
                self._close_stage()
            self.stage_name = "done"
            self._drop_episode_bar()
            self._refresh()
            self.bar.stop()
            self.bar = None
