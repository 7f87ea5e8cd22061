"""Checkpoint and resume through the plugin's hooks on a tiny model: a resumed run's next step has exactly
the loss of the uninterrupted run's, and model, optimizer, RNG and A-Patch states come back."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_trainer import make_trajectories  # noqa: E402

from seal_platform.capability import CapabilityState  # noqa: E402
from seal_platform.config import RunConfig  # noqa: E402
from seal_platform.context import RunContext  # noqa: E402
from seal_platform.engine import TrainableEngine
from seal_platform.rollouts import NOTHING_IN_FLIGHT  # noqa: E402
from seal_platform.types import TurnLabel  # noqa: E402
from seal_platform_libs.policy.loading import PolicySettings  # noqa: E402
from seal_platform_plugins.grpo import plugin  # noqa: E402
from seal_platform_plugins.grpo.settings import APatchSettings, GRPOSettings  # noqa: E402


class RecordingEngine(TrainableEngine):
    name = "recording"

    def __init__(self):
        self.pushes = 0

    def update_weights(self, model, version=None):
        self.pushes += 1


def make_ctx(tmp_path, model_dir) -> RunContext:
    config = RunConfig(environment="toy", seed=7, stages={"reweight": "grpo", "optimize": "grpo"},
                       rollout={"engine": "hf", "temperature": 1.0})
    settings = {
        "policy": PolicySettings(model=str(model_dir)),
        # lr large enough that the optimizer state matters for the next step's loss.
        "grpo": GRPOSettings(lr=1e-3, kl_coef=0.01, mini_batch_tasks=1),
        "apatch": APatchSettings(count_saturation=2),
    }
    return RunContext(config=config, run_id="r", run_dir=tmp_path, settings=settings)


def do_step(ctx, tokenizer, step: int, state: CapabilityState) -> dict:
    trajs = make_trajectories(tokenizer, seed=step)
    labels = [
        TurnLabel(trajectory_id=t.id, turn=0, label="pass" if t.success else "state_mismatch", source="t")
        for t in trajs
    ]
    state.update(step, 0, trajs, labels)
    result = plugin.reweight(ctx=ctx, trajectories=trajs, labels=labels, state=state, step=step)
    return plugin.optimize(ctx=ctx, engine=ctx.shared["engine"], trajectories=trajs,
                           weights=result.trajectory_weights, step=step, rollouts=NOTHING_IN_FLIGHT)


def test_resume_gives_the_uninterrupted_runs_next_loss(tmp_path, tiny_model_dir, tokenizer):
    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=False)
    ctx.shared["engine"] = RecordingEngine()
    state = CapabilityState()
    for step in range(2):
        do_step(ctx, tokenizer, step, state)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    meta = plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=1)
    assert meta["updates"] == 4  # 2 steps x 2 groups
    # The recorded path is relative to the checkpoint: the core renames the directory after the hook returns.
    assert meta["path"] == "grpo" and (ckpt / meta["path"] / "state.json").is_file()
    saved_state = state.model_copy(deep=True)
    rho_saved = dict(ctx.shared[plugin.APATCH].rho)
    draws = (torch.rand(3), random.random(), np.random.rand())
    expected = do_step(ctx, tokenizer, 2, state)
    plugin.end_run(ctx=ctx, status="completed")

    # A fresh process's view: new context, policy loaded from scratch, then the checkpoint.
    torch.manual_seed(123), random.seed(123), np.random.seed(123)
    resumed = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=resumed, resumed=True)
    engine = RecordingEngine()
    resumed.shared["engine"] = engine
    plugin.load_checkpoint(ctx=resumed, directory=ckpt, step=1)
    assert engine.pushes == 1  # restored weights go into the engine before the next rollouts
    assert resumed.shared[plugin.APATCH].rho == rho_saved and rho_saved
    assert resumed.shared[plugin.RUN].trainer.updates == 4
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(again[0], draws[0]) and again[1:] == draws[1:]
    got = do_step(resumed, tokenizer, 2, saved_state)
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert got["kl"] == pytest.approx(expected["kl"], abs=1e-7)


def test_loading_a_checkpoint_of_another_model_is_a_clear_error(tmp_path, tiny_model_dir, tokenizer):
    ctx = make_ctx(tmp_path, tiny_model_dir)
    plugin.start_run(ctx=ctx, resumed=False)
    with pytest.raises(FileNotFoundError, match="no grpo checkpoint"):
        plugin.load_checkpoint(ctx=ctx, directory=tmp_path / "nowhere", step=0)
    ckpt = tmp_path / "c"
    ckpt.mkdir()
    plugin.save_checkpoint(ctx=ctx, directory=ckpt, step=0)
    from safetensors.torch import save_file

    save_file({"other.weight": torch.zeros(2)}, str(ckpt / "grpo" / "model.safetensors"))
    with pytest.raises(ValueError, match="does not fit the policy"):
        plugin.load_checkpoint(ctx=ctx, directory=ckpt, step=0)
