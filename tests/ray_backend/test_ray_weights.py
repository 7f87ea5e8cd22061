"""Weights through the object store: exact round trips (bfloat16 too) and change tracking by in-place
version counters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ray")

from seal_platform_libs.policy.engines.shipping import ChangeTracker, pack, unpack  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_pack_unpack_is_exact(dtype):
    named = {"a": torch.randn(3, 5).to(dtype), "b": torch.arange(7, dtype=torch.int64)}
    back = unpack(pack(named))
    for name, tensor in named.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor)


def test_tracker_reports_only_tensors_changed_in_place():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    tracker = ChangeTracker()
    state = model.state_dict()
    assert set(tracker.changed(state)) == set(state)  # first push: everything
    tracker.mark(state)
    assert tracker.changed(model.state_dict()) == {}
    with torch.no_grad():
        model[1].bias.add_(1.0)
    assert set(tracker.changed(model.state_dict())) == {"1.bias"}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    assert set(tracker.changed(model.state_dict())) == set(state)  # an optimizer step moves every parameter


def test_a_tied_tensor_is_sent_once():
    embed = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embed.weight  # tie_word_embeddings
    model = torch.nn.ModuleDict({"embed": embed, "head": head, "norm": torch.nn.LayerNorm(4)})
    state = model.state_dict()
    assert "embed.weight" in state and "head.weight" in state
    assert set(ChangeTracker().changed(state)) == {"embed.weight", "norm.weight", "norm.bias"}
