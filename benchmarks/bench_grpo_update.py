"""GRPO update throughput: our trainer against TRL's GRPOTrainer, same model, same fixed batch.

Only the update is timed (no generation): a fixed batch of ``--tasks`` prompts x ``--group`` completions of
``--completion-tokens`` random tokens with fixed 0/1 rewards, and the same recipe on both sides: reference
log-probs (KL coef 0.001, k3), old log-probs, ``--updates`` AdamW updates per step (the batch split into
that many mini-batches), micro-batches of ``--micro`` sequences with gradient accumulation, PPO clip 0.2,
grad clip 1.0. tokens/s = (prompt + completion tokens of the batch) / wall seconds of one step, median of
``--repeats`` steps after a warm-up step.

TRL runs in its own virtual environment when its dependencies clash with ours (``--trl-python``); on this
project's CPU machine it was set up without a second torch by pointing a .pth file at our venv::

    python3 -m venv /tmp/trlvenv
    echo /work/main/.venv/lib/python3.11/site-packages > /tmp/trlvenv/lib/python3.11/site-packages/zz.pth
    /tmp/trlvenv/bin/pip install trl          # adds trl, datasets, pandas, pyarrow; reuses torch/transformers

    .venv/bin/python benchmarks/bench_grpo_update.py --trl-python /tmp/trlvenv/bin/python

Every step also reports its peak update memory (above what was in use before the step) per trained token.
``--long`` times the long-episode update instead (one group of two ~4.4k-token multi-turn episodes, as the
embedded BFCL recipe produces; ``--gradient-checkpointing`` as that recipe trains, keeping the attention
outputs; ``--recompute-attention`` recomputes them too, transformers' default)::

    .venv/bin/python benchmarks/bench_grpo_update.py --long --group 2 --repeats 1 --gradient-checkpointing
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_batch(tokenizer, tasks: int, group: int, completion_tokens: int, seed: int) -> dict:
    """Prompts (chat-templated arithmetic questions), random completions and rewards, as token ids."""
    import random

    rng = random.Random(seed)
    prompts, completions, rewards = [], [], []
    for t in range(tasks):
        chat = [
            {"role": "system", "content": "You can use one tool, calculator. Call it as <tool_call>{\"name\": "
             "\"calculator\", \"arguments\": {\"expression\": \"...\"}}</tool_call>. Always call it."},
            {"role": "user", "content": f"What is {rng.randint(10, 99)} + {rng.randint(10, 99)}? Explain briefly."},
        ]
        ids = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        for j in range(group):
            prompts.append(ids)
            completions.append([rng.randint(200, 20000) for _ in range(completion_tokens)])
            rewards.append(float(j % 3 == 0) if t % 2 else float(j % 4 == 1))
    return {"prompts": prompts, "completions": completions, "rewards": rewards, "group": group}


def make_long_batch(tokenizer, episode_tokens: int, group: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Multi-turn episodes of about ``episode_tokens`` tokens, as the embedded BFCL run makes them: a
    ~1.5k-token prompt (system, tool docs, task), then turns of 64 generated tokens each followed by
    ~300 tokens of tool output. Returns (input ids, loss positions) per rollout; one group."""
    import random

    rng = random.Random(seed)
    prompt = [rng.randint(200, 20000) for _ in range(1500)]
    out = []
    for _ in range(group):
        ids, positions = list(prompt), []
        while len(ids) < episode_tokens:
            start = len(ids)
            ids += [rng.randint(200, 20000) for _ in range(64)]
            positions += list(range(start, start + 64))
            ids += [rng.randint(200, 20000) for _ in range(300)]
        out.append((ids, positions))
    return out


class PeakMemory:
    """Peak memory during a block above what was in use when it started: CUDA allocator peak on a GPU,
    else the process's resident set size sampled every 5 ms (psutil)."""

    def __init__(self, device: str):
        self.device = device
        self.peak_bytes = 0

    def __enter__(self) -> PeakMemory:
        import threading

        import psutil
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
            return self
        process = psutil.Process()
        self._base = process.memory_info().rss
        self._peak = self._base
        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(0.005):
                self._peak = max(self._peak, process.memory_info().rss)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.device.startswith("cuda"):
            self.peak_bytes = torch.cuda.max_memory_allocated() - self._base
            return
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(0, self._peak - self._base)


def run_long(model_dir: str, tokenizer, args) -> dict[str, float]:
    """Long-episode update: one group of ``--group`` rollouts of ``--episode-tokens`` tokens, advantages +-1,
    the default recipe's objective (KL 0.001, k3); tokens/s and peak update memory per trained token."""
    import torch
    from transformers import AutoModelForCausalLM

    from seal_platform_plugins.grpo.samples import Sample
    from seal_platform_plugins.grpo.settings import GRPOSettings
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    model.eval()
    settings = GRPOSettings(kl_coef=0.001, lr=1e-6, gradient_checkpointing=args.gradient_checkpointing,
                            checkpoint_keep_attention=not args.recompute_attention)
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
    episodes = make_long_batch(tokenizer, args.episode_tokens, args.group, seed=0)
    rows = []
    no_grad = []
    for r in range(args.repeats):
        samples = [Sample(id=str(i), group="g", input_ids=ids, positions=pos, advantage=1.0 if i % 2 == 0 else -1.0)
                   for i, (ids, pos) in enumerate(episodes)]
        # The first step takes its KL reference log-probs from its training pass (the policy equals the
        # reference); later ones run the reference model too.
        no_grad.append(step_no_grad_episodes(trainer, samples))
        with PeakMemory(args.device) as memory:
            t0 = time.perf_counter()
            metrics = trainer.step(samples)
            dt = time.perf_counter() - t0
        rows.append({"tokens_per_s": metrics["trained_tokens"] / dt, "seconds": dt,
                     "trained_tokens": metrics["trained_tokens"], "peak_bytes": memory.peak_bytes,
                     "peak_bytes_per_token": memory.peak_bytes / metrics["trained_tokens"]})
        print(f"long step {r}: {dt:.1f} s, {metrics['trained_tokens']:.0f} trained tokens, "
              f"{rows[-1]['tokens_per_s']:.0f} tokens/s, peak update memory {memory.peak_bytes / 2**20:.0f} MiB "
              f"({rows[-1]['peak_bytes_per_token'] / 1024:.1f} KiB per trained token)", flush=True)
    out = {"long_tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
           "long_peak_bytes_per_token": statistics.median(r["peak_bytes_per_token"] for r in rows)}
    if args.device == "cpu":
        out.update(roofline(model.config, episodes, settings, trainer, [r["tokens_per_s"] for r in rows], no_grad))
    return out


def step_flops(config, episodes: list[tuple[list[int], list[int]]], recompute_forward: bool, shared: int = 0,
               recompute_attention: bool = True, no_grad: list[tuple[list[int], list[int]]] = ()) -> float:
    """Floating-point operations of one update on ``episodes`` (forward + backward = 3 forwards, plus one
    more forward with gradient checkpointing -- without its attention unless ``recompute_attention``),
    counting only matrix products: the layers' weights (2 per weight per token), causal attention (QK^T and
    AV: 4 x hidden per earlier position per layer) and the output layer at the loss positions only.
    ``shared`` leading tokens are computed once for all.

    ``no_grad``: episodes the step also runs through a forward pass without gradient (one forward each, never
    sharing a prefix): the KL reference's log-probs and old log-probs recomputed before the first update
    (:func:`step_no_grad_episodes`). A step performs those passes, so a roofline that left them out would
    put the ceiling too high."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    kv = hidden * config.num_key_value_heads // config.num_attention_heads
    per_layer = 2 * (hidden * hidden * 2 + hidden * kv * 2 + 3 * hidden * config.intermediate_size)

    def one_forward(runs: list[tuple[list[int], list[int]]], shared: int) -> tuple[float, float]:
        dense = attention = 0.0
        for index, (ids, positions) in enumerate(runs):
            start = shared if index else 0  # the shared prefix counted once, with the first episode
            n = len(ids) - start
            attention += layers * 4 * hidden * sum(range(start + 1, len(ids) + 1))  # position p attends to p keys
            dense += per_layer * layers * n + 2 * hidden * config.vocab_size * len(positions)
        return dense, attention

    forward, attention = one_forward(episodes, shared)
    total = 3 * (forward + attention)
    if recompute_forward:
        total += forward + (attention if recompute_attention else 0.0)
    return total + sum(one_forward(list(no_grad), 0))


def step_no_grad_episodes(trainer, samples) -> list[tuple[list[int], list[int]]]:
    """(input ids, loss positions) of every forward pass without gradient that ``trainer.step(samples)``
    will run, as the trainer stands now (:func:`~seal_platform_plugins.grpo.skipping.no_grad_passes`): old
    log-probs recomputed for the mini-batches after the first, and the KL reference's log-probs once the
    policy has moved off the reference (with ``kl_coef`` 0 there is no reference pass)."""
    from seal_platform_plugins.grpo.skipping import no_grad_passes

    passes = no_grad_passes(trainer.mini_batches(samples), trainer.settings, trainer.policy_is_reference)
    return [(list(x.input_ids), list(x.positions)) for part in passes.values() for x in part]


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """The float32 matrix-product rate this CPU reaches with torch's own kernels (best of ``repeats``)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def roofline(config, episodes, settings, trainer, rates: list[float], no_grad: list[list]) -> dict[str, float]:
    """How far the measured rates (one per step) are from what this CPU could do at all: each step's
    matrix-product FLOPs per trained token (with the no-grad passes that step ran, ``no_grad``: see
    :func:`step_flops`), the measured float32 matmul peak, and the tokens/s that peak would give if the update
    were nothing but matrix products running at it; medians over the steps."""
    tokens = sum(len(ids) for ids, _ in episodes)
    recompute = dict(recompute_forward=settings.gradient_checkpointing,
                     recompute_attention=not settings.checkpoint_keep_attention)
    flops = [step_flops(config, episodes, no_grad=extra, **recompute) / tokens for extra in no_grad]
    peak = matmul_peak_gflops()
    ceilings = [peak * 1e9 / f for f in flops]
    fractions = [rate / c for rate, c in zip(rates, ceilings)]
    again = ""
    if settings.gradient_checkpointing:
        again = " + recomputed forward" + (" less attention" if settings.checkpoint_keep_attention else "")
    for r, (f, c, rate) in enumerate(zip(flops, ceilings, rates)):
        passes = f" + {len(no_grad[r])} no-grad forward passes (KL reference / old log-probs)" if no_grad[r] else ""
        print(f"roofline, step {r}: {f / 1e9:.2f} GFLOP of matrix products per trained token (forward + backward"
              f"{again}{passes}); float32 matmul peak {peak:.0f} GFLOPS -> at most {c:.0f} tokens/s; measured "
              f"{rate:.0f} tokens/s = {100 * rate / c:.0f}% of that ceiling", flush=True)
    prompt = _common_prefix([ids for ids, _ in episodes])
    best = peak * 1e9 * tokens / step_flops(config, episodes, shared=prompt, no_grad=no_grad[-1], **recompute)
    print(f"roofline of the last step with the group's {prompt}-token prompt computed once in its training pass "
          f"(shared_prefix, both episodes in one micro-batch): at most {best:.0f} tokens/s", flush=True)
    return {"gflop_per_token": statistics.median(flops) / 1e9, "matmul_peak_gflops": peak,
            "ceiling_tokens_per_s": statistics.median(ceilings), "roofline_fraction": statistics.median(fractions),
            "ceiling_shared_prompt_tokens_per_s": best}


def _common_prefix(rows: list[list[int]]) -> int:
    n = min(len(r) for r in rows)
    return next((i for i in range(n) if any(r[i] != rows[0][i] for r in rows)), n)


def run_ours(model_dir: str, batch: dict, args, shared_prefix: bool) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    from seal_platform_plugins.grpo.objective import group_advantages
    from seal_platform_plugins.grpo.samples import Sample
    from seal_platform_plugins.grpo.settings import GRPOSettings
    from seal_platform_plugins.grpo.trainer import GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    model.eval()
    n = len(batch["prompts"])
    tasks = n // batch["group"]
    settings = GRPOSettings(
        kl_coef=0.001, mini_batch_tasks=max(1, tasks // args.updates), micro_batch_size=args.micro,
        max_tokens_per_micro_batch=None, shared_prefix=shared_prefix, lr=1e-6,
    )
    trainer = GRPOTrainer.with_reference(model, settings, pad_id=0)
    groups = [str(i // batch["group"]) for i in range(n)]
    adv = group_advantages(batch["rewards"], groups)

    def samples() -> list[Sample]:
        out = []
        for i, (p, c) in enumerate(zip(batch["prompts"], batch["completions"])):
            out.append(Sample(id=str(i), group=groups[i], input_ids=p + c,
                              positions=list(range(len(p), len(p) + len(c))), advantage=adv[i]))
        return out

    tokens = sum(len(p) + len(c) for p, c in zip(batch["prompts"], batch["completions"]))
    rates = []
    for r in range(args.repeats + 1):
        with PeakMemory(args.device) as memory:
            t0 = time.perf_counter()
            metrics = trainer.step(samples())
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        assert metrics["updates"] == args.updates, metrics
        if r:  # the first step warms up
            rates.append(tokens / dt)
            print(f"  peak update memory {memory.peak_bytes / 2**20:.0f} MiB, "
                  f"{memory.peak_bytes / tokens / 1024:.1f} KiB per trained token", flush=True)
    return rates


TRL_WORKER = r'''
import json, sys, time, statistics, tempfile
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

spec = json.load(open(sys.argv[1]))
batch, a = spec["batch"], spec["args"]
device = a["device"]
model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(spec["model_dir"])
n = len(batch["prompts"])
per_update = n // a["updates"]
cfg = GRPOConfig(
    output_dir=tempfile.mkdtemp(), per_device_train_batch_size=a["micro"],
    gradient_accumulation_steps=per_update // a["micro"], num_generations=batch["group"],
    steps_per_generation=a["updates"] * (per_update // a["micro"]), beta=0.001, epsilon=0.2,
    learning_rate=1e-6, weight_decay=0.01, max_grad_norm=1.0, loss_type="grpo", use_cpu=device == "cpu",
    report_to=[], max_completion_length=len(batch["completions"][0]), bf16=False, logging_steps=1000,
)
trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=cfg,
                      train_dataset=Dataset.from_dict({"prompt": ["x"] * n}), processing_class=tok)
model = trainer.model
trainer.create_optimizer()
opt = trainer.optimizer
trainer.current_gradient_accumulation_steps = per_update // a["micro"]
width = max(len(p) for p in batch["prompts"])
prompt_ids = torch.full((n, width), tok.pad_token_id or 0, dtype=torch.long)
prompt_mask = torch.zeros((n, width), dtype=torch.long)
for i, p in enumerate(batch["prompts"]):
    prompt_ids[i, width - len(p):] = torch.tensor(p)
    prompt_mask[i, width - len(p):] = 1
completion_ids = torch.tensor(batch["completions"])
completion_mask = torch.ones_like(completion_ids)
rewards = torch.tensor(batch["rewards"]).view(-1, batch["group"])
adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1)
tokens = int(prompt_mask.sum() + completion_mask.sum())
model.train()
rates = []
for r in range(a["repeats"] + 1):
    t0 = time.perf_counter()
    ids = torch.cat([prompt_ids, completion_ids], 1).to(device)
    att = torch.cat([prompt_mask, completion_mask], 1).to(device)
    k = completion_ids.size(1)
    with torch.no_grad():
        ref = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, att, k, batch_size=a["micro"])[0]
        old = trainer._get_per_token_logps_and_entropies(model, ids, att, k, batch_size=a["micro"])[0]
    for u in range(a["updates"]):
        for m in range(u * per_update, (u + 1) * per_update, a["micro"]):
            sl = slice(m, m + a["micro"])
            inputs = {"prompt_ids": prompt_ids[sl].to(device), "prompt_mask": prompt_mask[sl].to(device),
                      "completion_ids": completion_ids[sl].to(device),
                      "completion_mask": completion_mask[sl].to(device),
                      "advantages": adv[sl].to(device), "old_per_token_logps": old[sl], "ref_per_token_logps": ref[sl]}
            loss = trainer.compute_loss(model, inputs)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    if r:
        rates.append(tokens / (time.perf_counter() - t0))
print(json.dumps({"rates": rates}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF model directory; default: the embedded SmolLM2-135M")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default=None)
    parser.add_argument("--trl-python", default="/tmp/trlvenv/bin/python", help="python with trl; '' to skip")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--long", action="store_true",
                        help="long-episode update only (one group of --group rollouts of --episode-tokens tokens)")
    parser.add_argument("--episode-tokens", type=int, default=4400)
    parser.add_argument("--gradient-checkpointing", action="store_true", help="(--long) as the embedded recipe does")
    parser.add_argument(
        "--recompute-attention",
        action="store_true",
        help="(--long, with --gradient-checkpointing) recompute attention too (grpo.checkpoint_keep_attention: false)",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from seal_platform_libs.policy.loading import PolicySettings, model_dir

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = args.model or str(model_dir(PolicySettings()))
    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.long:
        results = run_long(path, tokenizer, args)
        print(json.dumps(results))
        if args.out:
            args.out.write_text(json.dumps(results, indent=2))
        return
    batch = make_batch(tokenizer, args.tasks, args.group, args.completion_tokens, seed=0)
    n_tokens = sum(len(p) + len(c) for p, c in zip(batch["prompts"], batch["completions"]))
    print(f"batch: {len(batch['prompts'])} sequences, {n_tokens} tokens (prompt {len(batch['prompts'][0])}, "
          f"completion {args.completion_tokens}); {args.updates} updates/step, micro-batch {args.micro}; {args.device}")
    results: dict[str, float] = {}
    for name, shared in (("ours", True), ("ours_no_shared_prefix", False)):
        rates = run_ours(path, batch, args, shared)
        results[name] = statistics.median(rates)
        print(f"{name}: {results[name]:.0f} tokens/s  (steps: {[round(r) for r in rates]})", flush=True)
    if args.trl_python:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump({"batch": batch, "args": vars(args) | {"out": None}, "model_dir": path}, fh)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
            script.write(TRL_WORKER)
        proc = subprocess.run([args.trl_python, script.name, fh.name], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"TRL run failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
        else:
            rates = json.loads(proc.stdout.strip().splitlines()[-1])["rates"]
            results["trl"] = statistics.median(rates)
            print(f"trl: {results['trl']:.0f} tokens/s  (steps: {[round(r) for r in rates]})")
            print(f"speed-up ours / trl: {results['ours'] / results['trl']:.2f}x "
                  f"(without prefix sharing {results['ours_no_shared_prefix'] / results['trl']:.2f}x)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
