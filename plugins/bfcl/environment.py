"""The BFCL multi-turn environment: tasks, the pristine interface, episodes, verification, collect/evaluate.

Everything heavy (the worker processes that host the BFCL backends) is created on first use, so building
the environment is cheap and ``seal-platform verify`` / ``config validate`` do not start processes they do
not need.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from seal_platform.engine import RolloutEngine
from seal_platform.infra import failed_trajectory
from seal_platform.types import EvalResult, Interface, SamplingParams, Task, Trajectory
from seal_platform_libs.toolenv.episodes import evaluation_group, training_group
from seal_platform_libs.toolenv.formats import ToolCallFormat, get_format

from . import data
from .diagnoser import label_turns
from .episode import EpisodeLimits, EpisodeSetup, run_episode
from .settings import BfclSettings

if TYPE_CHECKING:
    from .executor import ToolExecutor
    from .trace import VerifyOutcome

# ``ctx.executor.map``: (fn, items, on_infra_failure=...) -> results in order (seal_platform.executor.Executor).
Mapper = Callable[..., list[Any]]


class BfclEnvironment:
    """BFCL v3 multi-turn (base, miss_func, miss_param, long_context) behind the core's Environment protocol."""

    name = "bfcl"

    def __init__(self, settings: BfclSettings | None = None):
        self.settings = settings or BfclSettings()
        self._executor: ToolExecutor | None = None
        self._lock = threading.Lock()
        options = (
            {
                "include_response": self.settings.include_response_schema,
                "wrap_results": self.settings.wrap_tool_responses,
            }
            if self.settings.tool_call_format == "hermes"
            else {}
        )
        self.format: ToolCallFormat = get_format(self.settings.tool_call_format, **options)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (to run episodes in another process, e.g. a Ray actor) without its tool workers: the copy
        starts its own, with the same isolation and limits, on first use."""
        state = dict(self.__dict__)
        state.update(_executor=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- the Environment protocol ---------------------------------------------------------------------

    def tasks(self, split: str) -> list[Task]:
        """The tasks of ``split``: ``train`` and ``eval`` map to the settings' split names; other names
        (``eval_val``, ``eval_test``, ``all``) are used as given. Filtered by categories, ids and limit."""
        name = self.settings.data_split(split)
        ids = self.settings.task_ids
        if ids is not None:
            # The id filter may name tasks of one split only; the other split is then empty, not an error.
            try:
                data.load_tasks(self.settings.categories, split="all", ids=ids)
            except data.DataError as exc:
                raise data.DataError(f"settings.bfcl.task_ids: {exc}") from None
            if name != "all":
                in_split = set(data.split_ids()[name]) if name in data.split_ids() else set()
                ids = [i for i in ids if i in in_split]
        return data.load_tasks(
            self.settings.categories, split=name, ids=ids, limit_per_category=self.settings.limit_per_category
        )

    def pristine_interface(self) -> Interface:
        """Revision 0: the official presentation (the interface renderers leave it untouched)."""
        return Interface(revision=0)

    def verify_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Score one ``seal-platform verify`` record; ValueError for a malformed one."""
        from .verifier import verify_record

        return verify_record(
            record, executor=self.executor, label_turns=lambda task, outcome: label_turns(outcome.turns)
        )

    def verify_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score many ``seal-platform verify`` records with one worker stream (see
        :meth:`ToolExecutor.verify_many`); a malformed record gets ``{"error": ...}`` in its place."""
        from .verifier import verify_records

        return verify_records(records, executor=lambda: self.executor, timeout_s=self.settings.episode_timeout_s,
                              call_timeout_s=self.settings.call_timeout_s,
                              label_turns=lambda task, outcome: label_turns(outcome.turns))

    # --- resources --------------------------------------------------------------------------------------

    @property
    def executor(self) -> ToolExecutor:
        """The tool-execution worker pool (started on first use)."""
        with self._lock:
            if self._executor is None:
                from .executor import ToolExecutor

                s = self.settings
                self._executor = ToolExecutor(
                    max_workers=s.executor_workers,
                    call_timeout_s=s.call_timeout_s,
                    episode_timeout_s=s.episode_timeout_s,
                    # The worker clips before sending; the episode clips to tokens afterwards.
                    max_result_chars=max(16_000, s.max_observation_tokens * 8),
                )
            return self._executor

    def close(self) -> None:
        """Stop the tool workers (a later episode starts them again)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()

    # --- episodes ---------------------------------------------------------------------------------------

    def episode_setup(self) -> EpisodeSetup:
        s = self.settings
        limits = EpisodeLimits(
            max_steps=s.max_steps,
            step_limit_scope=s.step_limit_scope,
            max_context_tokens=s.max_context_tokens,
            max_observation_tokens=s.max_observation_tokens,
            max_new_tokens=s.max_new_tokens,
        )
        return EpisodeSetup(
            fmt=self.format, limits=limits, compact_tools=s.compact_tools, system_preamble=s.system_preamble
        )

    def play(
        self,
        task: Task,
        engine: RolloutEngine,
        interface: Interface,
        sampling: SamplingParams,
        *,
        group: str = "",
        sample: int = 0,
    ) -> Trajectory:
        """One episode of ``task``, verified: reward 1/0 and one verdict per ground-truth turn."""
        with self.executor.open_session(task) as session:
            trajectory = run_episode(
                task, engine, interface, sampling, self.episode_setup(), session, group=group, sample=sample
            )
        return self.verify_trajectory(task, trajectory)

    def verify_trajectory(self, task: Task, trajectory: Trajectory) -> Trajectory:
        """Set ``reward`` and ``turn_verdicts`` from the official verdict on the calls that ran."""
        outcome = self.verify_calls(task, trajectory)
        trajectory.reward = 1.0 if outcome.success else 0.0
        trajectory.turn_verdicts = list(outcome.turns)
        trajectory.metadata["error_type"] = outcome.error_type
        return trajectory

    def verify_calls(self, task: Task, trajectory: Trajectory) -> VerifyOutcome:
        """Replay the trajectory's executed calls (rejected messages never ran) against the ground truth."""
        from seal_platform_libs.toolenv.calls import from_arguments

        from .verifier import verify

        n_turns = int(trajectory.metadata.get("turns_reached", 0))
        turns: list[list[Any]] = [[] for _ in range(n_turns)]
        for call in trajectory.tool_calls:
            if call.rejected is None and call.turn < n_turns:
                turns[call.turn].append(from_arguments(call.name, call.arguments))
        return verify(task, turns, executor=self.executor)

    # --- stages -----------------------------------------------------------------------------------------

    def collect(
        self,
        engine: RolloutEngine,
        tasks: list[Task],
        interface: Interface,
        group_size: int,
        step: int,
        sampling: SamplingParams,
        mapper: Mapper,
        seed: int = 0,
    ) -> list[Trajectory]:
        """``group_size`` verified rollouts per task under the training ``interface``, grouped per task."""
        jobs = [(task, j) for task in tasks for j in range(group_size)]

        def one(job: tuple[Task, int]) -> Trajectory:
            task, j = job
            # Distinct seeds per sample: G rollouts with one seed would be G copies of one rollout.
            params = sampling.model_copy(update={"seed": _seed(seed, step, task.id, j)})
            return self.play(task, engine, interface, params, group=training_group(step, task.id), sample=j)

        def lost(job: tuple[Task, int], reason: str) -> Trajectory:
            task, j = job
            return failed_trajectory(task, training_group(step, task.id), j, reason, interface.revision)

        return list(mapper(one, jobs, on_infra_failure=lost))

    def evaluation_rollouts(
        self, engine: RolloutEngine, tasks: list[Task], step: int, mapper: Mapper, sampling: SamplingParams,
        interface: Interface | None = None,
    ) -> list[Trajectory]:
        """One rollout per task on the pristine interface (or ``interface``, the run's training interface when
        the core measures the train/eval gap) with the core's (greedy) ``sampling``, verified."""
        interface = interface or self.pristine_interface()

        def one(task: Task) -> Trajectory:
            return self.play(task, engine, interface, sampling, group=evaluation_group(step, task.id))

        return list(mapper(one, list(tasks)))

    def evaluate(
        self,
        engine: RolloutEngine,
        tasks: list[Task],
        step: int,
        mapper: Mapper,
        max_new_tokens: int,
        split: str = "eval",
    ) -> EvalResult:
        """Greedy rollouts scored as the core scores them (pass rate per category), outside a run."""
        sampling = SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
        return EvalResult.from_trajectories(split, self.evaluation_rollouts(engine, tasks, step, mapper, sampling))


def _seed(seed: int, step: int, task_id: str, sample: int) -> int:
    return zlib.crc32(f"{seed}:{step}:{task_id}:{sample}".encode()) & 0x7FFFFFFF
