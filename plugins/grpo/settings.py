"""Settings sections ``grpo`` (the objective and the optimizer; its runtime fields -- trainer ranks, LoRA, engine
replicas, weight sync -- are the library's :class:`~seal_platform_libs.policy.settings.RuntimeSettings`) and
``apatch`` (advantage reweighting).

Defaults are the reference GRPO recipe of the SEAL release (see docs/seal-method.md, "Optimization" and
"A-Patch"). Only pydantic and the core's label constants are imported here: the plugin module imports these
models when it is loaded.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from seal_platform.config import Section
from seal_platform.labels import EXCLUDED_LABELS
from seal_platform_libs.policy.settings import (
    DEFAULT_LORA_TARGETS,
    LoRASettings,
    PlacementSettings,
    RuntimeSettings,
    check_lora_composes,
)

# The reference A-Patch base weight of each reference label (docs/seal-method.md, "Diagnosis").
REFERENCE_BASE_WEIGHTS: dict[str, float] = {
    "spurious_tool_call": 2.0,
    "correct_abstention": 1.8,
    "empty_turn_model_response": 1.5,
    "instance_mismatch": 0.6,
    "state_mismatch": 1.0,
    "response_mismatch": 0.9,
    "pass": 1.0,
}
# Labels that say nothing about the model's conduct in the turn are never weighted, never counted: the
# core's EXCLUDED_LABELS, the verifier's own errors and turns the episode never reached (the reference counted
# those as correct abstentions, weight 1.8 - a bug we do not copy). Every other reference label has a weight
# above.


class GRPOSettings(RuntimeSettings):
    """Settings section ``grpo``: the clipped policy-gradient objective and how it is optimised."""

    # --- advantages -------------------------------------------------------------------------------------
    advantage_eps: float = Field(default=1e-6, gt=0.0, description="A = (R - mean R) / (std R + eps).")
    normalize_std: bool = Field(
        default=True, description="Divide by the group's (unbiased) reward std; false: mean-centring only (Dr. GRPO)."
    )
    # --- the objective -------------------------------------------------------------------------------------
    clip_ratio_low: float = Field(default=0.2, ge=0.0, description="PPO clip: ratio >= 1 - clip_ratio_low.")
    clip_ratio_high: float = Field(default=0.2, ge=0.0, description="PPO clip: ratio <= 1 + clip_ratio_high.")
    dual_clip: float | None = Field(
        default=10.0, gt=1.0, description="Dual clip c for negative advantages: loss <= -A * c. Null: off."
    )
    kl_coef: float = Field(default=0.001, ge=0.0, description="KL loss to the initial policy; 0: no reference model.")
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        default="k3", description="KL estimator per token (k3: exp(ref - logp) - (ref - logp) - 1, low variance)."
    )
    entropy_coef: float = Field(default=0.0, ge=0.0, description="Entropy bonus (the reference uses none).")
    loss_agg: Literal["seq-mean-token-mean", "token-mean"] = Field(
        default="seq-mean-token-mean",
        description="seq-mean-token-mean: token mean per trajectory, then mean over trajectories (reference); "
        "token-mean: mean over all generated tokens of the mini-batch.",
    )
    temperature: float | None = Field(
        default=None, gt=0.0,
        description="Logits are divided by this when log-probs are recomputed; null: the recipe's "
        "rollout.temperature (1.0 when that is 0, i.e. greedy).",
    )
    old_logprobs: Literal["recompute", "engine"] = Field(
        default="recompute",
        description="recompute: the policy's own log-probs before the step's first update (verl's way; exact "
        "ratios even when the engine's numerics differ). engine: the log-probs the rollout engine reported "
        "(saves one forward pass; tokens without them are recomputed).",
    )
    # --- the optimizer -----------------------------------------------------------------------------------
    lr: float = Field(default=1e-6, gt=0.0, description="AdamW learning rate (constant after warm-up).")
    lr_warmup_updates: int = Field(
        default=0, ge=0, le=10_000_000, description="Linear warm-up over this many optimizer updates."
    )
    weight_decay: float = Field(default=0.01, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = Field(default=1e-8, gt=0.0)
    grad_clip: float | None = Field(default=1.0, gt=0.0, description="Clip the global grad norm; null: off.")
    # --- batching -----------------------------------------------------------------------------------------
    mini_batch_tasks: int = Field(
        default=8, ge=1, le=100_000,
        description="Tasks (GRPO groups) per optimizer update: 32 tasks per step / 8 = 4 updates per step.",
    )
    epochs_per_step: int = Field(default=1, ge=1, le=1000, description="Passes over the step's mini-batches.")
    micro_batch_size: int = Field(
        default=4, ge=1, le=4096, description="Most sequences per forward/backward pass (gradient accumulation)."
    )
    max_tokens_per_micro_batch: int | None = Field(
        default=8192,
        ge=1,
        le=100_000_000,
        description="Most tokens per forward/backward pass (padded, or packed with pack_sequences), a hard cap: an "
        "episode longer than this is trained on its first max_tokens_per_micro_batch tokens only (counted in the "
        "step's truncated_sequences), never as one oversized micro-batch; null: no token limit.",
    )
    pack_sequences: bool = Field(
        default=False,
        description="Pack each micro-batch's sequences into one row instead of padding them to the longest: "
        "micro-batches are filled up to max_tokens_per_micro_batch tokens (the sum of their lengths, still a hard "
        "cap) and micro_batch_size sequences; attention stays within each sequence (position ids restart per "
        "sequence: on CUDA flash-attn's varlen kernels through transformers' flash_attention_2 when flash-attn is "
        "importable, else SDPA once per packed sequence (grpo.packing's seal_packed_sdpa); an eager model gets a "
        "block-diagonal causal mask). Same loss and gradients up to float rounding; prefix sharing gives way to "
        "per-sequence attention and applies under eager only (see docs/scaling.md, 'Packed updates').",
    )
    overlong_filter: bool = Field(
        default=False,
        description="Give no loss to an episode cut off by a token limit (a generation stopped at max_new_tokens, "
        "or the episode at the context limit): DAPO's overlong filtering. Its reward still counts in its group's "
        "advantages; the step reports how many were masked (overlong_masked).",
    )
    response_window_tokens: int | None = Field(
        default=None, ge=1, le=10_485_760,
        description="Train only on generated tokens within the first N tokens of the response, counted from the "
        "first generated token (tool results and later user turns count too; the reference release: 4096). "
        "Later tokens get no loss. Null: the whole episode.",
    )
    shared_prefix: bool = Field(
        default=True,
        description="Run the prompt a group's rollouts share once per micro-batch and only the rest per "
        "rollout (same loss and gradients up to float rounding; much faster when prompts are long). Padded "
        "micro-batches: without gradient checkpointing, not on the sharded path. Packed rows (pack_sequences) "
        "under per-sequence SDPA: always, once per run of a group's rollouts in the row; not with flash-attn.",
    )
    zero_advantage: Literal["skip", "compute"] = Field(
        default="skip",
        description="skip: trajectories with advantage 0 are not run when that changes nothing: always without KL "
        "and entropy terms, and while the policy still equals the reference with a k2/k3 KL term (so a step whose "
        "groups all have equal rewards costs no update at the start of training). compute: run them anyway "
        "(the reference implementation's behaviour). Skipped work is counted in the step metrics.",
    )
    logits_chunk_tokens: int | None = Field(
        default=1024, ge=1, le=100_000_000,
        description="Loss tokens whose full-vocabulary float32 logits exist at a time: the output layer, log-probs "
        "and entropy run per chunk and are recomputed in backward (torch.utils.checkpoint) instead of kept. "
        "null: all of a micro-batch's logits at once (through the model's own forward).",
    )
    fused_rotary: bool = Field(
        default=True,
        description="Rotary position embeddings of the policy and its reference through grpo.rotary's fused "
        "function and backward (the same values bit for bit, fewer passes over memory) where the model's "
        "architecture uses the standard rotation; false: transformers' own.",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Trade compute for activation memory: each decoder layer's activations are recomputed in backward.",
    )
    checkpoint_keep_attention: bool = Field(
        default=True,
        description="With gradient_checkpointing: keep each layer's attention output (torch's fused "
        "scaled-dot-product attention kernels) instead of recomputing it in backward (selective activation "
        "checkpointing). At long context attention is the costliest part of the recompute while its output is "
        "small (tokens x hidden size per layer): a 4.4k-token update on the 2-core CPU ran at 91 instead of 82 "
        "trained tokens/s (as fast as without checkpointing), same peak memory. false: recompute everything "
        "(transformers' default).",
    )
    autocast: Literal["auto", "off", "bfloat16", "float16"] = Field(
        default="auto",
        description="Mixed precision for forward/backward. auto: bfloat16 on CUDA when the parameters are "
        "float32 (fp32 master weights; a 1e-6 update is lost in bf16 weights), off on CPU.",
    )
    ref_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        default="auto",
        description="Dtype of the frozen KL reference (the single-process trainer's and the sharded workers'). "
        "auto: bfloat16 on CUDA (half the memory of a float32 copy; the reference only runs forward passes, "
        "which compute in bfloat16 there anyway), the policy's dtype on CPU (the update is then unchanged). "
        "bfloat16 on CPU moves the reference's per-token log-probs by at most 2.8e-3 on the tiny test model "
        "(the test allows 1e-2: tests/grpo/test_trainer_init.py).",
    )
    ref_offload: bool = Field(
        default=False,
        description="The trainer (single-process or sharded workers) keeps the KL reference in host memory between "
        "steps and brings it to the GPU for the step only (no effect on CPU).",
    )
    trainer_offload: bool = Field(
        default=False,
        description="Colocated engines (settings.grpo.placement.colocate) with sharded trainer workers "
        "(settings.grpo.train_workers > 1): the workers' parameter shards and optimizer state go to host memory while "
        "the engines sample, and come back for the update (seal_platform_libs/policy/memory_phases.py). Frees the GPU "
        "for the engines' KV cache; costs two host copies a step.",
    )

    train_layers: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Train only the last N decoder layers and the final norm (a partial fine-tune): the "
        "embeddings, the output layer and the earlier layers stay frozen, so no activation of a frozen layer is "
        "kept and the backward pass stops at the first trained layer. Less compute and memory per update (the "
        "embedded recipes train 10 of SmolLM2-135M's 30 layers). null: every weight.",
    )
    max_staleness: int = Field(
        default=0, ge=0, le=1000,
        description="Samples may be this many policy versions (optimizer updates) older than the trainer's "
        "policy; older ones are handled as stale_samples says.",
    )
    stale_samples: Literal["refuse", "importance_correct"] = Field(
        default="refuse",
        description="refuse: stale trajectories are dropped from the update; importance_correct: kept, with "
        "per-token truncated importance weights min(cap, p_old / p_sampled).",
    )
    importance_cap: float = Field(default=2.0, gt=0.0, description="Truncation of the importance weights.")

    @model_validator(mode="after")
    def _check(self) -> GRPOSettings:
        if self.clip_ratio_low >= 1.0:
            raise ValueError("clip_ratio_low must be below 1 (the ratio's lower bound is 1 - clip_ratio_low)")
        check_lora_composes(self)
        if self.lora is not None and self.lora.dropout > 0 and self.gradient_checkpointing:
            raise ValueError(
                f"settings.grpo.lora.dropout = {self.lora.dropout} with settings.grpo.gradient_checkpointing: "
                "checkpointing runs the policy in train mode, where the adapters' dropout acts, so the update's "
                "log-probs would not be the rollouts'. Set settings.grpo.lora.dropout: 0 (the trainer switches every "
                "other dropout off)."
            )
        if self.train_layers is not None and (self.lora is not None or self.train_workers > 1):
            raise ValueError(
                "settings.grpo.train_layers (a partial fine-tune) works with the single-process trainer and no LoRA: "
                "set settings.grpo.train_workers: 1 and settings.grpo.lora: null, or drop settings.grpo.train_layers."
            )
        return self


class APatchSettings(Section):
    """Settings section ``apatch``: diagnosis-guided advantage reweighting (the ``reweight`` stage)."""

    mode: Literal["dynamic", "static", "off"] = Field(
        default="dynamic",
        description="dynamic: EMA label weights from the capability state; static: label weights frozen at "
        "their base values (ablation 'w/o closed-loop update'); off: every weight 1.",
    )
    base_weights: dict[str, float] = Field(
        default_factory=lambda: dict(REFERENCE_BASE_WEIGHTS),
        description="Base weight per reference label; a finer label uses its own entry if present, else its "
        "reference label's.",
    )
    default_base_weight: float = Field(default=1.0, gt=0.0, description="Base weight of a label with no entry.")
    excluded_labels: list[str] = Field(
        default_factory=lambda: list(EXCLUDED_LABELS),
        description="Labels that never weigh a trajectory nor count in N (verifier-side errors, unreached turns).",
    )
    fixed_labels: list[str] = Field(
        default_factory=lambda: ["pass"], description="Labels whose weight stays at its base value."
    )
    alpha: float = Field(default=1.0, ge=0.0, description="Strength of the pressure term.")
    beta: float = Field(default=0.25, ge=0.0, le=1.0, description="EMA rate: rho = (1 - beta) rho + beta target.")
    count_saturation: int = Field(default=32, ge=1, le=1_000_000_000, description="C: confidence min(1, count / C).")
    min_scale: float = Field(default=0.5, gt=0.0, description="Lower clip of a label's target weight.")
    max_scale: float = Field(default=2.0, gt=0.0, description="Upper clip of a label's target weight.")
    trajectory_min: float = Field(default=0.5, gt=0.0, description="Lower clip of a trajectory's scale.")
    trajectory_max: float = Field(default=2.0, gt=0.0, description="Upper clip of a trajectory's scale.")
    apply_to: Literal["all", "positive", "negative"] = Field(
        default="all", description="Scale all advantages, or only positive, or only negative ones (others: 1)."
    )

    @model_validator(mode="after")
    def _check(self) -> APatchSettings:
        if self.min_scale > self.max_scale:
            raise ValueError(f"min_scale ({self.min_scale}) must not exceed max_scale ({self.max_scale})")
        if self.trajectory_min > self.trajectory_max:
            raise ValueError(
                f"trajectory_min ({self.trajectory_min}) must not exceed trajectory_max ({self.trajectory_max})"
            )
        bad = {k: v for k, v in self.base_weights.items() if v <= 0}
        if bad:
            raise ValueError(f"base weights must be positive (a weight never flips an advantage's sign): {bad}")
        return self


__all__ = ["DEFAULT_LORA_TARGETS", "APatchSettings", "GRPOSettings", "LoRASettings", "PlacementSettings"]
