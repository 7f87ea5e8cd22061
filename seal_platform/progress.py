"""Progress display for long runs (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichBar, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .loop import Progress
from .types import EvalResult


class RichProgress(Progress):
    def __init__(self, console: Console):
        self.console = console
        self.bar: RichBar | None = None
        self.task = None
        self._stage = ""

    def start(self, total_steps: int, first_step: int) -> None:
        self.bar = RichBar(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=self.console, transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("training", total=total_steps, completed=first_step, info="")

    def stage(self, step: int, stage: str) -> None:
        self._stage = f"step {step}: {stage}"
        if self.bar is not None:
            self.bar.update(self.task, description=self._stage)
        else:
            self.console.print(f"[dim]{self._stage}[/]")

    def episodes(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=f"{self._stage} ({done}/{total} episodes)")

    def step_done(self, step: int, mean_reward: float, metrics: dict[str, float]) -> None:
        if self.bar is not None:
            loss = metrics.get("loss")
            info = f"reward {mean_reward:.3f}" + (f" loss {loss:.4f}" if loss is not None else "")
            self.bar.update(self.task, advance=1, info=info)

    def evaluated(self, step: int, result: EvalResult) -> None:
        cats = ", ".join(f"{c} {v:.1f}" for c, v in sorted(result.per_category.items()))
        self.console.print(f"evaluation after {step} step(s) on {result.split} ({result.n_tasks} tasks): average {result.average:.2f} [{cats}]", highlight=False, markup=False)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
