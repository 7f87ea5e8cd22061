"""Scale-out benchmarks on a local Ray: rollout tokens/s with K engine replicas, and weight-sync time.

``rollout``: BFCL first turns (as ``bench_rollout.py`` builds them), G samples per task, every rollout
submitted from its own thread as episodes are, through the routing client of K replicas (each a Ray actor
reserving ``--engine-cpus`` CPUs, so torch in it runs that many threads). Reports generated tokens/s over the
whole batch after a warm-up, for each K in ``--replicas``.

``sync``: the policy's weights pushed to K replicas (``update_weights`` of every tensor, after an in-place
change to all of them), repeated; reports seconds per push and per 100M parameters, and the object-store put
alone. ``--params`` builds a random Llama of about that many parameters from a config instead of loading
the policy.

Run by hand, under the machine's heavy-command lock, e.g.:

    flock /tmp/seal-heavy.lock .venv/bin/python benchmarks/bench_ray.py rollout --replicas 1,2
    flock /tmp/seal-heavy.lock .venv/bin/python benchmarks/bench_ray.py sync --replicas 1,2

Numbers depend on the machine and on what else runs on it; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seal_platform.executor import LocalExecutor  # noqa: E402
from seal_platform.types import Message, SamplingParams  # noqa: E402


def _policy(args: argparse.Namespace) -> tuple[Any, Any]:
    from seal_platform_libs.policy.loading import PolicySettings, load_policy

    model, tokenizer = load_policy(PolicySettings(model=args.model))
    if getattr(args, "params", None):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        hidden = 768
        layers = max(1, round((args.params * 1e6 - 2 * len(tokenizer) * hidden) / (12.6 * hidden * hidden)))
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2048,
                             num_hidden_layers=layers, num_attention_heads=12, num_key_value_heads=4,
                             tie_word_embeddings=False)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).eval()
    return model, tokenizer


def _ray(args: argparse.Namespace | None = None) -> Any:
    """The run's Ray cluster as grpo gets it (``ctx.cluster`` with ``settings.ray.enabled``) and its placement."""
    from seal_platform_libs.policy.on_ray import OnRay
    from seal_platform_plugins.grpo.settings import PlacementSettings
    from seal_platform_plugins.ray_backend.cluster import RayCluster
    from seal_platform_plugins.ray_backend.settings import RaySettings

    cluster = RayCluster(RaySettings(enabled=True, num_cpus=max(8, os.cpu_count() or 1)))
    return OnRay(cluster, PlacementSettings(engine_cpus=args.engine_cpus) if args else PlacementSettings())


def _start(kind: str, model: Any, tokenizer: Any, replicas: int, args: argparse.Namespace) -> Any:
    from seal_platform_libs.policy.engines import EngineSettings
    from seal_platform_libs.policy.engines.remote import build_engine
    from seal_platform_libs.policy.engines.replicas import start_replicas
    from seal_platform_libs.policy.engines.spec import PolicySpec
    from seal_platform_libs.policy.tokens import prompt_ids

    config = _ray(args)
    settings = EngineSettings()
    settings.hf.max_batch_size = args.hf_batch
    builder = functools.partial(build_engine, kind, settings, PolicySpec.of(model), tokenizer, 0)
    client = start_replicas(kind, config, replicas, builder, functools.partial(prompt_ids, tokenizer))
    client.update_weights(model, version=0)  # the replicas start without weights
    return client


def rollout(args: argparse.Namespace) -> list[dict[str, Any]]:
    from bench_rollout import bfcl_prompts

    model, tokenizer = _policy(args)
    if args.prompts == "bfcl":
        prompts = bfcl_prompts(args.tasks, args.split)
    else:  # short chat prompts: the figure is decode-bound, as later turns with a cached prefix are
        prompts = [(f"chat-{i}", [Message(role="system", content="You are a helpful assistant."),
                                  Message(role="user", content=f"Question {i}: list five facts about the number {i}.")])
                   for i in range(args.tasks)]
    cluster = _ray().cluster
    cluster.acquire()
    results = []
    try:
        for k in args.replicas:
            started = time.perf_counter()
            client = _start(args.engine, model, tokenizer, k, args)
            startup = time.perf_counter() - started
            try:
                for i in range(k):  # warm every replica up
                    client.generate([[Message(role="user", content=f"Hi {i}")]], SamplingParams(max_new_tokens=4))
                sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
                jobs = [(i, conv, j) for i, (_, conv) in enumerate(prompts) for j in range(args.group)]
                executor = LocalExecutor(max_workers=len(jobs))
                start = time.perf_counter()
                try:
                    gens = executor.map(lambda job, client=client, sampling=sampling: client.generate(
                        [job[1]], sampling.model_copy(update={"seed": 1000 * job[0] + job[2]}))[0], jobs)
                finally:
                    executor.close()
                wall = time.perf_counter() - start
                served = [s.get("requests", 0) for s in client.stats()]
            finally:
                client.close()
            generated = sum(len(g.token_ids) for g in gens)
            result = {
                "bench": "rollout", "engine": args.engine, "replicas": k, "engine_cpus": args.engine_cpus,
                "tasks": len(prompts), "group": args.group, "rollouts": len(gens),
                "prompt_tokens_mean": round(statistics.mean(g.prompt_tokens for g in gens), 1),
                "generated_tokens": generated, "wall_s": round(wall, 2),
                "generated_tok_per_s": round(generated / wall, 2), "requests_per_replica": served,
                "startup_s": round(startup, 2),
            }
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        cluster.release()
    return results


def sync(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    model, tokenizer = _policy(args)
    n_params = sum(t.numel() for t in model.state_dict().values())
    cluster = _ray().cluster
    cluster.acquire()
    results = []
    try:
        for k in args.replicas:
            client = _start("hf", model, tokenizer, k, args)
            try:
                totals, puts = [], []
                for _ in range(args.repeats):
                    with torch.no_grad():
                        for p in model.parameters():
                            p.mul_(1.0)  # an in-place update of every tensor: all of them are sent
                    client.update_weights(model)
                    totals.append(client.sync_stats["total_s"])
                    puts.append(client.sync_stats["put_s"])
                sent = client.sync_stats
            finally:
                client.close()
            seconds = statistics.median(totals)
            result = {
                "bench": "sync", "replicas": k, "params": n_params, "tensors": int(sent["tensors"]),
                "bytes": int(sent["bytes"]), "dtype": str(model.dtype).removeprefix("torch."),
                "push_s_median": round(seconds, 3), "push_s_all": [round(x, 3) for x in totals],
                "put_s_median": round(statistics.median(puts), 3),
                "params_sent": int(sent["params"]),  # a tied tensor is sent once
                "s_per_100M_params": round(seconds / (sent["params"] / 1e8), 3),
            }
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        cluster.release()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["rollout", "sync"])
    parser.add_argument("--replicas", default="1,2", type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--engine-cpus", type=float, default=1.0, help="CPUs (torch threads) per replica")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--split", default="train")
    parser.add_argument("--prompts", default="bfcl", choices=["bfcl", "chat"],
                        help="rollout: BFCL first turns (long, prefill-bound) or short chat prompts (decode-bound)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--params", type=float, default=None, help="sync: a random Llama of ~this many million params")
    parser.add_argument("--hf-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    results = rollout(args) if args.what == "rollout" else sync(args)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
