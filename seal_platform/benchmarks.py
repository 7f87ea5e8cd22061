"""Evaluation on more than one benchmark in a run (``evaluation.benchmarks``).

The training environment is evaluated as always; every benchmark the recipe lists next to it (an
out-of-distribution one, say BFCL V4 Memory next to BFCL multi-turn) is evaluated at the same steps by the
plugin that registered it, through the same ``evaluate`` hook, checked as the run's own evaluation is (one
trajectory per task, ids unique and not in the run store, finite rewards, pass rates that are percentages:
:func:`~seal_platform.stages.score_evaluation`, :func:`~seal_platform.stages.check_ids_unused`) and stored
under its own name, so ``seal-platform show`` and ``compare`` can list them side by side.
"""

from __future__ import annotations

from typing import Any

from .config import Issue, RunConfig
from .context import RunContext
from .errors import PluginError
from .stages import call_stage, check_ids_unused, evaluate_sampling, score_evaluation, wrap
from .types import EvalResult

_PREPARED = "seal_platform.benchmarks"  # ctx.shared key: the benchmarks built at set-up


def check_benchmarks(config: RunConfig, host: Any) -> list[Issue]:
    """Every listed benchmark is a registered environment whose plugin implements ``evaluate``."""
    issues = []
    environments = host.environments()
    seen: set[str] = {config.environment}
    for i, bench in enumerate(config.evaluation.benchmarks):
        where = f"evaluation.benchmarks[{i}]"
        if bench.key in seen:
            issues.append(Issue(where, f"the name {bench.key!r} is taken (the training environment is always evaluated "
                                       "under its own name)", "give this benchmark another `name`"))
        seen.add(bench.key)
        if problem := host.missing("environment", bench.environment):
            issues.append(Issue(where, *problem))
        elif not host.implements(environments[bench.environment][0], "evaluate"):
            issues.append(Issue(where, f"plugin {environments[bench.environment][0]!r} registers "
                                       f"{bench.environment!r} but does not implement 'evaluate'"))
    return issues


def prepare_benchmarks(host: Any, ctx: RunContext) -> dict[str, tuple[str, Any, list[Any]]]:
    """Benchmark key -> (owner plugin, environment, tasks): every extra benchmark's environment built and its
    tasks listed, at the run's set-up (and kept in ``ctx.shared`` for :func:`evaluate_benchmarks`): a benchmark
    whose factory fails, whose split is missing or empty, is refused before the model load and before any
    step, not at its first evaluation (after ``evaluation.every`` steps of training). Each environment is built
    once per run, by its own plugin's factory."""
    prepared: dict[str, tuple[str, Any, list[Any]]] = ctx.shared.setdefault(_PREPARED, {})
    built: dict[str, Any] = {}
    for bench in ctx.config.evaluation.benchmarks:
        if bench.key in prepared:
            continue
        owner, spec = host.environments()[bench.environment]
        if bench.environment not in built:
            built[bench.environment] = wrap("environment", owner, lambda: spec.factory(ctx), host)  # noqa: B023 wrap calls it before the loop moves on
        env = built[bench.environment]
        tasks = wrap("tasks", owner, lambda: env.tasks(bench.split), host, split=bench.split)  # noqa: B023 wrap calls it before the loop moves on
        tasks = tasks[: bench.max_tasks] if bench.max_tasks else tasks
        if not tasks:
            raise PluginError(f"benchmark {bench.environment!r} has no tasks in split {bench.split!r}.")
        prepared[bench.key] = (owner, env, list(tasks))
    return prepared


def evaluate_benchmarks(host: Any, ctx: RunContext, engine: Any, step: int) -> dict[str, EvalResult]:
    """Evaluate every extra benchmark at ``step`` and record each result under the benchmark's name."""
    prepared = prepare_benchmarks(host, ctx)  # built at set-up: read back
    results: dict[str, EvalResult] = {}
    for bench in ctx.config.evaluation.benchmarks:
        owner, env, tasks = prepared[bench.key]
        raw = call_stage(host, "evaluate", owner, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=step,
                         interface=None, sampling=evaluate_sampling(ctx.config))
        result = score_evaluation(raw, bench.split, owner, tasks)  # one per task (or its count), ids, rewards
        check_ids_unused(ctx.store, result.trajectories, "evaluate", owner)  # before the write
        if ctx.store is not None:
            ctx.store.add_evaluation(ctx.run_id, step, result, benchmark=bench.key)
        results[bench.key] = result
    return results
