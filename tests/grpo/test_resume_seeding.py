"""A run resumed before its first checkpoint restarts from step 0 exactly as a new run: grpo seeds the
random generators on resume too (a checkpoint, when there is one, then restores its own states)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_checkpoint import make_ctx  # noqa: E402

from seal_platform_plugins.grpo import plugin  # noqa: E402


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


@pytest.mark.parametrize("resumed", [False, True])
def test_start_run_seeds_new_and_resumed_runs_alike(tmp_path, tiny_model_dir, resumed):
    random.seed(12345)
    np.random.seed(12345)
    torch.manual_seed(12345)
    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=resumed)
    try:
        got = _draws()
    finally:
        plugin.end_run(ctx=ctx, status="completed")
    new = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=new, resumed=False)
    try:
        expected = _draws()
    finally:
        plugin.end_run(ctx=new, status="completed")
    assert got == expected
