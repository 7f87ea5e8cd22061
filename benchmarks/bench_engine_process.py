"""vLLM in the driver's process vs in a process of its own, on a fixed batch of multi-turn episodes (CPU).

Modes (each run in a fresh Python process, so one mode's vLLM never shapes the next one's):

* ``in-process``: ``engine.vllm.in_process: true``: vLLM's engine core in the driver
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); the model's steps share the GIL with the episode threads.
* ``engine-core``: ``in_process: false``: vLLM V1's engine-core process runs scheduling and the model; the driver
  keeps request intake and detokenizing; weight updates go through a shared-memory file.
* ``replica``: one local replica process (``engine.replicas: 1``) holding an in-process vLLM; the driver talks
  to it over a pipe (what a multi-GPU machine runs per GPU).

The batch: ``--episodes`` episodes, each from its own thread (as the local executor runs them), each
``--turns`` turns long; after every generation an episode does ``--episode-work-ms`` of pure-Python work that
holds the GIL (standing in for parsing, tool calls, prompt building), then continues the dialogue. Prompts
are fixed synthetic chats of varied length. Reported per mode: generated tokens/s over the batch's wall
clock (after a warm-up), start-up time and one ``update_weights``. Run it idle, e.g.:

    .venv/bin/python benchmarks/bench_engine_process.py --episodes 32 --turns 3 --max-new-tokens 64

``--repeats 2`` alternates the modes (A B C A B C) so a drift in machine load hits all of them. The default
of ``engine.vllm.in_process`` (seal_platform_libs/policy/engines/settings.py) is meant to be what this measures as
faster. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

MODES = ("in-process", "engine-core", "replica")
WORDS = ("tool", "call", "file", "user", "answer", "report", "path", "value", "list", "check")


def conversation(i: int, words: int) -> list[Any]:
    from seal_platform.types import Message

    body = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(words + 13 * (i % 5)))
    return [Message(role="system", content=f"You are agent {i % 4}. Answer briefly."),
            Message(role="user", content=f"Task {i}: summarise these words: {body}")]


def busy(ms: float) -> None:
    """Pure-Python work holding the GIL for about ``ms`` milliseconds."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x = (x * 31 + 7) % 1_000_003


def build(mode: str, model: Any, tokenizer: Any, args: argparse.Namespace) -> Any:
    from seal_platform_libs.policy.engines.settings import EngineSettings

    settings = EngineSettings.model_validate(
        {"vllm": {"max_num_seqs": args.episodes, "in_process": mode != "engine-core"}}
    )
    if mode == "replica":
        from seal_platform_libs.policy.engines.local import start_local_replicas

        return start_local_replicas("vllm", model, tokenizer, settings, [None], seed=0)
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    return VLLMEngine(model, tokenizer, settings.vllm, seed=0, concurrency=args.episodes)


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from seal_platform.executor import LocalExecutor
    from seal_platform.types import Message, SamplingParams
    from seal_platform_libs.policy.loading import PolicySettings, load_policy

    model, tokenizer = load_policy(PolicySettings(model=args.model))
    start = time.perf_counter()
    engine = build(mode, model, tokenizer, args)
    startup = time.perf_counter() - start
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)

    def episode(i: int) -> int:
        conv = conversation(i, args.prompt_words)
        generated = 0
        for turn in range(args.turns):
            gen = engine.generate([conv], sampling)[0]
            generated += len(gen.token_ids)
            busy(args.episode_work_ms)
            conv = conv + [Message(role="assistant", content=gen.text),
                           Message(role="user", content=f"Turn {turn + 2}: go on.")]
        return generated

    try:
        engine.generate([[Message(role="user", content="Hi")]], SamplingParams(max_new_tokens=4))  # warm-up
        executor = LocalExecutor(max_workers=args.episodes)
        start = time.perf_counter()
        try:
            tokens = executor.map(episode, range(args.episodes))
        finally:
            executor.close()
        wall = time.perf_counter() - start
        start = time.perf_counter()
        engine.update_weights(model)
        update = time.perf_counter() - start
    finally:
        engine.close()
    generated = sum(tokens)
    return {"mode": mode, "episodes": args.episodes, "turns": args.turns, "generated_tokens": generated,
            "wall_s": round(wall, 2), "generated_tok_per_s": round(generated / wall, 2),
            "startup_s": round(startup, 2), "update_weights_s": round(update, 3), "pid": os.getpid()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated: {', '.join(MODES)}")
    parser.add_argument("--episodes", type=int, default=32, help="episodes at once, each in its own thread")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=120, help="words of the first user turn (+0-52)")
    parser.add_argument("--episode-work-ms", type=float, default=20.0, help="GIL-holding work after each turn")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="policy.model (embedded or a directory)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the modes, alternating")
    parser.add_argument("--out", help="also write the results as JSON here")
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # internal: run one mode here
    args = parser.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(run_mode(args.one, args)), flush=True)
        return 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}: choose from {', '.join(MODES)}")
    passed = [a for a in (argv if argv is not None else sys.argv[1:])]
    results: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        for mode in modes:
            proc = subprocess.run([sys.executable, __file__, *passed, "--one", mode], capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(proc.stdout[-3000:], proc.stderr[-6000:], sep="\n", file=sys.stderr)
                raise SystemExit(f"mode {mode} failed (exit code {proc.returncode})")
            result = json.loads(lines[-1].removeprefix("RESULT "))
            print(json.dumps(result), flush=True)
            results.append(result)
    summary = {m: statistics.median(r["generated_tok_per_s"] for r in results if r["mode"] == m) for m in modes}
    print(json.dumps({"median_generated_tok_per_s": summary, "faster": max(summary, key=lambda m: summary[m])}))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"runs": results, "median_generated_tok_per_s": summary}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
