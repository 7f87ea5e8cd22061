"""The grpo plugin: GRPO with A-Patch (the ``reweight`` and ``optimize`` stages) on the policy runtime
(:mod:`seal_platform_libs.policy`), whose ``hf`` / ``vllm`` rollout engines the policy_engines plugin registers.

Thin hook implementations: the work is in the sibling modules, and torch / transformers are imported only
inside them, when a run starts, so loading this module (``seal-platform plugins``) stays fast.

Settings sections: ``grpo`` (:class:`~.settings.GRPOSettings`) and ``apatch``
(:class:`~.settings.APatchSettings`); it reads the policy_engines plugin's ``policy`` and ``engine``. Run state
lives in ``ctx.shared``: ``grpo.policy`` = (model, tokenizer), read by the engines; ``grpo.apatch``, the label
weights; ``grpo.run``, the trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform_libs.policy.engines import POLICY_KEY, REPLICATED, engine_specs
from seal_platform_libs.policy.engines.settings import EngineSettings
from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_libs.policy.on_ray import on_ray

from .apatch import APatch
from .settings import APatchSettings, GRPOSettings

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.registry import Cluster
    from seal_platform_libs.policy.engines.replicas import RayEngineClient

NAME = "grpo"
POLICY = POLICY_KEY  # (model, tokenizer): what the engines sample from
RUN = "grpo.run"
APATCH = "grpo.apatch"


def _apatch(ctx: Any) -> APatch:
    apatch = ctx.shared.get(APATCH)
    if apatch is None:
        apatch = ctx.shared[APATCH] = APatch(ctx.settings_for("apatch", APatchSettings),
                                             ctx.settings_for("grpo", GRPOSettings))
    return apatch


def _holds_policy(config: Any) -> bool:
    """Whether grpo loads and holds the run's policy: it optimizes, or nothing does and the rollout engine is one
    of the policy runtime's (``hf``, ``vllm``: an evaluation-only run). Another optimizer on the runtime
    (examples/seal-reinforce) holds its own."""
    optimize = config.stages.optimize
    return optimize == NAME or (optimize is None and config.rollout.engine in {s.name for s in engine_specs()})


def _used(ctx: Any) -> bool:
    """Whether the run uses grpo: it reweights (A-Patch) or holds the policy (:func:`_holds_policy`). Every
    enabled plugin's checkpoint hooks are called; grpo's write and read its files only then."""
    return ctx.config.stages.reweight == NAME or _holds_policy(ctx.config)


def _temperature(ctx: Any, settings: GRPOSettings) -> float:
    if settings.temperature is not None:
        return settings.temperature
    rollout = ctx.config.rollout.temperature
    return rollout if rollout > 0 else 1.0


@hookimpl
def register_settings() -> dict[str, type]:
    return {"grpo": GRPOSettings, "apatch": APatchSettings}


@hookimpl
def register_commands(cli: Any) -> None:
    from .export import add_commands  # click only; torch is imported when the command runs
    from .plan_command import add_command

    add_commands(cli)
    add_command(cli)


@hookimpl
def register_metrics() -> list:
    from .metrics import METRIC_SPECS

    return list(METRIC_SPECS)


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Cluster | None) -> list[Issue]:
    grpo = settings.get("grpo") or GRPOSettings()
    engine = settings.get("engine") or EngineSettings()
    ray = on_ray(cluster, grpo.placement)
    if grpo.replicas > 1 and ray is None:
        return [Issue("settings.grpo.replicas", "it counts engine replicas on Ray (Ray actors)",
                      "set settings.ray.enabled: true (and settings.ray.address to join a cluster); without Ray "
                      "use settings.engine.replicas (local processes; by default one per GPU), and "
                      "settings.grpo.replicas: 1")]
    if engine.replicas is not None and ray is not None:
        return [
            Issue(
                "settings.engine.replicas",
                "it counts local engine processes, which a run on Ray does not start",
                "set settings.grpo.replicas (Ray actors) and drop settings.engine.replicas",
            )
        ]
    uses_policy = _holds_policy(config)
    template = _template_issue(settings.get("policy") or PolicySettings()) if uses_policy else None
    if template is not None:  # before any model loads (start_run would find it only after loading them all)
        return [template]
    if config.rollout.overlap and config.stages.optimize == NAME:
        from .staleness import overlap_issues

        return overlap_issues(config, grpo, settings.get("engine") or EngineSettings(),
                              on_ray(cluster, grpo.placement) is not None)
    return []


def _template_issue(policy: PolicySettings) -> Issue | None:
    """Why the policy's chat template cannot give exact episode token sequences (None: it can, or its tokenizer
    is not on this machine, which check_machine reports; the embedded model's is known). Only the tokenizer is
    loaded (transformers is imported for a local model folder only), and the template is put
    to the token code's own test (:func:`.tokens.chat_template_problem`), so the two never disagree."""
    from seal_platform_libs.policy.loading import EMBEDDED_MODEL

    if policy.model == EMBEDDED_MODEL:
        return None  # SmolLM2's ChatML, supported (tests/grpo/test_tokens.py): no transformers import to say so
    folder = Path(policy.model).expanduser()
    if not (folder / "tokenizer_config.json").is_file():
        return None  # a hub name, or the embedded model not yet converted (its template is ChatML)
    # Once per folder and version of its tokenizer files in a process (config validate, then run, ...).
    key = (str(folder.resolve()), tuple(sorted((f.name, f.stat().st_mtime_ns) for f in folder.iterdir()
                                               if f.name.startswith(("tokenizer", "chat_template", "special_tokens")))))
    if key not in _TEMPLATE_VERDICTS:
        _TEMPLATE_VERDICTS[key] = _template_verdict(folder)
    return _TEMPLATE_VERDICTS[key]


_TEMPLATE_VERDICTS: dict[tuple[str, tuple[tuple[str, int], ...]], Issue | None] = {}


def _template_verdict(folder: Path) -> Issue | None:
    from transformers import AutoTokenizer

    from seal_platform_libs.policy.tokens import chat_template_problem

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception:  # noqa: BLE001 - a tokenizer that does not load: start_run's load reports it
        return None
    problem = chat_template_problem(tokenizer)
    if problem is None:
        return None
    return Issue("settings.policy.model", f"the chat template of {str(folder)!r} cannot be trained: {problem}",
                 "give the model folder a chat template that renders assistant messages as their text "
                 "(tokenizer_config.json's chat_template, or chat_template.jinja)")


@hookimpl
def check_machine(config: Any, settings: dict[str, Any], cluster: Cluster | None) -> list[str]:
    from seal_platform_libs.policy.devices import problems

    uses_policy = _holds_policy(config)
    grpo = settings.get("grpo") or GRPOSettings()
    policy = settings.get("policy") or PolicySettings()
    found = problems(config, policy, uses_policy, grpo, cluster)
    model = _model_problem(policy) if uses_policy else None
    if model is not None:  # start_run loads the policy here, whatever the cluster: found before any row is written
        found = [model, *found]
    ray = on_ray(cluster, grpo.placement)
    if found or not uses_policy or (cluster is not None and cluster.address):
        return found
    import torch

    if ray is None and config.rollout.engine in {spec.name for spec in engine_specs()}:
        from seal_platform.errors import ConfigError
        from seal_platform_libs.policy.engines.settings import local_devices

        try:  # engine.gpus naming GPUs this machine does not have
            local_devices(settings.get("engine") or EngineSettings(),
                          torch.cuda.device_count() if torch.cuda.is_available() else 0)
        except ConfigError as exc:
            return [str(exc)]
    if not torch.cuda.is_available():
        return found
    from seal_platform_libs.policy.memory_plan import plan

    # The recipe's memory plan on this machine's GPUs, before anything is loaded on them.
    gpus = torch.cuda.device_count()
    memory = min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus)) / 2**30
    try:
        result = plan(config, settings, gpus, memory, on_ray=ray is not None)
    except ValueError:
        return found  # a model of unknown shape: nothing to check against
    return [f"memory plan (`seal-platform plan` prints it): {p}" for p in result.problems]


def _model_problem(policy: PolicySettings) -> str | None:
    """Why ``settings.policy.model`` names nothing :func:`~.policy.load_policy` can load without a download
    (None: it can): the checks of :func:`~.policy.model_dir` (a local folder with a config.json), and for the
    embedded model its package, without converting it."""
    from seal_platform_libs.policy.loading import EMBEDDED_MODEL, embedded_gguf_path, model_dir

    try:
        if policy.model == EMBEDDED_MODEL:
            embedded_gguf_path()  # converted (once) by start_run
        else:
            model_dir(policy)
    except FileNotFoundError as exc:
        return str(exc)
    return None


@hookimpl
def start_run(ctx: Any, resumed: bool) -> None:
    optimizes = ctx.config.stages.optimize == NAME
    _apatch(ctx)
    if not _holds_policy(ctx.config):
        return
    import random

    import numpy as np
    import torch

    from seal_platform_libs.policy.loading import load_policy

    from .run import GRPORun

    # Always seeded: a run resumed before its first checkpoint restarts from step 0 exactly as a new run;
    # a resumed run with a checkpoint then gets its RNG states back from it (load_checkpoint).
    random.seed(ctx.seed)
    np.random.seed(ctx.seed % 2**32)
    torch.manual_seed(ctx.seed)
    model, tokenizer = load_policy(ctx.settings_for("policy", PolicySettings))
    settings = ctx.settings_for("grpo", GRPOSettings)
    if settings.lora is not None:
        from seal_platform_libs.policy.lora import wrap

        model = wrap(model, settings.lora, gradient_checkpointing=settings.gradient_checkpointing)
    if settings.train_layers is not None and optimizes:
        from seal_platform_libs.policy.loading import train_top_layers

        train_top_layers(model, settings.train_layers)
    ctx.shared[POLICY] = (model, tokenizer)
    ctx.shared[RUN] = GRPORun(
        model, tokenizer, settings, _apatch(ctx), temperature=_temperature(ctx, settings), train=optimizes,
        policy=ctx.settings_for("policy", PolicySettings), seed=ctx.seed,
        ray=on_ray(ctx.cluster, settings.placement),
    )
    advice = ctx.shared[RUN].allocator_advice
    if advice:
        ctx.event("cpu_allocator", advice)


def _colocated(ctx: Any) -> bool:
    """Engines share the trainer's GPUs (Ray, ``grpo.placement.colocate``): they sleep during the update."""
    placement = ctx.settings_for("grpo", GRPOSettings).placement
    return on_ray(ctx.cluster, placement) is not None and placement.colocate


@hookimpl
def reweight(ctx: Any, trajectories: list, labels: list, state: Any, step: int) -> Any:
    return _apatch(ctx).reweight(trajectories, labels, state, step)


@hookimpl
def optimize(ctx: Any, engine: Any, trajectories: list, weights: dict, step: int, rollouts: Any) -> dict[str, float]:
    run = ctx.shared.get(RUN)
    if run is None:
        raise RuntimeError("grpo's optimize was called before its start_run: the run loop must call start_run first")
    replicated = ctx.shared.get(REPLICATED)
    sleep = replicated.sleep if replicated is not None and _colocated(ctx) else None
    metrics = run.optimize(engine, trajectories, weights, screen_stale=True, sleep=sleep,
                           wait_for_rollouts=rollouts.wait)
    if replicated is not None:
        _report_lost_replicas(ctx, replicated)
    return metrics


def _report_lost_replicas(ctx: Any, engine: RayEngineClient) -> None:
    """An event for each engine replica found dead since the last report (replicated engines on Ray); the
    replicas are asked, so a replica lost while nothing was sent to it is reported in this step too."""
    replicas = engine.replicas
    dead = set(range(len(replicas))) - set(engine.probe())
    reported = ctx.shared.setdefault("grpo.lost_replicas", set())
    for index in sorted(dead - reported):
        ctx.event("engine_replica_lost", f"rollout engine replica {index} of {len(replicas)} died; its requests "
                  "were retried on the others", replica=index, live=sorted(set(range(len(replicas))) - dead))
    reported.update(dead)


@hookimpl
def save_checkpoint(ctx: Any, directory: Path, step: int) -> dict[str, Any] | None:
    if not _used(ctx):  # another plugin's run: nothing of grpo's to keep
        return None
    from . import checkpoint

    run = ctx.shared.get(RUN)
    return checkpoint.save(
        directory,
        model=run.model if run else None,
        trainer=run.trainer if run else None,
        apatch=_apatch(ctx),
        step=step,
    )


@hookimpl
def load_checkpoint(ctx: Any, directory: Path, step: int) -> None:
    if not _used(ctx):  # save_checkpoint wrote nothing (an older version's files, if any, are not needed)
        return
    from . import checkpoint

    run = ctx.shared.get(RUN)
    checkpoint.load(directory, model=run.model if run else None, trainer=run.trainer if run else None,
                    apatch=_apatch(ctx))
    engine = ctx.shared.get("engine")
    if run is not None and run.trainer is not None and engine is not None:
        from .staleness import push_weights

        push_weights(engine, run.model, run.trainer.updates)


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    # The engine is the core's to close (it built it); here only the policy and trainer are let go.
    run = ctx.shared.get(RUN)
    close = getattr(getattr(run, "trainer", None), "close", None)
    if callable(close):  # sharded training: stop the worker processes
        close()
    for key in (RUN, POLICY):
        ctx.shared.pop(key, None)
