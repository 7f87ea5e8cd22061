"""The tiny random Llama builder that tests and benchmarks share (``seal_platform_libs.policy.testing``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_a_saved_tiny_llama_loads_back_as_the_same_model_with_the_tokenizers_ids(tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_platform_libs.policy.testing import TINY_SHAPE, save_tiny_llama, tiny_llama

    model = tiny_llama(tokenizer, seed=3)
    assert model.config.vocab_size == len(tokenizer) and model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.hidden_size == TINY_SHAPE["hidden_size"] and not model.training
    saved = save_tiny_llama(tmp_path / "tiny", tokenizer, seed=3)
    loaded = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
    assert AutoTokenizer.from_pretrained(saved).encode("get_weather(city='Paris')") == tokenizer.encode(
        "get_weather(city='Paris')")
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # the seed decides the weights; a shape override changes the shape
    assert not torch.equal(tiny_llama(tokenizer, seed=4).lm_head.weight, model.lm_head.weight)
    assert tiny_llama(vocab_size=256, hidden_size=64).model.embed_tokens.weight.shape == (256, 64)
    with pytest.raises(ValueError, match="tokenizer or a vocab_size"):
        tiny_llama()
