"""`seal-platform plan`: the GPU memory plan of a recipe, checked against hand arithmetic for several model
shapes, and the shipped GPU recipes' verdicts on the GPUs they are written for."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from seal_platform.cli import build_cli
from seal_platform.config import RunConfig
from seal_platform_libs.policy.engines.settings import EngineSettings
from seal_platform_libs.policy.loading import PolicySettings
from seal_platform_libs.policy.memory_plan import GIB, plan, trainer_parts
from seal_platform_libs.policy.model_shape import KNOWN, Shape, shape_for
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
    assert one["AdamW moments (float32, from the first update)"] == pytest.approx(8 * n / GIB)
    assert one["KL reference (bfloat16)"] == pytest.approx(2 * n / GIB)  # grpo.ref_dtype auto: bf16 on CUDA
    on_cpu = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(kl_coef=0.001), "float32", 1, on_cuda=False)}
    assert on_cpu["KL reference (float32)"] == pytest.approx(4 * n / GIB)  # on CPU: the policy's dtype
    assert one["autocast's bf16 copies of the weights"] == pytest.approx(2 * n / GIB)
    assert one[f"activations, {t} tokens, no checkpointing"] == pytest.approx(t * layers * (10 * h + 4 * i) * 2 / GIB)
    four = {
        p.what: p.gib for p in trainer_parts(s, GRPOSettings(kl_coef=0.0, gradient_checkpointing=True), "float32", 4)
    }
    assert four["gradients (float32)"] == pytest.approx(4 * n / 4 / GIB)
    assert not any(what.startswith("KL reference") for what in four)
    sharded = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(kl_coef=0.001), "float32", 4)}
    assert sharded["KL reference (bfloat16)"] == pytest.approx(2 * n / 4 / GIB)  # sharded workers: bf16 on CUDA
    expected = t * (2 * layers * h * 2 + (10 * h + 4 * i) * 2)  # kept inputs + attention outputs, one block
    assert four[f"activations, {t} tokens, checkpointing"] == pytest.approx(expected / GIB)


def test_the_7b_figures_of_the_scaling_doc():
    s = KNOWN["qwen2.5-7b"]
    parts = {p.what: p.gib for p in trainer_parts(s, GRPOSettings(), "float32", 1)}
    assert round(parts["master weights (float32)"] + parts["gradients (float32)"]
                 + parts["AdamW moments (float32, from the first update)"], 1) == 113.5
    assert round(parts["activations, 8192 tokens, no checkpointing"], 1) == 47.7


def test_shape_from_a_model_folder_and_an_unknown_name(tmp_path):
    config = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert shape_for(str(tmp_path)) == Shape(64, 128, 2, 4, 2, 1000, True)
    assert (
        shape_for("/models/Qwen3-8B") == KNOWN["qwen3-8b"]
        and shape_for("Qwen/Qwen2.5-3B-Instruct") == KNOWN["qwen2.5-3b"]
    )
    with pytest.raises(ValueError, match="no known shape"):
        shape_for("/models/mystery-13b")


def test_a_model_folder_with_a_model_type_is_counted_on_its_architecture(tmp_path):
    """With ``model_type`` in config.json the parameters are counted on an empty model of that architecture:
    exact for a mixture of experts, which the dense formulas undercount about ninefold."""
    from seal_platform_libs.policy.testing import tiny_causal_lm

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
    settings = {
        "grpo": grpo,
        "policy": PolicySettings(model="Qwen/Qwen2.5-3B", device="cpu"),
        "engine": EngineSettings(),
    }
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
    assert all(max(g["phases"].values()) == g["need_gib"] for g in used)
    assert all(e["met"] for e in data["vllm_start"]) == fits  # vLLM's start-up rule
    if not fits:
        assert "AdamW moments" in data["problems"][0] and "settings.grpo.train_workers" in data["problems"][0]
    assert not any("driver" in " ".join(g["holds"]) for g in used)  # no driver copy on a GPU


def _plan_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(build_cli(), ["plan", *args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_every_phase_of_seal_gpu8_is_the_hand_arithmetic():
    """seal-gpu8 (4 FSDP ranks on GPUs 0-3, 4 vLLM replicas on GPUs 4-7) with Qwen2.5-7B, phase by phase."""
    code, data = _plan_json("seal-gpu8", M, "--gpus", "8", "--gpu-memory", "80")
    assert code == 0, data["problems"]
    s = KNOWN["qwen2.5-7b"]
    n, v, h, layers, i = s.params(), s.vocab, s.hidden, s.layers, s.intermediate
    fixed = 1 + 2  # CUDA context, the allocator's reserve
    masters, moments, grads, ref = (
        4 * n / 4,
        8 * n / 4,
        4 * n / 4,
        2 * n / 4,
    )  # float32 masters over 4 ranks, bf16 KL reference
    fsdp = 2 * s.root_params() + 8 * s.block_params() + 4 * s.root_params()
    act = 8192 * (2 * layers * h * 2 + (10 * h + 4 * i) * 2)  # checkpointing, the attention output kept
    logits = 1024 * v * 19  # chunked, 1024 loss tokens at a time
    biggest = v * h  # the embedding
    trainer = data["gpus"][0]["phases"]
    assert trainer["load"] == pytest.approx((masters + ref + 4 * biggest) / GIB + fixed, abs=0.01)
    assert trainer["start-up"] == pytest.approx((masters + ref) / GIB + fixed, abs=0.01)
    assert trainer["push"] == pytest.approx(
        (masters + moments + ref + 4 * biggest + 2 * biggest) / GIB + fixed, abs=0.01
    )
    assert trainer["rollout"] == pytest.approx((masters + moments + ref) / GIB + fixed, abs=0.01)
    foreach = 4 * n / 4  # AdamW's temporary (FSDP2's DTensors take its foreach path)
    assert trainer["update"] == pytest.approx((masters + moments + grads + ref + fsdp + foreach + act + logits) / GIB
                                              + fixed, abs=0.01)
    assert round(trainer["update"], 1) == 57.4
    engine = data["gpus"][4]["phases"]
    assert engine["load"] == 0  # the engines start after the trainer has loaded
    assert engine["start-up"] == engine["rollout"] == engine["update"] == pytest.approx(1 + 0.9 * 80)
    assert engine["push"] == pytest.approx(1 + 0.9 * 80 + 2 * biggest / GIB, abs=0.01)  # the NCCL bucket
    assert [g["phases"] for g in data["gpus"][:4]] == [trainer] * 4
    assert [g["phases"] for g in data["gpus"][4:]] == [engine] * 4
    # vLLM's start-up rule on a GPU of its own: 80 GiB less its own CUDA context >= 0.9 x 80.
    assert [(e["gpu"], e["free_gib"], e["wants_gib"], e["met"]) for e in data["vllm_start"]] == [
        (k, 79.0, 72.0, True) for k in range(4, 8)]
    assert all(g["need_gib"] <= 80 for g in data["gpus"])


def test_colocated_engines_start_beside_the_loaded_trainer_and_sleep_through_the_update():
    """seal-gpu4: vLLM starts when the trainer holds its shards and reference (no moments yet); asleep it keeps
    its CUDA context, activations and graphs (the sleep residue)."""
    code, data = _plan_json("seal-gpu4", M, "--gpus", "4", "--gpu-memory", "80")
    assert code == 0, data["problems"]
    n = KNOWN["qwen2.5-7b"].params()
    gpu = data["gpus"][0]
    resident = (4 * n / 4 + 2 * n / 4) / GIB + 3  # masters, bf16 reference, context, reserve
    assert data["vllm_start"][0]["free_gib"] == pytest.approx(80 - resident - 1, abs=0.01)
    assert data["vllm_start"][0]["wants_gib"] == pytest.approx(0.45 * 80)
    assert gpu["phases"]["start-up"] == pytest.approx(resident + 1 + 0.45 * 80, abs=0.01)
    assert gpu["phases"]["rollout"] == pytest.approx(resident + 8 * n / 4 / GIB + 1 + 0.45 * 80, abs=0.01)
    trainer_update = sum(
        p["gib"] for p in gpu["parts"] if p["holder"].startswith("trainer") and "update" in p["phases"]
    )
    assert gpu["phases"]["update"] == pytest.approx(trainer_update + 2, abs=0.02)  # + the sleep residue
    # The memory sequence wakes the weights for the push and the KV cache only after it (and the trainer's offload).
    kv = next(p for p in gpu["parts"] if p["what"].startswith("vLLM KV cache"))
    weights = next(p for p in gpu["parts"] if p["what"] == "vLLM weights (bf16)")
    assert "push" in weights["phases"] and "push" not in kv["phases"] and "rollout" in kv["phases"]
    # The colocated replica copies each pushed bucket out of its trainer rank's by CUDA IPC: a bucket of its own.
    bucket = next(p for p in gpu["parts"] if p["what"] == "push: a received bucket (NCCL or CUDA IPC)")
    n_vocab, hidden = 152064, 3584
    assert list(bucket["phases"]) == ["push"] and bucket["gib"] == pytest.approx(n_vocab * hidden * 2 / GIB, abs=0.01)
    # The same GPUs with vLLM asking for more than the loaded trainer leaves free: refused at start-up.
    code, data = _plan_json("seal-gpu4", M, "settings.engine.vllm.gpu_memory_utilization=0.85", "--gpus", "4",
                            "--gpu-memory", "80")
    assert code == 1 and not data["vllm_start"][0]["met"]
    assert any("would not start" in p and "settings.engine.vllm.gpu_memory_utilization" in p for p in data["problems"])


@pytest.mark.parametrize(("loss_tokens", "gib"), [(1024, 3.19), (4096, 12.76)])
def test_unchunked_logits_cost_all_loss_tokens_of_a_micro_batch_at_once(loss_tokens, gib):
    s = KNOWN["qwen2.5-7b"]
    grpo = GRPOSettings(logits_chunk_tokens=None, max_tokens_per_micro_batch=loss_tokens)
    parts = {p.what: p.gib for p in trainer_parts(s, grpo, "float32", 4)}
    assert round(parts[f"logits, unchunked: {loss_tokens} loss tokens at once (vocabulary 152064)"], 2) == gib
    chunked = {
        p.what: p.gib for p in trainer_parts(s, GRPOSettings(max_tokens_per_micro_batch=loss_tokens), "float32", 4)
    }
    assert round(chunked["logits, chunked: 1024 loss tokens at a time (vocabulary 152064)"], 2) == 2.76


def _peak_bytes(run) -> int:
    """The peak of the bytes held by live tensors that ``run`` allocates (a dispatch-mode count, on the CPU)."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        live = peak = 0
        storages: set[int] = set()  # data pointers of the live storages counted (views share theirs)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in Count.storages:
                    storage = t.untyped_storage()
                    key, size = storage.data_ptr(), storage.nbytes()
                    Count.storages.add(key)
                    Count.live += size
                    Count.peak = max(Count.peak, Count.live)
                    weakref.finalize(storage, Count.free, key, size)
            return out

        @staticmethod
        def free(key: int, size: int) -> None:
            Count.storages.discard(key)
            Count.live -= size

    with Count():
        run()
    return Count.peak


def test_the_logits_byte_counts_bound_what_the_log_prob_code_allocates():
    """LOGITS_BYTES_CHUNKED / _UNCHUNKED against the peak of live tensors of the trainer's own log-prob code
    (forward, the entropy metric, backward): the plan's figure is at most 25% above it and never below."""
    import torch

    from seal_platform_libs.policy.memory_plan import LOGITS_BYTES_CHUNKED, LOGITS_BYTES_UNCHUNKED
    from seal_platform_plugins.grpo.objective import chunked_logprobs, entropy_from_logits, token_logprobs

    vocab, hidden, tokens, chunk = 16384, 8, 256, 64
    head = torch.nn.Linear(hidden, vocab, bias=False).to(torch.bfloat16)
    states = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))

    def chunked():
        logp, _ = chunked_logprobs(states, head, targets, chunk=chunk, entropy=True)
        logp.sum().backward()

    def unchunked():  # what forward.py's unchunked path runs: the logits, their log-probs, the entropy metric
        logits = head(states)
        logp = token_logprobs(logits, targets)
        with torch.no_grad():
            entropy_from_logits(logits.detach())
        del logits
        logp.sum().backward()

    per_chunk = _peak_bytes(chunked) / (chunk * vocab)
    per_batch = _peak_bytes(unchunked) / (tokens * vocab)
    # + 0.25: the per-token tensors (targets, log-probs, the hidden states' gradient) are in the count too.
    assert 0.75 * LOGITS_BYTES_CHUNKED <= per_chunk <= LOGITS_BYTES_CHUNKED + 0.25
    assert 0.75 * LOGITS_BYTES_UNCHUNKED <= per_batch <= LOGITS_BYTES_UNCHUNKED + 0.25


@pytest.mark.parametrize("recipe", ["seal-gpu4", "seal-gpu8", "seal-lora", "seal-ray"])
def test_the_gpu_recipes_pack_their_micro_batches(recipe):
    """Packed rows ran 1.6-2.1x the padded update on an H200 (docs/scaling.md): the GPU recipes use them."""
    from seal_platform.planning import load_recipe

    config, issues, _ = load_recipe(recipe, [M])
    assert config is not None and not issues
    assert config.settings["grpo"]["pack_sequences"] is True


def test_offloaded_reference_and_trainer_state_leave_the_phases_they_are_offloaded_in():
    """grpo.ref_offload: the sharded reference is on the GPU for the update's reference pass only (and while it
    loads); grpo.trainer_offload (colocated): shards and moments are in host memory while the engines sample.
    (model_copy: on a tree without these settings the plan reads them where they are set.)"""
    s, n = KNOWN["qwen2.5-7b"], KNOWN["qwen2.5-7b"].params()
    grpo = GRPOSettings(kl_coef=0.001).model_copy(update={"ref_offload": True, "trainer_offload": True})
    parts = {p.what.split(" (")[0]: p for p in trainer_parts(s, grpo, "float32", 4, colocated=True)}
    assert parts["KL reference"].phases == ("load", "update") and parts["KL reference"].gib == pytest.approx(
        2 * n / 4 / GIB
    )
    assert "rollout" not in parts["master weights"].phases and "rollout" not in parts["AdamW moments"].phases
    assert "push" in parts["master weights"].phases  # the push comes before the offload
    apart = {p.what.split(" (")[0]: p for p in trainer_parts(s, grpo, "float32", 4, colocated=False)}
    assert "rollout" in apart["master weights"].phases  # nothing to make room for on a GPU of its own


def test_lora_replicas_receive_merged_weights_made_at_once_on_the_trainers_gpu():
    """With replicas (plain models of the base) a LoRA push merges every targeted projection at once
    (lora.merged_weights) and sends it; an in-process engine (seal-lora on one GPU) needs no push."""
    s = KNOWN["qwen2.5-7b"]
    all7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    per_layer = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944  # q, o; k, v (4 KV heads x 128); the MLP
    assert s.projection_params(all7) == 28 * per_layer
    code, data = _plan_json("seal-lora", M, "settings.engine.replicas=2", "--gpus", "2", "--gpu-memory", "80")
    assert code == 0, data["problems"]
    push = [p for p in data["gpus"][0]["parts"] if p["what"].startswith("push: merged copies")]
    assert [p["phases"] for p in push] == [["push"]]
    assert push[0]["gib"] == pytest.approx((28 * per_layer * 2 + 152064 * 3584 * 2) / GIB, abs=0.01)
    assert any(p["what"] == "push: a received bucket (NCCL or CUDA IPC)" for p in data["gpus"][1]["parts"])
    code, one = _plan_json("seal-lora", M, "--gpus", "1", "--gpu-memory", "80")
    assert code == 0 and not any(p["what"].startswith("push") for p in one["gpus"][0]["parts"])
