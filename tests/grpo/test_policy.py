"""Policy loading: settings validation, the embedded GGUF model's converted cache, local model directories."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from seal_platform_libs.policy.loading import EMBEDDED_MODEL, PolicySettings, converted_dir, load_policy

torch = pytest.importorskip("torch")


def test_settings_defaults_and_unknown_keys():
    settings = PolicySettings()
    assert settings.model == EMBEDDED_MODEL
    assert settings.resolved_dtype() in {"float32", "bfloat16"}
    with pytest.raises(ValidationError):
        PolicySettings.model_validate({"modle": "x"})
    with pytest.raises(ValidationError):
        PolicySettings.model_validate({"dtype": "float8"})


def test_importing_policy_settings_stays_light():
    import subprocess

    code = (
        "import sys; import seal_platform_libs.policy.loading, seal_platform_libs.policy.engines, "
        "seal_platform_libs.policy.tokens; "
        "print(','.join(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_missing_model_directory_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="local Hugging Face model directory"):
        load_policy(PolicySettings(model=str(tmp_path / "nowhere")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_policy(PolicySettings(model=str(tmp_path / "empty")))


def test_local_directory_loads_with_left_padding(tiny_model_dir: Path):
    model, tokenizer = load_policy(PolicySettings(model=str(tiny_model_dir), dtype="float32", device="cpu"))
    assert model.config.num_hidden_layers == 2
    assert Path(model.name_or_path) == tiny_model_dir
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    assert not model.training
    again, _ = load_policy(PolicySettings(model=str(tiny_model_dir), dtype="float32", device="cpu"))
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


def test_random_init_has_the_architecture_but_not_the_weights(tiny_model_dir: Path):
    trained, _ = load_policy(PolicySettings(model=str(tiny_model_dir), device="cpu"))
    random, _ = load_policy(PolicySettings(model=str(tiny_model_dir), device="cpu", random_init=True))
    assert [p.shape for p in random.parameters()] == [p.shape for p in trained.parameters()]
    assert not torch.equal(random.model.layers[0].mlp.up_proj.weight, trained.model.layers[0].mlp.up_proj.weight)
    assert not random.name_or_path  # the vLLM engine must not read the directory's weights for it


def test_bfloat16(tiny_model_dir: Path):
    model, _ = load_policy(PolicySettings(model=str(tiny_model_dir), dtype="bfloat16", device="cpu"))
    assert model.dtype == torch.bfloat16


def test_embedded_model_is_converted_once(smollm2_dir: Path):
    # The session fixture converted it; the second load reads the safetensors copy.
    assert smollm2_dir == converted_dir()
    assert (smollm2_dir / "model.safetensors").is_file() and (smollm2_dir / "tokenizer.json").is_file()
    model, tokenizer = load_policy(PolicySettings(device="cpu"))
    assert model.config.num_hidden_layers == 30 and "quantization_config" not in model.config.to_dict()
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template


@pytest.mark.slow
def test_conversion_matches_the_gguf_model(tmp_path: Path):
    """A fresh conversion into an empty cache gives the GGUF-loaded model's logits and tokenizer exactly."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal_platform_libs.policy.loading import embedded_gguf_path, ensure_converted

    settings = PolicySettings(cache_dir=str(tmp_path), device="cpu")
    target = ensure_converted(settings)
    assert target.parent == tmp_path
    model, tokenizer = load_policy(settings)
    gguf = embedded_gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    reference_tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    text = "<|im_start|>user\nWhat files are in /tmp? Use the ls tool.<|im_end|>\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == reference_tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([ids])).logits, reference(torch.tensor([ids])).logits)
