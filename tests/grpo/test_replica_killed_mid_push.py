"""A replica killed in the middle of a collective weight push (three local hf replicas on the CPU, gloo): the
push is given up at once and reaches the live replicas through the host path (the shared-memory file), well
within the group's timeout (``REPLICA_GROUP_TIMEOUT_S``, 120 s, which gloo alone would wait: its abort and
shutdown do not end a pending operation or rendezvous), the live replicas' log-probs then equal the trainer's
bit for bit, and the next push forms a new group with them. The driver kills the replica at a chosen point of
the push: as the driver joins the group (every replica already asked to receive), and once the push's header
has gone out to an existing group (before the first bucket)."""

from __future__ import annotations

import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

# Not one xdist group (though the tests share the replicas of ``trio``, below): xdist hands groups out before
# single tests, and the rendezvous this file's first test abandons (its thread ends at the group's timeout, see
# SyncGroup) would then be running when bfcl's fork tests come to the same worker; they need a process with no
# other thread (tests/bfcl/test_fork_verify.py names the thread it finds). Spread test by test, in collection
# order, these run after them.

from seal_platform_libs.policy.engines.local import start_local_replicas  # noqa: E402
from seal_platform_libs.policy.engines.settings import EngineSettings  # noqa: E402
from seal_platform_libs.policy.testing import tiny_llama  # noqa: E402
from seal_platform_libs.policy.weight_sync import SyncGroup  # noqa: E402
from tests.grpo.checks import after_senders_broadcast, bounded, scores_equal_the_trainers  # noqa: E402

BOUND_S = 30.0  # the push with a replica killed in it: seconds, not the group's 120 s timeout


@pytest.fixture(scope="module")
def trio(tokenizer):
    """Three hf replicas on the CPU pushing over gloo in buckets of 64 KiB (about 7 per push); module-scoped:
    the tests run in file order, each killing one replica."""
    model = tiny_llama(tokenizer, hidden_size=64, intermediate_size=128, max_position_embeddings=256)
    client = start_local_replicas("hf", model, tokenizer, EngineSettings(), [None, None, None], seed=0,
                                  weight_sync="collective", bucket_bytes=64 * 1024)
    yield client, model
    client.close()


def _update(model, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every weight moves
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)


def _timed(fn, bound_s: float) -> float:
    """Seconds ``fn()`` took; fails the test (instead of hanging it) past ``bound_s``."""
    started = time.monotonic()
    bounded(fn, bound_s)
    return time.monotonic() - started


def _killed_push(client, model, victim: int, seed: int) -> None:
    """One update whose push has ``victim`` killed in it (by the patched method): done within the bound,
    through the host path, the live replicas holding the trainer's weights."""
    version = client.policy_version + 1
    survivors = [i for i in client.live() if i != victim]
    _update(model, seed)
    seconds = _timed(lambda: client.update_weights(model), BOUND_S)
    print(f"push with replica {victim} killed in it: {seconds:.2f} s")
    assert client.live() == survivors and client.policy_version == version
    assert client.sync_stats["put_s"] > 0 and "buckets" not in client.sync_stats  # the host path's push
    scores_equal_the_trainers(client, model)


def _next_push_forms_a_group_of_the_live(client, model, seed: int) -> None:
    live = client.live()
    _update(model, seed)
    seconds = _timed(lambda: client.update_weights(model), 60)
    print(f"next push, over a new group of {live}: {seconds:.2f} s")
    assert client.sync_stats["buckets"] > 1 and client.sync_stats["put_s"] == 0.0  # over the sync group
    assert client._pusher.key[0] == tuple(live)
    scores_equal_the_trainers(client, model)


def test_a_replica_killed_as_the_group_forms_holds_the_push_seconds_not_the_timeout(trio, monkeypatch):
    client, model = trio
    victim = 2
    join = SyncGroup.__init__

    def killing_join(self, *args, **kwargs):
        if kwargs.get("host_store"):  # the driver joining, each replica asked to receive already
            os.kill(client.pids()[victim], signal.SIGKILL)
        join(self, *args, **kwargs)

    monkeypatch.setattr(SyncGroup, "__init__", killing_join)
    client._pusher.close()  # the start-up push formed a group: dropped, so that this push forms one
    assert client._pusher.key is None and client.live() == [0, 1, 2]
    _killed_push(client, model, victim, seed=1)
    monkeypatch.undo()
    _next_push_forms_a_group_of_the_live(client, model, seed=2)


def test_a_replica_killed_between_buckets_holds_the_push_seconds_not_the_timeout(trio, monkeypatch):
    client, model = trio
    if client._pusher.key is None:  # alone: a group of the live ones first
        _next_push_forms_a_group_of_the_live(client, model, seed=3)
    victim = client.live()[-1]
    # killed once the header's size and bytes went out, no bucket yet
    sent = after_senders_broadcast(monkeypatch, 2, lambda: os.kill(client.pids()[victim], signal.SIGKILL))
    _killed_push(client, model, victim, seed=4)
    monkeypatch.undo()
    assert len(sent) >= 2  # killed in the push, over the group kept from the pushes before
    _next_push_forms_a_group_of_the_live(client, model, seed=5)
