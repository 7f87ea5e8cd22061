"""The environment object the core builds once per run: tasks, the pristine interface, episodes, and
``verify_record`` for ``seal-platform verify --benchmark kvstore``."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from pydantic import Field

from seal_platform.config import Section
from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, SamplingParams, Task, Trajectory

from .episode import STOP, run_episode
from .evolution import EvolutionSettings
from .tasks import Call, KVStore, make_tasks
from .verifier import verify

SYSTEM = ("You manage a key-value store with these tools:\n" + "\n".join(f"- {d}" for d in KVStore.TOOLS.values())
          + '\nCall one tool per message as <tool_call>{"name": ..., "arguments": {...}}</tool_call>. '
          "Answer without a call when the user's request is done.")


class KVSettings(Section):
    """Settings section ``kvstore``."""

    n_train: int = Field(default=24, ge=1, le=1_000_000)
    n_eval: int = Field(default=12, ge=1, le=1_000_000)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    max_steps_per_turn: int = Field(
        default=4, ge=1, le=1000, description="Agent messages per user turn before the episode stops."
    )
    max_new_tokens: int = Field(
        default=64, ge=1, le=1_048_576, description="Cap per generation (the core's sampling may ask for less)."
    )
    evolution: EvolutionSettings = Field(default_factory=EvolutionSettings)


class KVEnvironment:
    name = "kvstore"

    def __init__(self, settings: KVSettings):
        self.settings = settings

    def tasks(self, split: str) -> list[Task]:
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}: kvstore has 'train' and 'eval'")
        n = self.settings.n_train if split == "train" else self.settings.n_eval
        return make_tasks(split, n, self.settings.seed)

    def pristine_interface(self) -> Interface:
        return Interface(revision=0, system_text=SYSTEM, spec={"changes": []})

    def own_sampling(self, sampling: SamplingParams) -> SamplingParams:
        """The core's sampling plus what is this environment's: its stop string and token cap."""
        return sampling.model_copy(
            update={"stop": [STOP], "max_new_tokens": min(sampling.max_new_tokens, self.settings.max_new_tokens)}
        )

    def play(self, task: Task, engine: RolloutEngine, interface: Interface, sampling: SamplingParams,
             group: str = "", sample: int = 0) -> Trajectory:
        """One episode, verified: reward 1 when every turn passes, one verdict per ground-truth turn. A sampled
        (not greedy) episode gets a seed of its own from its group and sample, so a group's rollouts differ and
        a run is reproducible whatever order its episodes run in."""
        if sampling.temperature > 0 and sampling.seed is None:
            sampling = sampling.model_copy(update={"seed": zlib.crc32(f"{group}:{sample}".encode())})
        trajectory = run_episode(task, engine, interface, self.own_sampling(sampling),
                                 self.settings.max_steps_per_turn, group=group, sample=sample)
        reached = int(trajectory.metadata["turns_reached"])
        turns: list[list[Call]] = [[] for _ in range(reached)]
        rejected = [0] * reached
        for call in trajectory.tool_calls:
            if call.rejected:
                rejected[call.turn] += 1
            else:
                turns[call.turn].append(Call(name=call.name, arguments=call.arguments))
        trajectory.turn_verdicts = verify(task, turns, rejected)
        trajectory.reward = 1.0 if all(v.passed for v in trajectory.turn_verdicts) else 0.0
        return trajectory

    def play_all(self, map_: Callable[..., list[Any]], engine: RolloutEngine, jobs: list[tuple[Task, str, int]],
                 interface: Interface, sampling: SamplingParams) -> list[Trajectory]:
        """Episodes through the run's executor (``ctx.executor.map``), so a distributed one can take over."""
        return map_(lambda job: self.play(job[0], engine, interface, sampling, group=job[1], sample=job[2]), jobs)

    def verify_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """``{"task_id": "kv-eval-0", "turns": [[{"name": "put", "arguments": {...}}, ...], ...]}`` ->
        ``{"task_id", "success", "turns": [{"turn", "passed", "checks"}]}``. ValueError for a bad record."""
        tasks = {t.id: t for split in ("train", "eval") for t in self.tasks(split)}
        task = tasks.get(str(record.get("task_id")))
        if task is None:
            raise ValueError(f"unknown task_id {record.get('task_id')!r}")
        raw = record.get("turns")
        if not isinstance(raw, list) or not all(isinstance(turn, list) for turn in raw):
            raise ValueError("'turns' must be a list of turns, each a list of calls")
        try:
            turns = [[Call.model_validate(c) for c in turn] for turn in raw]
        except Exception as exc:
            raise ValueError(f"a call is not {{'name': str, 'arguments': {{str: str}}}}: {exc}") from None
        verdicts = verify(task, turns)
        return {"task_id": task.id, "success": all(v.passed for v in verdicts),
                "turns": [v.model_dump(include={"turn", "passed", "checks"}) for v in verdicts]}
