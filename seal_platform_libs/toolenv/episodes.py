"""What the ``collect`` and ``evaluate`` hooks of tool environments share: which episodes a step plays (and
the group key that ties a task's samples together), how a tool-call turn is sampled, how an evaluation is
scored when some episodes were lost to the environment's infrastructure, and the JSON Lines task file.

A group key only has to be the same for the samples of one task in one step and differ otherwise; nothing
parses it. Spelling it here keeps every environment's keys alike in the store and the transcripts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seal_platform.config import Issue, RunConfig
from seal_platform.stages import sampling_for
from seal_platform.types import EvalResult, SamplingParams, Task, Trajectory

Episode = tuple[Task, str, int]  # (task, group key, sample index within the group)
TOOL_CALL_STOP = "</tool_call>"


def training_group(step: int, task_id: str) -> str:
    """The group key of a task's training samples in ``step``."""
    return f"{step}:{task_id}"


def evaluation_group(step: int, task_id: str) -> str:
    """The group key of a held-out task's episode in the evaluation at ``step``."""
    return f"eval{step}:{task_id}"


def lockstep_executor_issues(config: RunConfig, environment: str, how: str, fix: str) -> list[Issue]:
    """For the ``check_config`` hook of an environment that plays its episodes in lock step in the run's own
    process (``how``: in what batches) and never hands them to ``ctx.executor``: the recipe problem of naming
    another executor for it, which would go unused (``fix``: what to do instead); [] when the recipe's
    environment is another one or its executor the local one."""
    if config.environment != environment or config.rollout.executor == "local":
        return []
    return [Issue("rollout.executor",
                  f"environment {environment} plays its episodes in lock step in the run's own process ({how}) and "
                  f"never hands them to an executor, so executor {config.rollout.executor!r} would go unused", fix)]


def training_episodes(tasks: Sequence[Task], group_size: int, step: int) -> list[Episode]:
    """``group_size`` samples of each task, one group per task."""
    return [(task, training_group(step, task.id), j) for task in tasks for j in range(group_size)]


def evaluation_episodes(tasks: Sequence[Task], step: int) -> list[Episode]:
    """One episode per held-out task."""
    return [(task, evaluation_group(step, task.id), 0) for task in tasks]


def tool_call_sampling(ctx: Any, evaluation: bool, max_new_tokens: int | None) -> SamplingParams:
    """The run's sampling for one agent turn that ends at a closed ``<tool_call>`` block (greedy when
    ``evaluation``; see :func:`seal_platform.stages.sampling_for`)."""
    return sampling_for(ctx.config, evaluation=evaluation, max_new_tokens=max_new_tokens, stop=[TOOL_CALL_STOP])


def scored_without_infra_failures(ctx: Any, tasks: Sequence[Task], trajectories: list[Trajectory]) -> EvalResult:
    """The evaluation of ``trajectories`` (one per task), scored over the episodes the policy answers for: one
    lost to a server failure (``infra_failure``) says nothing about the policy, so it is left out of the pass
    rates but counted, in ``n_tasks`` (every task given, as the core checks) and in ``n_infra_failures``. Every
    trajectory stays in the result."""
    split = tasks[0].split if tasks else ctx.config.evaluation.split
    ran = [t for t in trajectories if not t.infra_failure]
    result = EvalResult.from_trajectories(split, ran)
    return result.model_copy(update={"n_tasks": len(trajectories), "n_infra_failures": len(trajectories) - len(ran),
                                     "trajectories": trajectories})


def load_task_file(path: str | Path, spec: Any, setting: str, payload: Callable[[Any], dict[str, Any]]) -> list[Task]:
    """Every task of a JSON Lines file, each line validated by the pydantic model ``spec`` (which has ``id``,
    ``split`` and ``category``) and turned into a task with ``payload(line)``. A missing file names the recipe
    ``setting``; a bad line or a repeated id is reported with its line number, and nothing is half-loaded."""
    from pydantic import ValidationError

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"task file {str(path)!r} not found ({setting}; relative paths are read from the "
                         "current directory)")
    tasks, seen = [], set()
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:  # a Latin-1 byte, say: the file and line, not a bare codec error
            raise ValueError(
                f"{path}:{number}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1} "
                "cannot be decoded): save the task file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            ) from None
        if not line.strip():
            continue
        try:
            parsed = spec.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"{path}:{number}: not a valid task: {str(exc).splitlines()[0]}") from None
        if parsed.id in seen:
            raise ValueError(f"{path}:{number}: task id {parsed.id!r} repeats")
        seen.add(parsed.id)
        tasks.append(Task(id=parsed.id, category=parsed.category, split=parsed.split, payload=payload(parsed)))
    return tasks
