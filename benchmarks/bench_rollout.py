"""Rollout throughput of the ``vllm`` and ``hf`` engines on BFCL first turns, in groups of G samples.

Each task's prompt is what an episode's first generation sees: a system prompt listing the tools of the
task's involved classes (compact JSON, one per line) with the tool-call format, then the first user turn.
Every rollout of a group is submitted from its own thread (as episodes are, through the local executor), all
groups at once, so the engines batch them and vLLM can reuse a group's prompt prefix.

Reported per engine: generated tokens/s (wall clock of the whole batch after a warm-up), prompt tokens,
start-up time, and the cost of one ``update_weights``. Run by hand, e.g.:

    .venv/bin/python benchmarks/bench_rollout.py --engines vllm,vllm-nocache,hf --tasks 4 --group 4

Numbers depend on the machine and on what else runs on it; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from seal_platform.executor import LocalExecutor
from seal_platform.types import Message, SamplingParams

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")

TOOL_FORMAT = (
    "To call tools, answer with one or more JSON objects, each inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": "tool_name", "arguments": {"arg": "value"}}\n</tool_call>\n'
    "When no tool is needed, answer in plain text."
)


def bfcl_prompts(n_tasks: int, split: str) -> list[tuple[str, list[Message]]]:
    """First-turn conversations of ``n_tasks`` BFCL tasks, spread over the four categories."""
    from seal_platform_plugins.bfcl.data import load_tasks, tool_docs

    per_category = -(-n_tasks // len(CATEGORIES))
    tasks = load_tasks(CATEGORIES, split=split, limit_per_category=per_category)
    by_category = [[t for t in tasks if t.category == c] for c in CATEGORIES]
    chosen = []
    for i in range(per_category):
        for group in by_category:
            if i < len(group) and len(chosen) < n_tasks:
                chosen.append(group[i])
    prompts = []
    for task in chosen:
        tools = "\n".join(json.dumps(doc, separators=(",", ":")) for doc in tool_docs(task))
        system = f"You are an agent that completes the user's requests with tools.\n\nTools:\n{tools}\n\n{TOOL_FORMAT}"
        first = task.payload["question"][0]
        user = "\n".join(m["content"] for m in first if m.get("role") == "user")
        prompts.append((task.id, [Message(role="system", content=system), Message(role="user", content=user)]))
    return prompts


def build_engine(name: str, model: Any, tokenizer: Any, max_batch: int) -> Any:
    from seal_platform_libs.policy.engines import EngineSettings

    if name == "hf":
        from seal_platform_libs.policy.engines.hf import HFEngine

        return HFEngine(model, tokenizer, EngineSettings().hf.model_copy(update={"max_batch_size": max_batch}))
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    settings = EngineSettings().vllm.model_copy(update={"enable_prefix_caching": name != "vllm-nocache"})
    return VLLMEngine(model, tokenizer, settings, seed=0)


def run_engine(name: str, prompts: list[tuple[str, list[Message]]], args: argparse.Namespace) -> dict[str, Any]:
    from seal_platform_libs.policy.loading import PolicySettings, load_policy

    model, tokenizer = load_policy(PolicySettings(model=args.model))
    start = time.perf_counter()
    engine = build_engine(name, model, tokenizer, args.hf_batch)
    startup = time.perf_counter() - start
    try:
        engine.generate([[Message(role="user", content="Hi")]], SamplingParams(max_new_tokens=4))  # warm-up
        sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
        jobs = [(i, conv, sample) for i, (_, conv) in enumerate(prompts) for sample in range(args.group)]
        executor = LocalExecutor(max_workers=len(jobs))
        start = time.perf_counter()
        try:
            results = executor.map(
                lambda job: engine.generate([job[1]], sampling.model_copy(update={"seed": 1000 * job[0] + job[2]}))[0],
                jobs,
            )
        finally:
            executor.close()
        wall = time.perf_counter() - start
        generated = sum(len(g.token_ids) for g in results)
        start = time.perf_counter()
        engine.update_weights(model)
        update = time.perf_counter() - start
    finally:
        engine.close()
    prompt_lengths = [g.prompt_tokens for g in results[:: args.group]]
    return {
        "engine": name,
        "tasks": len(prompts),
        "group": args.group,
        "rollouts": len(results),
        "prompt_tokens_mean": round(statistics.mean(prompt_lengths), 1),
        "prompt_tokens_range": [min(prompt_lengths), max(prompt_lengths)],
        "generated_tokens": generated,
        "wall_s": round(wall, 2),
        "generated_tok_per_s": round(generated / wall, 2),
        "total_tok_per_s": round((generated + sum(g.prompt_tokens for g in results)) / wall, 2),
        "startup_s": round(startup, 2),
        "update_weights_s": round(update, 3),
        "finish_reasons": {r: sum(g.finish_reason == r for g in results) for r in {g.finish_reason for g in results}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="vllm,hf", help="comma-separated: vllm, vllm-nocache, hf")
    parser.add_argument("--tasks", type=int, default=4, help="BFCL tasks (spread over the four categories)")
    parser.add_argument("--group", type=int, default=4, help="samples per task (GRPO's G)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--split", default="train")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="policy.model (embedded or a directory)")
    parser.add_argument("--hf-batch", type=int, default=16, help="hf engine max_batch_size")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    prompts = bfcl_prompts(args.tasks, args.split)
    results = []
    for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
        if name not in {"vllm", "vllm-nocache", "hf"}:
            parser.error(f"unknown engine {name!r}: choose from vllm, vllm-nocache, hf")
        result = run_engine(name, prompts, args)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
