"""The reinforce plugin: the ``optimize`` stage as REINFORCE with a baseline (docs/write-an-optimizer.md).

It imports only the core (``seal_platform``) and the policy runtime (``seal_platform_libs.policy``): the
policy is loaded with the runtime's :func:`~seal_platform_libs.policy.loading.load_policy` and put where the
runtime's ``hf`` / ``vllm`` engines (registered by the policy_engines plugin) sample from it
(``ctx.shared[POLICY_KEY]``); after each update the new weights go to the engine through the core's
:class:`~seal_platform.engine.TrainableEngine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seal_platform.config import Issue
from seal_platform.engine import TrainableEngine
from seal_platform.hookspecs import hookimpl
from seal_platform_libs.policy.engines import POLICY_KEY, engine_specs

from .settings import ReinforceSettings

NAME = "reinforce"
LEARNER = "reinforce.learner"


def _ours(config: Any) -> bool:
    return config.stages.optimize == NAME


@hookimpl
def register_settings() -> dict[str, type]:
    return {NAME: ReinforceSettings}


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Any) -> list[Issue]:
    engines = sorted(spec.name for spec in engine_specs())
    if _ours(config) and config.rollout.engine not in engines:
        return [Issue("rollout.engine", f"reinforce trains the policy that the policy runtime's engines sample "
                      f"from; {config.rollout.engine!r} is none of them", f"set rollout.engine to one of {engines}")]
    return []


@hookimpl
def start_run(ctx: Any, resumed: bool) -> None:
    if not _ours(ctx.config):
        return
    import torch

    from seal_platform_libs.policy.loading import PolicySettings, load_policy, train_top_layers

    from .learner import Reinforce

    settings = ctx.settings_for(NAME, ReinforceSettings)
    torch.manual_seed(ctx.seed)
    model, tokenizer = load_policy(ctx.settings_for("policy", PolicySettings))
    if settings.train_layers is not None:
        train_top_layers(model, settings.train_layers)
    ctx.shared[POLICY_KEY] = (model, tokenizer)  # the engine, built after start_run, samples from it
    ctx.shared[LEARNER] = Reinforce(model, tokenizer, settings)


@hookimpl
def optimize(ctx: Any, engine: Any, trajectories: list, weights: dict, step: int) -> dict[str, float]:
    learner = ctx.shared[LEARNER]
    metrics = learner.step(trajectories, weights)
    if metrics["updates"] and isinstance(engine, TrainableEngine):
        engine.update_weights(learner.model, version=learner.updates)
    return metrics


@hookimpl
def save_checkpoint(ctx: Any, directory: Path, step: int) -> dict[str, Any] | None:
    learner = ctx.shared.get(LEARNER)
    if learner is None:
        return None
    import torch

    torch.save(learner.state(), directory / "reinforce.pt")
    return {"updates": learner.updates}


@hookimpl
def load_checkpoint(ctx: Any, directory: Path, step: int) -> None:
    learner = ctx.shared.get(LEARNER)
    path = directory / "reinforce.pt"
    if learner is None or not path.is_file():
        return
    import torch

    learner.load_state(torch.load(path, map_location="cpu", weights_only=False))
    engine = ctx.shared.get("engine")
    if isinstance(engine, TrainableEngine):
        engine.update_weights(learner.model, version=learner.updates)


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    ctx.shared.pop(LEARNER, None)
