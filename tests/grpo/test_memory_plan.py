"""`seal-platform plan`: the GPU memory plan of a recipe, checked against hand arithmetic for several model
shapes, and the shipped GPU recipes' verdicts on the GPUs they are written for."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from seal_platform.cli import build_cli
from seal_platform.config import RunConfig
from seal_platform_plugins.grpo.engines.settings import EngineSettings
from seal_platform_plugins.grpo.memory_plan import GIB, plan, trainer_parts
from seal_platform_plugins.grpo.model_shape import KNOWN, Shape, shape_for
from seal_platform_plugins.grpo.policy import PolicySettings
from seal_platform_plugins.grpo.settings import GRPOSettings

M = "settings.policy.model=Qwen/Qwen2.5-7B-Instruct"


def test_parameter_counts_and_kv_bytes_are_the_published_models():
    # Parameter counts of the published checkpoints (their model cards / safetensors index).
    assert KNOWN["qwen2.5-0.5b"].params() == pytest.approx(0.494e9, rel=2e-3)
    assert KNOWN["qwen2.5-3b"].params() == pytest.approx(3.086e9, rel=1e-3)
    assert KNOWN["qwen2.5-7b"].params() == pytest.approx(7.616e9, rel=1e-3)
    assert KNOWN["smollm2-135m"].params() == pytest.approx(134.5e6, rel=1e-3)
    # KV cache per token: 2 (K, V) x layers x KV heads x head dim x 2 B.
    assert KNOWN["qwen2.5-3b"].kv_bytes_per_token() == 2 * 36 * 2 * 128 * 2 == 36 * 1024
    assert KNOWN["qwen2.5-7b"].kv_bytes_per_token() == 2 * 28 * 4 * 128 * 2 == 56 * 1024
    assert KNOWN["qwen3-8b"].kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2
    # LoRA on all 7 projections of 7B: 90,112 x r per layer.
    assert KNOWN["qwen2.5-7b"].lora_params(32, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"]) == 90_112 * 32 * 28


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-3b", "qwen2.5-7b"])
def test_trainer_parts_are_the_hand_formulas(name):
    s = KNOWN[name]
    n, h, i, layers, t = s.params(), s.hidden, s.intermediate, s.layers, 8192
    one = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(kl_coef=0.001), "float32", 1)}
    assert one["master weights (float32)"] == pytest.approx(4 * n / GIB)
    assert one["AdamW moments (float32)"] == pytest.approx(8 * n / GIB)
    assert one["KL reference (float32)"] == pytest.approx(4 * n / GIB)
    assert one["autocast's bf16 copies of the weights"] == pytest.approx(2 * n / GIB)
    assert one[f"activations, {t} tokens, no checkpointing"] == pytest.approx(t * layers * (10 * h + 4 * i) * 2 / GIB)
    four = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(kl_coef=0.0, gradient_checkpointing=True), "float32", 4)}
    assert four["gradients (float32)"] == pytest.approx(4 * n / 4 / GIB)
    assert "KL reference (float32)" not in four
    expected = t * (2 * layers * h * 2 + (10 * h + 4 * i) * 2)  # kept inputs + attention outputs, one block
    assert four[f"activations, {t} tokens, checkpointing"] == pytest.approx(expected / GIB)


def test_the_7b_figures_of_the_scaling_doc():
    s = KNOWN["qwen2.5-7b"]
    parts = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(), "float32", 1)}
    assert round(parts["master weights (float32)"] + parts["gradients (float32)"] + parts["AdamW moments (float32)"], 1) == 113.5
    assert round(parts["activations, 8192 tokens, no checkpointing"], 1) == 47.7


def test_shape_from_a_model_folder_and_an_unknown_name(tmp_path):
    config = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert shape_for(str(tmp_path)) == Shape(64, 128, 2, 4, 2, 1000, True)
    assert shape_for("/models/Qwen3-8B") == KNOWN["qwen3-8b"] and shape_for("Qwen/Qwen2.5-3B-Instruct") == KNOWN["qwen2.5-3b"]
    with pytest.raises(ValueError, match="no known shape"):
        shape_for("/models/mystery-13b")


def test_a_model_folder_with_a_model_type_is_counted_on_its_architecture(tmp_path):
    """With ``model_type`` in config.json the parameters are counted on an empty model of that architecture:
    exact for a mixture of experts, which the dense formulas undercount about ninefold."""
    from seal_platform_plugins.grpo.testing import tiny_causal_lm

    model = tiny_causal_lm("qwen3_moe")
    model.config.save_pretrained(tmp_path / "tiny")
    shape = shape_for(str(tmp_path / "tiny"))
    assert shape.params() == sum(p.numel() for p in model.parameters())
    assert shape.block_params() == sum(p.numel() for p in model.model.layers[0].parameters())
    qwen3_30b_a3b = dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                         num_experts=128, num_experts_per_tok=8, num_hidden_layers=48, num_attention_heads=32,
                         num_key_value_heads=4, head_dim=128, vocab_size=151936, tie_word_embeddings=False)
    (tmp_path / "moe").mkdir()
    (tmp_path / "moe" / "config.json").write_text(json.dumps(qwen3_30b_a3b))
    shape = shape_for(str(tmp_path / "moe"))
    assert shape.params() == pytest.approx(30.53e9, rel=1e-3)  # the published model's 30.5 B
    assert dataclasses.replace(shape, counted=None).params() < shape.params() / 9


def test_a_placement_needing_more_gpus_than_given_is_refused():
    config = RunConfig(environment="bfcl", stages={"optimize": "grpo"}, rollout={"engine": "vllm"})
    grpo = GRPOSettings(train_workers=4, replicas=4, placement={"trainer_gpus": 1, "engine_gpus": 1})
    settings = {"grpo": grpo, "policy": PolicySettings(model="Qwen/Qwen2.5-3B", device="cpu"), "engine": EngineSettings()}
    result = plan(config, settings, gpus=4, gpu_memory=80, on_ray=True)
    assert result.problems and "needs 8 GPUs" in result.problems[0]


@pytest.mark.parametrize(("recipe", "gpus", "fits"), [
    ("recipes/seal.yaml", 1, False), ("seal-gpu8", 8, True), ("seal-gpu4", 4, True), ("seal-lora", 1, True),
])
def test_the_shipped_recipes_on_the_gpus_they_are_written_for(recipe, gpus, fits):
    result = CliRunner().invoke(build_cli(), ["plan", recipe, M, "--gpus", str(gpus), "--gpu-memory", "80", "--json"])
    data = json.loads(result.output)
    assert result.exit_code == (0 if fits else 1), result.output
    used = [g for g in data["gpus"] if g["parts"]]
    assert len(used) == gpus  # every GPU holds a trainer rank or an engine
    assert all(g["need_gib"] <= 80 for g in used) == fits
    if not fits:
        assert "AdamW moments" in data["problems"][0] and "settings.grpo.train_workers" in data["problems"][0]
    assert not any("driver" in " ".join(g["holds"]) for g in used)  # no driver copy on a GPU
