"""What the core fills in around the stage hooks, said and provided once.

* Sampling: ``collect`` gets the recipe's rollout sampling (``rollout.temperature``, ``top_p``,
  ``max_new_tokens``); ``evaluate`` gets greedy decoding (temperature 0, top-p 1) with
  ``evaluation.max_new_tokens`` (default: ``rollout.max_new_tokens``). Environments add only what is theirs
  (stop strings, per-rollout seeds) with ``sampling.model_copy(update=...)``; an environment with a cap of
  its own on new tokens builds its sampling with :func:`sampling_for` (the same rule, its cap in it).
* Scoring: ``evaluate`` returns the verified trajectories (one per task); the core turns them into the
  pass rate per category (:meth:`seal_platform.types.EvalResult.from_trajectories`).
* Interface revisions: the core sets ``revision``, ``parent`` and ``step`` of what ``evolve_interface`` returns.

:func:`collect_with` and :func:`evaluate_with` call a hook implementation exactly as the run loop does
(arguments it names, sampling filled in, result checked and scored), for a plugin's own tests.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from .config import RunConfig
from .errors import PluginError, SealError
from .interrupts import raise_if_interrupted
from .types import EvalResult, Interface, SamplingParams, Trajectory


def wrap(stage: str, plugin: str, fn: Callable[[], Any]) -> Any:
    """``fn()``; anything it raises other than a :class:`SealError` becomes a :class:`PluginError` naming the
    stage and the plugin (a plugin's bug is reported as one, with its cause). A Ctrl-C that a library
    swallowed during the call stops the run when it returns (:func:`~seal_platform.interrupts.raise_if_interrupted`)."""
    try:
        result = fn()
        raise_if_interrupted()
        return result
    except SealError:
        raise
    except Exception as exc:
        raise PluginError(f"the {stage!r} stage failed in plugin {plugin!r}: {type(exc).__name__}: {exc}") from exc


def expect_list_of(value: Any, kind: type[Any], stage: str, plugin: str) -> list[Any]:
    """``value`` as a list of ``kind`` (validated from dicts), or a :class:`PluginError` naming the plugin."""
    if value is None:
        raise PluginError(f"plugin {plugin!r} returned nothing from {stage!r}; it must return a list of {kind.__name__}.")
    try:
        return [item if isinstance(item, kind) else kind.model_validate(item) for item in value]
    except Exception as exc:
        raise PluginError(f"plugin {plugin!r} returned something other than a list of {kind.__name__} from {stage!r}: {exc}") from exc


def sampling_for(config: RunConfig, *, evaluation: bool, max_new_tokens: int | None = None,
                 stop: Sequence[str] = ()) -> SamplingParams:
    """The one rule for an episode's sampling, from the recipe.

    Training rollouts: ``rollout.temperature`` and ``rollout.top_p``; evaluation: greedy (temperature 0,
    top-p 1). New tokens per generation: in evaluation ``evaluation.max_new_tokens`` when set, then the
    environment's own cap ``max_new_tokens`` (its setting; None: none), then ``rollout.max_new_tokens``.
    ``stop``: the environment's stop strings."""
    rollout = config.rollout
    if evaluation:
        cap = config.evaluation.max_new_tokens or max_new_tokens or rollout.max_new_tokens
        return SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=cap, stop=list(stop))
    return SamplingParams(temperature=rollout.temperature, top_p=rollout.top_p,
                          max_new_tokens=max_new_tokens or rollout.max_new_tokens, stop=list(stop))


def collect_sampling(config: RunConfig) -> SamplingParams:
    """The sampling ``collect`` gets: :func:`sampling_for` training rollouts (the recipe's ``rollout`` section)."""
    return sampling_for(config, evaluation=False)


def evaluate_sampling(config: RunConfig) -> SamplingParams:
    """The sampling ``evaluate`` gets: :func:`sampling_for` evaluation (greedy, ``evaluation.max_new_tokens``,
    default ``rollout.max_new_tokens``)."""
    return sampling_for(config, evaluation=True)


def score_evaluation(result: Any, split: str, plugin: str) -> EvalResult:
    """What ``evaluate`` returned, as an :class:`EvalResult`: verified trajectories are scored here (pass
    rate per category); an ``EvalResult`` (an environment with its own scoring) is taken as it is, recorded
    under ``split``: the core chose the tasks, so the split is the core's to name."""
    if isinstance(result, EvalResult):
        return result if result.split == split else result.model_copy(update={"split": split})
    if isinstance(result, list):
        try:
            trajectories = [t if isinstance(t, Trajectory) else Trajectory.model_validate(t) for t in result]
        except Exception as exc:
            raise PluginError(f"plugin {plugin!r} returned something other than trajectories from 'evaluate': {exc}") from exc
        return EvalResult.from_trajectories(split, trajectories)
    raise PluginError(f"plugin {plugin!r} must return a list of Trajectory (or an EvalResult) from 'evaluate', "
                      f"not {type(result).__name__}.")


def adopt_interface(new: Any, current: Interface, step: int, plugin: str) -> Interface:
    """The revision ``evolve_interface`` proposed, numbered by the core: ``revision = current + 1``,
    ``parent = current``, ``step``."""
    if not isinstance(new, Interface):
        raise PluginError(f"plugin {plugin!r} must return an Interface or None from 'evolve_interface'.")
    return new.model_copy(update={"revision": current.revision + 1, "parent": current.revision, "step": step})


def call_impl(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Call a hook implementation with the arguments it names (as pluggy does), the rest left out."""
    names = [
        name for name, p in inspect.signature(fn).parameters.items()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return fn(**{name: kwargs[name] for name in names if name in kwargs})


def collect_with(fn: Callable[..., Any], *, ctx: Any, environment: Any, engine: Any, tasks: list[Any],
                 interface: Interface, group_size: int, step: int) -> list[Trajectory]:
    """``fn`` (a ``collect`` implementation) called as the run loop calls it."""
    return call_impl(fn, ctx=ctx, environment=environment, engine=engine, tasks=tasks, interface=interface,
                     group_size=group_size, step=step, sampling=collect_sampling(ctx.config))


def evaluate_with(fn: Callable[..., Any], *, ctx: Any, environment: Any, engine: Any, tasks: list[Any],
                  step: int, plugin: str = "test") -> EvalResult:
    """``fn`` (an ``evaluate`` implementation) called and scored as the run loop does."""
    result = call_impl(fn, ctx=ctx, environment=environment, engine=engine, tasks=tasks, step=step,
                       sampling=evaluate_sampling(ctx.config))
    return score_evaluation(result, ctx.config.evaluation.split, plugin)
