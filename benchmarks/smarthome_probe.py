"""How hard is smarthome for the model, as a recipe configures it? The base model's pass rates before any
training: sampled training rollouts (the recipe's temperature, G per task) and the greedy held-out
evaluation, per category, with how many groups have mixed outcomes (the ones GRPO can learn from).

This is the check behind the environment's sizing: the embedded SmolLM2-135M-Instruct should pass some of
its training rollouts from the start (15-60%) and stay well below the ceiling on the held-out set.

    .venv/bin/python benchmarks/smarthome_probe.py                       # the default run's settings
    .venv/bin/python benchmarks/smarthome_probe.py --recipe smarthome-seal --tasks 32 --temperatures 0.5 0.7
    .venv/bin/python benchmarks/smarthome_probe.py --scaffold --tasks 64 \\
        --set 'settings.smarthome.categories=[paraphrase]'

``--scaffold`` also samples the same tasks (same seeds) on the reference scaffold (the paper's static schema
affordances, the stock recipe's training interface) and reports the mixed groups on both: the scarce-signal
experiment's Stage 0 (docs/ablation.md).

Run by hand (it loads the model and a vLLM engine); nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict


def pass_rates(trajectories) -> dict[str, float]:
    by: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        by[t.category].append(t.reward)
    return {c: round(100 * statistics.fmean(v), 1) for c, v in sorted(by.items())}


def sample(engine, env, train, group, name, interface, temperature, config, max_new, protocol) -> None:
    """G sampled rollouts of each training task on ``interface``: pass rates and mixed groups, one JSON line."""
    from seal_platform.types import SamplingParams
    from seal_platform_plugins.smarthome.episode import run_episodes

    started = time.perf_counter()
    sampling = SamplingParams(temperature=temperature, top_p=config.rollout.top_p, max_new_tokens=max_new,
                              stop=["</tool_call>"])
    trajs = run_episodes(engine, [(t, f"train:{t.id}", j) for t in train for j in range(group)], interface,
                         sampling, *protocol)
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.task_id].append(t.reward)
    mixed = sum(1 for v in groups.values() if 0 < sum(v) < len(v))
    print(json.dumps({"train_sampled": {
        "interface": name, "temperature": temperature, "tasks": len(train), "group_size": group,
        "rollouts": len(trajs), "pass_rate": round(100 * statistics.fmean(t.reward for t in trajs), 1),
        "per_category": pass_rates(trajs), "mixed_groups": mixed,
        "seconds": round(time.perf_counter() - started, 1)}}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="smarthome-embedded")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tasks", type=int, default=24, help="training tasks sampled (G rollouts each)")
    parser.add_argument("--scaffold", action="store_true",
                        help="also sample on the reference scaffold and compare mixed groups")
    parser.add_argument("--no-greedy", action="store_true", help="skip the greedy held-out evaluation")
    parser.add_argument("--temperatures", type=float, nargs="+", default=None,
                        help="sampling temperatures to probe (default: the recipe's rollout.temperature)")
    args = parser.parse_args()

    from seal_platform.planning import load_recipe
    from seal_platform.types import SamplingParams
    from seal_platform_libs.policy.engines import EngineSettings
    from seal_platform_libs.policy.engines.vllm import VLLMEngine
    from seal_platform_libs.policy.loading import PolicySettings, load_policy
    from seal_platform_plugins.smarthome.environment import SmartHomeEnvironment
    from seal_platform_plugins.smarthome.episode import run_episodes
    from seal_platform_plugins.smarthome.settings import SmartHomeSettings

    config, issues, path = load_recipe(args.recipe, args.overrides)
    if config is None:
        raise SystemExit("\n".join(str(i) for i in issues))
    settings = SmartHomeSettings.model_validate(config.settings.get("smarthome", {}))
    env = SmartHomeEnvironment(settings)
    model, tokenizer = load_policy(PolicySettings.model_validate(config.settings.get("policy", {})))
    engine = VLLMEngine(
        model,
        tokenizer,
        EngineSettings.model_validate(config.settings.get("engine", {})),
        seed=config.seed,
        concurrency=config.rollout.workers,
    )
    group = config.training.group_size
    max_new = settings.max_new_tokens or config.rollout.max_new_tokens
    protocol = (settings.attempts_per_turn, settings.worked_examples, settings.example_results)
    print(f"recipe {path}: categories {settings.categories}, {settings.min_turns}-{settings.max_turns} user turns, "
          f"{settings.attempts_per_turn} attempt(s) per turn, {settings.worked_examples} worked examples", flush=True)
    interfaces = {"plain": env.pristine_interface()}
    if args.scaffold:
        from seal_platform.capability import CapabilityState
        from seal_platform.stages import adopt_interface
        from seal_platform_libs.toolenv.evolution import EvolutionSettings, evolve
        from seal_platform_plugins.smarthome.cues import CUES

        scaffold = evolve(env.pristine_interface(), CapabilityState(), EvolutionSettings(mode="reference"),
                          list(settings.categories), CUES)
        assert scaffold is not None
        interfaces["scaffold"] = adopt_interface(scaffold, env.pristine_interface(), 0, "smarthome")
    try:
        if not args.no_greedy:
            held_out = env.tasks("eval")
            started = time.perf_counter()
            greedy = SamplingParams(temperature=0.0, max_new_tokens=config.evaluation.max_new_tokens or max_new,
                                    stop=["</tool_call>"])
            trajs = run_episodes(engine, [(t, f"eval:{t.id}", 0) for t in held_out], env.pristine_interface(),
                                 greedy, *protocol)
            rates = pass_rates(trajs)
            print(json.dumps({"held_out_greedy": {
                "tasks": len(held_out), "pass_rate": round(statistics.fmean(rates.values()), 1),
                "per_category": rates, "seconds": round(time.perf_counter() - started, 1)}}), flush=True)
        train = env.tasks("train")[: args.tasks]
        for temperature in args.temperatures or [config.rollout.temperature]:
            for name, interface in interfaces.items():
                sample(engine, env, train, group, name, interface, temperature, config, max_new, protocol)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
