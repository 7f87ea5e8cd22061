"""GPU smoke test for a bare GPU machine: one GRPO update of a Qwen-shaped model with the shipped precision
policy, using torch and transformers only (such a machine may have no vLLM, Ray or seal-platform install).

What it checks and reports:
- the shipped dtype policy (plugins/grpo: float32 master weights, bfloat16 compute under autocast on CUDA,
  float32 gradients and AdamW states) on a model with the architecture of a Qwen2.5 size, random weights from
  its config (no download);
- one GRPO step (clipped importance ratio, group-normalised advantages, token-mean loss) over a group of
  sequences of the given length, then AdamW at the stock recipe's lr 1e-6: the weights must move (a bfloat16
  master copy would round most of such an update away);
- step time, peak memory (torch.cuda.max_memory_allocated), tokens/s and MFU (model FLOPs utilisation: 6 x
  parameters x tokens plus attention, over the step time, against the device's dense bf16 peak).

    python benchmarks/gpu_smoke.py                          # Qwen2.5-0.5B shape, 8 x 1024 tokens, cuda
    python benchmarks/gpu_smoke.py --shape 1.5b --seqs 8 --tokens 2048
    python benchmarks/gpu_smoke.py --device cpu --shape tiny  # the same code path on a CPU (a check of the script)

Never part of CI: run it by hand on a GPU machine and paste its output (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

# Qwen2.5 shapes (config.json of the published checkpoints): hidden, intermediate, layers, heads, kv heads, vocab.
SHAPES = {
    "tiny": (128, 256, 2, 2, 1, 151_936),
    "0.5b": (896, 4864, 24, 14, 2, 151_936),
    "1.5b": (1536, 8960, 28, 12, 2, 151_936),
    "3b": (2048, 11008, 36, 16, 2, 151_936),
    "7b": (3584, 18944, 28, 28, 4, 152_064),
}
# Dense bf16 tensor-core peaks (TFLOPS, without sparsity) by device-name fragment.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}


def build(shape: str, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, vocab = SHAPES[shape]
    config = Qwen2Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                         max_position_embeddings=32768, tie_word_embeddings=shape in ("tiny", "0.5b", "1.5b", "3b"))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.float32)  # float32 master weights
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    return model


def grpo_loss(model, ids: torch.Tensor, prompt_len: int, advantages: torch.Tensor, autocast) -> torch.Tensor:
    """GRPO's clipped surrogate on the response tokens (old log-probs = the current ones, detached, as in the
    first mini-batch of an on-policy step)."""
    with autocast:
        logits = model(input_ids=ids).logits[:, prompt_len - 1:-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, prompt_len:, None]).squeeze(-1)
    ratio = torch.exp(logp - logp.detach())
    adv = advantages[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.28) * adv)
    return -surrogate.mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seqs", type=int, default=8, help="sequences in the group")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per sequence (prompt + response)")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens (no loss)")
    parser.add_argument("--lr", type=float, default=1e-6)
    args = parser.parse_args()
    device = torch.device(args.device)
    on_cuda = device.type == "cuda"
    if on_cuda and not torch.cuda.is_available():
        raise SystemExit(f"--device cuda, but torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
    model = build(args.shape, args.device)
    params = sum(p.numel() for p in model.parameters())
    autocast = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if on_cuda
                else torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (args.seqs, args.tokens), generator=gen).to(device)
    rewards = torch.tensor([float(i % 2) for i in range(args.seqs)])
    advantages = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).to(device)
    # A sample of weight matrices to watch (not the input embedding: AdamW leaves the rows of tokens absent
    # from the batch as they were).
    watched = [(n, p) for n, p in model.named_parameters() if "embed_tokens" not in n]
    probe = {n: p.detach().clone() for n, p in watched[:: max(1, len(watched) // 8)]}

    def step() -> float:
        if on_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        for i in range(args.seqs):  # one sequence per micro-batch: the token cap of the shipped recipes
            loss = grpo_loss(model, ids[i:i + 1], args.prompt, advantages[i:i + 1], autocast) / args.seqs
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if on_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    first = step()  # includes kernel selection and the optimizer's state allocation
    moved = {n: float((p.detach() != probe[n]).float().mean()) for n, p in model.named_parameters() if n in probe}
    second = step()
    tokens = args.seqs * args.tokens
    cfg = model.config
    # 6 N per trained token (forward + backward) + attention (causal: 6 x layers x T x hidden per token, halved),
    # + the recomputed forward of gradient checkpointing (2 N): counted as "model FLOPs" without the recompute.
    flops = tokens * (6 * params + 6 * cfg.num_hidden_layers * args.tokens * cfg.hidden_size / 2)
    name = torch.cuda.get_device_name(device) if on_cuda else "cpu"
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    report = {
        "device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "shape": args.shape,
        "parameters": params, "master_dtype": str(next(model.parameters()).dtype),
        "compute_dtype": "bfloat16 (autocast)" if on_cuda else "float32",
        "grad_dtype": str(next(p.grad for p in model.parameters() if p.grad is not None).dtype),
        "adam_state_dtype": str(next(iter(optimizer.state.values()))["exp_avg"].dtype),
        "seqs": args.seqs, "tokens_per_seq": args.tokens, "lr": args.lr,
        "first_step_s": round(first, 3), "step_s": round(second, 3), "tokens_per_s": round(tokens / second, 1),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if on_cuda else None,
        "mfu": round(flops / second / (peak * 1e12), 4) if peak else None,
        "weights_moved_fraction_min": round(min(moved.values()), 4),
        "weights_moved": min(moved.values()) > 0.5,
    }
    print(json.dumps(report, indent=2))
    if not report["weights_moved"]:
        raise SystemExit("the update did not move the weights")


if __name__ == "__main__":
    main()
