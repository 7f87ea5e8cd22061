"""An engine whose weights a load left half old, half new serves nothing until a complete load lands.

A collective push given up halfway (a replica killed in it) leaves each survivor with the buckets it had
copied: a mix of two versions, until the push's fallback (the host path) loads them all. A request made in that
window must not be generated with the mix, nor carry a version whose weights were not whole: it waits for the
fallback and is then generated with the new weights and stamped with their version. A fallback that never
comes makes the held requests (and any later one) fail with WeightsIncomplete after the engine's ``hold_s``.
The given-up group's gloo threads leave the survivor at once, not at the group's timeout (Linux: /proc).
Two local hf replicas on the CPU over gloo, buckets of 64 KiB; and one hf engine in this process."""

from __future__ import annotations

import copy
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from seal_platform.types import SamplingParams  # noqa: E402
from seal_platform_libs.policy.engines.base import WeightsIncomplete  # noqa: E402
from seal_platform_libs.policy.engines.hf import HFEngine  # noqa: E402
from seal_platform_libs.policy.engines.local import LocalEngineClient, start_local_replicas  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402
from seal_platform_libs.policy.testing import sequence_logprobs, tiny_llama  # noqa: E402
from tests.grpo.checks import (  # noqa: E402
    SEQUENCES,
    after_senders_broadcast,
    bounded,
    scores_equal_the_trainers,
    trainer_logprobs,
)

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)
# no batching wait: a request is generated as soon as the worker takes it (nothing waits for the fallback)
NO_WAIT = EngineSettings.model_validate({"hf": {"batch_wait_ms": 0, "share_model": False}})


def _update(model, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight moves
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)


def _like_the_trainers(generation, model, prompt) -> bool:
    ours = trainer_logprobs(model, prompt, generation.token_ids)
    return bool(torch.allclose(torch.tensor(generation.logprobs), ours, atol=1e-4))


def test_a_request_made_while_a_push_is_given_up_halfway_gets_the_fallbacks_whole_weights(tokenizer, monkeypatch):
    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    client = start_local_replicas("hf", model, tokenizer, NO_WAIT, [None, None], seed=0, weight_sync="collective",
                                  bucket_bytes=64 * 1024)
    try:
        _update(model, 1)
        bounded(lambda: client.update_weights(model), 60)  # a group of both, kept for the next push
        assert client.sync_stats["buckets"] > 4 and client._pusher.key[0] == (0, 1)
        survivor, victim = 0, 1
        old = copy.deepcopy(model)
        _update(model, 2)
        version = client.policy_version + 1
        prompt = SEQUENCES[0]
        window: dict = {}

        def requests_then_kill() -> None:
            window["generation"] = client._submit(survivor, "generate_ids", [prompt], GREEDY)
            window["scores"] = client._submit(survivor, "score", SEQUENCES)  # its weights in the window
            os.kill(client.pids()[victim], signal.SIGKILL)

        host_push = LocalEngineClient._push

        def later_push(self, *args):  # the fallback lands a second after the push was given up: a wide window
            time.sleep(1.0)
            return host_push(self, *args)

        # after the header and two buckets went out: the survivor is loading this push
        after_senders_broadcast(monkeypatch, 4, requests_then_kill)
        monkeypatch.setattr(LocalEngineClient, "_push", later_push)
        bounded(lambda: client.update_weights(model), 30)
        monkeypatch.undo()
        assert client.live() == [survivor] and client.policy_version == version
        assert client.sync_stats["put_s"] > 0 and "buckets" not in client.sync_stats  # the fallback, host path
        scores = client._result(window["scores"], timeout=60)
        mixed = scores not in (sequence_logprobs(old, SEQUENCES), sequence_logprobs(model, SEQUENCES))
        print(f"survivor's weights between the given-up push and its fallback: {'mixed' if mixed else 'whole'}")
        generation = client._result(window["generation"], timeout=60)[0]
        assert generation.policy_version == version, "generated before the fallback landed, with its old version"
        assert _like_the_trainers(generation, model, prompt), "not generated with the trainer's new weights"
        scores_equal_the_trainers(client, model)
        # The given-up group is gone from the survivor at once (gloo's worker threads with it, and the bucket its
        # pending receive held), not at the group's 120-s timeout: the driver let go of its end, which closed it.
        assert bounded(lambda: _until(lambda: _gloo_workers(client.pids()[survivor]) == 0), 10)
    finally:
        client.close()


def _gloo_workers(pid: int) -> int:
    """Worker threads of torch.distributed gloo groups in process ``pid`` (by their names, in /proc)."""
    names = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # ended meanwhile
            pass
    return names.count("pt_gloo_runloop")


def _until(condition) -> bool:
    while not condition():
        time.sleep(0.05)
    return True


def _torn(engine: HFEngine, model) -> None:
    """A load into ``engine`` that raises halfway: the first tensor copied, the second of the wrong shape."""
    state = model.state_dict()
    first, second = list(state)[:2]
    with pytest.raises(RuntimeError):
        engine.load_weights({first: state[first], second: torch.zeros(3)}, version=7)
    assert engine.policy_version == 0


def test_an_engine_left_half_loaded_holds_its_requests_until_a_complete_load(tokenizer):
    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    engine = HFEngine(copy.deepcopy(model), tokenizer, NO_WAIT, seed=0)
    try:
        _update(model, 3)
        _torn(engine, model)
        held = engine.submit(SEQUENCES[1], GREEDY)
        time.sleep(0.5)
        assert not held.done()  # not generated with the mixed weights
        engine.load_weights(model.state_dict(), version=1)  # complete: the held request is served with it
        generation = held.result(timeout=60)
        assert generation.policy_version == 1 and _like_the_trainers(generation, model, SEQUENCES[1])
    finally:
        engine.close()


def test_held_requests_fail_when_no_complete_load_follows_and_the_engine_serves_again_after_one(tokenizer):
    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    engine = HFEngine(copy.deepcopy(model), tokenizer, NO_WAIT, seed=0)
    try:
        engine.hold_s = 1.0
        _update(model, 4)
        _torn(engine, model)
        held = engine.submit(SEQUENCES[1], GREEDY)
        with pytest.raises(WeightsIncomplete, match="part loaded"):
            held.result(timeout=30)
        started = time.monotonic()
        with pytest.raises(WeightsIncomplete):  # past the hold, a new request fails at once
            engine.generate_ids([SEQUENCES[0]], GREEDY)
        assert time.monotonic() - started < 5
        engine.load_weights(model.state_dict(), version=2)
        generation = engine.generate_ids([SEQUENCES[1]], GREEDY)[0]
        assert generation.policy_version == 2 and _like_the_trainers(generation, model, SEQUENCES[1])
    finally:
        engine.close()
