"""The two exact forms of a prompt continuation's attention in a packed row (``grpo.packing._prefixed_attention``).

A continuation of ``n`` tokens after a shared prompt of ``P`` tokens attends to ``[prompt; continuation]``. It can
run as causal SDPA over all ``P + n`` queries with the prompt's outputs dropped (the fused causal kernel,
``(P + n)^2 / 2`` scores), or over its own ``n`` queries with a bottom-right-aligned causal mask (SDPA's masked
kernel, which computes the whole ``n (P + n)`` rectangle). The trainer takes the masked form when ``n < P``.
This times one layer's attention, forward + backward, of both forms (and, as a floor, the continuation alone)
for a few shapes, median of ``--repeats`` after a warm-up. Run by hand on an idle machine:

    .venv/bin/python benchmarks/bench_prefix_attention.py [--heads 9 --kv-heads 3 --head-dim 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

SHAPES = ((150, 300), (150, 2000), (150, 5000), (2000, 500), (2000, 2000), (3000, 1000))


def timed(prompt: int, n: int, form: str, args: argparse.Namespace) -> float:
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, args.heads, prompt + n, args.head_dim, generator=gen, requires_grad=True)
    k, v = (torch.randn(1, args.kv_heads, prompt + n, args.head_dim, generator=gen, requires_grad=True)
            for _ in range(2))
    gqa = args.heads != args.kv_heads
    times = []
    for r in range(args.repeats + 1):
        started = time.perf_counter()
        if form == "recompute":
            out = sdpa(q, k, v, is_causal=True, enable_gqa=gqa)[:, :, prompt:]
        elif form == "masked":
            mask = torch.ones(n, prompt + n, dtype=torch.bool).tril(diagonal=prompt)
            out = sdpa(q[:, :, prompt:], k, v, attn_mask=mask, enable_gqa=gqa)
        else:  # the continuation alone: no prompt at all
            out = sdpa(q[:, :, prompt:], k[:, :, prompt:], v[:, :, prompt:], is_causal=True, enable_gqa=gqa)
        out.sum().backward()
        if r:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=9, help="query heads (SmolLM2-135M: 9)")
    parser.add_argument("--kv-heads", type=int, default=3, help="key/value heads (SmolLM2-135M: 3)")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import os

    print(f"one layer, forward + backward, median of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    for prompt, n in SHAPES:
        row = {form: timed(prompt, n, form, args) for form in ("recompute", "masked", "alone")}
        chosen = "masked" if n < prompt else "recompute"
        print(f"prompt {prompt:5d} + continuation {n:5d}: recompute {1000 * row['recompute']:7.1f} ms, masked "
              f"{1000 * row['masked']:7.1f} ms (continuation alone {1000 * row['alone']:6.1f} ms); the trainer "
              f"takes {chosen}", flush=True)


if __name__ == "__main__":
    main()
