"""A local replica stopped (SIGSTOP), not killed, in the middle of a collective weight push: it neither dies
nor answers, so gloo would hold the push for the group's timeout (120 s) and the fallback would then wait for
it without bound. The driver finds it stopped from its process state and kills it: the push is done within
seconds through the host path, the live replica's log-probs equal the trainer's bit for bit, and the next
push forms a group of the live one. Two hf replicas on the CPU, gloo, buckets of 64 KiB."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from seal_platform_libs.policy.engines.local import start_local_replicas  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402
from seal_platform_libs.policy.engines.stopped import STOPPED_S, stopped  # noqa: E402
from seal_platform_libs.policy.testing import tiny_llama  # noqa: E402
from tests.grpo.checks import after_senders_broadcast, bounded, scores_equal_the_trainers  # noqa: E402

BOUND_S = 30.0  # the push with a replica stopped in it: seconds, not the group's 120 s timeout


def _update(model, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight moves
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)


# Two replica processes start and one is stopped mid-push (~11 s of a worker): `make test-slow` runs it. What
# `make test` keeps: a replica killed as the group forms and between buckets, the push going on without it
# (tests/grpo/test_replica_killed_mid_push.py), and a push given up halfway (tests/grpo/test_half_loaded_weights.py).
@pytest.mark.slow
def test_a_replica_stopped_between_buckets_is_killed_and_the_push_goes_on_without_it(tokenizer, monkeypatch):
    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    client = start_local_replicas("hf", model, tokenizer, EngineSettings(), [None, None], seed=0,
                                  weight_sync="collective", bucket_bytes=64 * 1024)
    survivor, victim = 0, 1
    pid = client.pids()[victim]
    try:
        _update(model, 1)
        bounded(lambda: client.update_weights(model), 60)  # a group of both, kept for the next push
        assert client._pusher.key[0] == (0, 1)
        def stop() -> None:
            os.kill(pid, signal.SIGSTOP)
            assert bounded(lambda: _until(lambda: stopped(pid)), 10)

        after_senders_broadcast(monkeypatch, 3, stop)  # stopped once the header and a bucket went out
        _update(model, 2)
        version = client.policy_version + 1
        started = time.monotonic()
        bounded(lambda: client.update_weights(model), BOUND_S)
        seconds = time.monotonic() - started
        monkeypatch.undo()
        print(f"push with replica {victim} stopped in it: {seconds:.2f} s")
        assert seconds >= STOPPED_S  # it waited for the stop to last, then went on
        assert client.live() == [survivor] and client.policy_version == version
        assert client.sync_stats["put_s"] > 0 and "buckets" not in client.sync_stats  # the host path's push
        assert bounded(lambda: _until(lambda: client.replicas[victim].process.exitcode is not None), 10)
        assert client.replicas[victim].process.exitcode == -signal.SIGKILL
        scores_equal_the_trainers(client, model)
        _update(model, 3)
        bounded(lambda: client.update_weights(model), 60)
        assert client.sync_stats["buckets"] > 1 and client._pusher.key[0] == (survivor,)  # a new group
        scores_equal_the_trainers(client, model)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # stopped still, where the push did not end it
        client.close()


def _until(condition) -> bool:
    while not condition():
        time.sleep(0.02)
    return True
