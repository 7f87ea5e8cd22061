"""Weight sync between processes on one GPU (CUDA IPC, ``seal_platform_libs/policy/ipc_sync.py``) and the choice of a
sync group's backend from its members' GPUs.

The backend choice, the ``auto`` rendezvous on the CPU and the error for an invisible GPU run anywhere; the
CUDA IPC push needs a GPU (skipped without one): a sender process and a receiver process, both on cuda:0,
push a tiny Llama in many buckets twice (weights changed in between), and the receiver's parameters and
log-probs must equal the sender's bit for bit after each push."""

from __future__ import annotations

import pickle
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from seal_platform_libs.policy.ipc_sync import IPCSyncError, choose_backend, local_index  # noqa: E402
from seal_platform_libs.policy.weight_sync import SyncGroup, load_into, push, receive, sync_tensors  # noqa: E402
from seal_platform_plugins.grpo.distributed import free_port  # noqa: E402
from tests.grpo.processes import collect_rows  # noqa: E402

BUCKET_BYTES = 24 * 1024  # small: the tiny model travels in many buckets
TIMEOUT_S = 180.0
VOCAB = 256


def test_choose_backend_ipc_when_colocated_nccl_when_distinct_gloo_otherwise():
    a, b, c = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"
    assert choose_backend([a, a])[0] == "ipc"
    assert choose_backend([a, a, a, a])[0] == "ipc"  # seal-gpu4-like: every replica on the sender's GPU
    assert choose_backend([a, b])[0] == "nccl"
    assert choose_backend([a, b, c])[0] == "nccl"  # seal-gpu8-like: a GPU each
    assert choose_backend([None, None])[0] == "gloo"
    assert choose_backend([a, None])[0] == "gloo"  # a receiver in host memory
    assert choose_backend([None, a])[0] == "gloo"
    backend, why = choose_backend([a, a, b])  # mixed: one receiver colocated, one elsewhere
    assert backend == "gloo" and "members [0, 1] share GPU GPU-aaaa" in why
    backend, why = choose_backend([a, b, b])  # two receivers share a GPU the sender is not on
    assert backend == "gloo" and "members [1, 2] share GPU GPU-bbbb" in why
    with pytest.raises(ValueError):
        choose_backend([a])


def test_a_receiver_that_cannot_see_the_senders_gpu_gets_a_clear_error():
    with pytest.raises(IPCSyncError, match="not visible in this receiving process"):
        local_index("GPU-00000000-0000-0000-0000-000000000000")


def test_an_auto_group_on_the_cpu_agrees_on_gloo_and_pushes():
    """Both members publish their device through the store and pick the same backend; a push then works."""
    port = free_port()
    sent = {"a": torch.arange(10, dtype=torch.float32), "b": torch.ones(3, 4, dtype=torch.bfloat16)}
    got: dict[str, object] = {}

    def receiver() -> None:
        group = SyncGroup("127.0.0.1", port, 1, 2, backend="auto", device="cpu", timeout_s=60)
        got["backend"] = group.backend
        got["version"], got["tensors"] = receive(group, lambda incoming: {n: t.clone() for n, t in incoming})
        group.close()

    thread = threading.Thread(target=receiver, daemon=True)
    thread.start()
    group = SyncGroup("127.0.0.1", port, 0, 2, host_store=True, backend="auto", device="cpu", timeout_s=60)
    push(sent, group, version=3, bucket_bytes=16)
    thread.join(timeout=60)
    assert group.backend == "gloo" and got["backend"] == "gloo" and group.device.type == "cpu"
    group.close()
    assert got["version"] == 3
    tensors = got["tensors"]
    assert isinstance(tensors, dict) and set(tensors) == set(sent)
    assert all(torch.equal(tensors[n], sent[n]) for n in sent)


# --- CUDA IPC, two processes on cuda:0 -------------------------------------------------------------------------


def _model(seed: int):
    from seal_platform_libs.policy.testing import tiny_llama

    return tiny_llama(vocab_size=VOCAB, seed=seed, hidden_size=64, intermediate_size=128,
                      max_position_embeddings=128).to("cuda:0")


@torch.no_grad()
def _logprobs(model):
    ids = torch.randint(0, VOCAB, (3, 17), generator=torch.Generator().manual_seed(7)).to("cuda:0")
    out = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
    return out[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1).cpu()


# Rows cross the queue as pickled bytes (tests/grpo/processes.py says why).


def _state(model):
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _sender(port: int, pushes: int, results) -> None:
    model = _model(seed=0)
    group = SyncGroup("127.0.0.1", port, 0, 2, host_store=True, backend="auto", device="cuda:0",
                      timeout_s=TIMEOUT_S)
    for k in range(pushes):
        if k:  # the weights change between pushes: a receiver left with the first ones would show
            torch.manual_seed(100 + k)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
        named, ties = sync_tensors(model)
        stats = push(named, group, version=k, ties=ties, bucket_bytes=BUCKET_BYTES)
        results.put(pickle.dumps(("sender", k, group.backend, stats["buckets"], _state(model), _logprobs(model))))
    group.close()


def _receiver(port: int, pushes: int, results) -> None:
    model = _model(seed=1)  # different weights until the first push lands
    group = SyncGroup("127.0.0.1", port, 1, 2, backend="auto", device="cuda:0", timeout_s=TIMEOUT_S)
    for k in range(pushes):
        version, _ = receive(group, lambda incoming: load_into(model, incoming))
        results.put(pickle.dumps(("receiver", k, group.backend, version, _state(model), _logprobs(model))))
    group.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU")
def test_colocated_processes_sync_over_cuda_ipc_exactly():
    pushes, port = 2, free_port()
    rows = collect_rows([(_sender, (port, pushes)), (_receiver, (port, pushes))], 2 * pushes, TIMEOUT_S,
                        clean_exit=True)
    previous = None
    for k in range(pushes):
        backend, buckets, want_state, want_lp = rows["sender", k]
        got_backend, version, got_state, got_lp = rows["receiver", k]
        assert backend == got_backend == "ipc"  # both on cuda:0: the members agreed on CUDA IPC
        assert buckets > 3 and version == k  # really bucketed, and the push's version arrived
        assert set(got_state) == set(want_state)
        for name in want_state:
            assert torch.equal(got_state[name], want_state[name]), f"push {k}: {name} differs"
        assert torch.equal(got_lp, want_lp), f"push {k}: log-probs differ by {(got_lp - want_lp).abs().max():.3g}"
        if previous is not None:  # the weights changed: a stale receiver would have failed above
            assert (want_lp - previous).abs().max() > 1e-3
        previous = want_lp


# --- CUDA IPC, one sender and two receivers: nothing left behind on the sender -------------------------------

MIB = 1024 * 1024
PUSH_NUMEL = 1024 * 1024  # 4 MiB of float32 per tensor, 4 tensors: 16 MiB a push, in 4 buckets of 4 MiB


def _fanout_sender(port: int, pushes: int, results) -> None:
    torch.cuda.set_device(0)
    group = SyncGroup("127.0.0.1", port, 0, 3, host_store=True, backend="auto", device="cuda:0", timeout_s=TIMEOUT_S)
    named = {f"w{i}": torch.zeros(PUSH_NUMEL, device="cuda:0") for i in range(4)}
    for k in range(pushes):
        for i, t in enumerate(named.values()):
            t.fill_(float(10 * k + i))
        stats = push(named, group, version=k, bucket_bytes=4 * MIB)
        torch.cuda.synchronize()
        results.put(pickle.dumps(("sender", k, group.backend, stats["buckets"], torch.cuda.memory_allocated())))
    group.close()


def _fanout_receiver(rank: int, port: int, pushes: int, results) -> None:
    torch.cuda.set_device(0)
    group = SyncGroup("127.0.0.1", port, rank, 3, backend="auto", device="cuda:0", timeout_s=TIMEOUT_S)
    dst = {f"w{i}": torch.full((PUSH_NUMEL,), -1.0, device="cuda:0") for i in range(4)}

    def sink(incoming):
        for name, t in incoming:
            dst[name].copy_(t)

    for k in range(pushes):
        version, _ = receive(group, sink)
        values = [(float(t.min()), float(t.max())) for t in dst.values()]
        results.put(pickle.dumps((f"receiver{rank}", k, group.backend, version, values)))
    group.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU")
def test_pushes_to_two_colocated_receivers_arrive_and_leave_no_memory_on_the_sender():
    """Each receiver reads its own share of every bucket (torch counts a share's readers: one share read by two
    receivers left its counter at -1, read as unsigned, and every bucket stayed allocated on the sender:
    +1 GiB per GiB pushed on an H200 before the fix). Every push arrives whole at both receivers, and the
    sender's allocated memory after the last push is what it was after the first."""
    pushes, port = 6, free_port()
    targets = [(_fanout_sender, (port, pushes)), (_fanout_receiver, (1, port, pushes)),
               (_fanout_receiver, (2, port, pushes))]
    rows = collect_rows(targets, 3 * pushes, TIMEOUT_S, clean_exit=True)
    for k in range(pushes):
        backend, buckets, _ = rows["sender", k]
        assert backend == "ipc" and buckets == 4
        for rank in (1, 2):
            got_backend, version, values = rows[f"receiver{rank}", k]
            assert got_backend == "ipc" and version == k
            assert values == [(float(10 * k + i), float(10 * k + i)) for i in range(4)], f"push {k}, receiver {rank}"
    first, last = rows["sender", 0][2], rows["sender", pushes - 1][2]
    grew = (last - first) / MIB
    assert last - first <= 4 * MIB, f"the sender's allocated memory grew by {grew:.0f} MiB over {pushes - 1} pushes"
