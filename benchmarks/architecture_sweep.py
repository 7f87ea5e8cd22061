"""The exactness step of tests/grpo/test_architectures.py on architectures the tests do not hold: for each, one
GRPO step with all speed-ups on (packed rows with shared prompts, gradient checkpointing, fused rotary, chunked
log-probs), and with all but packing and checkpointing, against the step with none; prints the largest
log-prob and gradient gaps, or why the trainer refused (it probes its passes against the model's own forward
when it is built). Tiny random models built from transformers' config classes, nothing downloaded. By hand:

    PYTHONPATH=. .venv/bin/python benchmarks/architecture_sweep.py [NAME ...]

A sweep, not a test: a config that does not build here is reported and skipped. Those that belong in the tests
move to ``seal_platform_libs.policy.testing.TINY_ARCHITECTURES``.
"""

from __future__ import annotations

import sys

import tests.grpo.test_architectures as architectures
from seal_platform_libs.policy import testing

# name -> (model class, config class, config fields beyond testing.ARCHITECTURE_SHAPE)
EXTRA: dict[str, tuple[str, str, dict]] = {
    "qwen3_next": (
        "Qwen3NextForCausalLM",
        "Qwen3NextConfig",
        dict(
            head_dim=16,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            full_attention_interval=2,
        ),
    ),
    "minimax": (
        "MiniMaxForCausalLM",
        "MiniMaxConfig",
        dict(head_dim=16, num_local_experts=2, num_experts_per_tok=1, block_size=16),
    ),
    "smollm3": ("SmolLM3ForCausalLM", "SmolLM3Config", {}),
    "glm4_moe": (
        "Glm4MoeForCausalLM",
        "Glm4MoeConfig",
        dict(
            head_dim=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
    "exaone4": ("Exaone4ForCausalLM", "Exaone4Config", dict(head_dim=16, sliding_window=16)),
    "olmo3": ("Olmo3ForCausalLM", "Olmo3Config", dict(sliding_window=16)),
    "ernie4_5": ("Ernie4_5ForCausalLM", "Ernie4_5Config", dict(head_dim=16)),
    "hunyuan": ("HunYuanDenseV1ForCausalLM", "HunYuanDenseV1Config", dict(head_dim=16)),
    "apertus": ("ApertusForCausalLM", "ApertusConfig", {}),
    "gemma3n": (
        "Gemma3nForCausalLM",
        "Gemma3nTextConfig",
        dict(
            head_dim=16,
            sliding_window=16,
            vocab_size_per_layer_input=500,
            hidden_size_per_layer_input=8,
            laurel_rank=4,
            altup_num_inputs=2,
            num_kv_shared_layers=0,
            activation_sparsity_pattern=[0.0] * 4,
        ),
    ),
    "phi": ("PhiForCausalLM", "PhiConfig", {}),
    "glm4": ("Glm4ForCausalLM", "Glm4Config", dict(head_dim=16)),
    "arcee": ("ArceeForCausalLM", "ArceeConfig", {}),
    "bitnet": ("BitNetForCausalLM", "BitNetConfig", {}),
    "nanochat": ("NanoChatForCausalLM", "NanoChatConfig", {}),
    "granitemoe": ("GraniteMoeForCausalLM", "GraniteMoeConfig", dict(num_local_experts=4, num_experts_per_tok=2)),
    "jamba": (
        "JambaForCausalLM",
        "JambaConfig",
        dict(
            num_experts=2,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=8,
            mamba_dt_rank=8,
            use_mamba_kernels=False,
        ),
    ),
    "flex_olmo": ("FlexOlmoForCausalLM", "FlexOlmoConfig", dict(num_experts=2, num_experts_per_tok=1)),
}


def main(names: list[str]) -> int:
    for name in names or list(EXTRA):
        testing.TINY_ARCHITECTURES[name] = EXTRA[name]
        try:
            testing.tiny_causal_lm(name)
        except Exception as exc:  # a config this sweep gets wrong: reported, not a finding
            print(f"{name}: not built ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        plain_metrics, plain_grads, plain = architectures.step(name, architectures.PLAIN)
        for label, options in (("all speed-ups", architectures.FAST), ("padded", architectures.FAST_PADDED)):
            try:
                metrics, grads, fast = architectures.step(name, options)
            except ValueError as exc:
                print(f"{name}, {label}: refused: {str(exc)[:160]}")
                continue
            logp = max(float((a.old_logp - b.old_logp).abs().max()) for a, b in zip(plain, fast))
            grad = max(float((a - b).abs().max()) for x, y in zip(plain_grads, grads) for a, b in zip(x, y))
            print(f"{name}, {label}: log-prob gap {logp:.2e}, gradient gap {grad:.2e}, loss "
                  f"{plain_metrics['loss']:.6f} / {metrics['loss']:.6f}  {'exact' if logp < 1e-4 else 'DIFFERS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
