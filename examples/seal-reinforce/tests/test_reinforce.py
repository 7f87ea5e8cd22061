"""The reinforce example: REINFORCE with a baseline on the policy runtime (docs/write-an-optimizer.md).

The update's direction on a tiny random model (a sampled reply below the baseline gets less likely, one above it
more likely), and a real run: the recipe of this folder on smarthome with the embedded SmolLM2-135M-Instruct,
one step, whose update changes the weights the run checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from seal_platform.engine import TrainableEngine  # noqa: E402
from seal_platform.types import Message, Trajectory  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipe.yaml"


@pytest.fixture(scope="module")
def tokenizer():
    """The embedded model's tokenizer (the tiny models' vocabulary)."""
    from seal_platform_libs.policy.loading import load_tokenizer

    return load_tokenizer()


def _trajectory(tokenizer, reward: float) -> Trajectory:
    reply = tokenizer.encode("turn_on(device='lamp')", add_special_tokens=False)
    messages = [Message(role="user", content="Turn on the lamp."),
                Message(role="assistant", content=tokenizer.decode(reply), token_ids=reply, trainable=True)]
    return Trajectory(task_id="t", category="c", group="g", sample=0, messages=messages, reward=reward)


@pytest.mark.parametrize("reward,direction", [(0.0, -1), (1.0, 1)])
def test_a_reply_below_the_baseline_gets_less_likely_and_one_above_more(tokenizer, reward, direction):
    from seal_reinforce.learner import Reinforce
    from seal_reinforce.settings import ReinforceSettings

    from seal_platform_libs.policy.testing import tiny_llama

    model = tiny_llama(tokenizer)
    learner = Reinforce(model, tokenizer, ReinforceSettings(lr=1e-3, baseline_init=0.5))
    trajectory = _trajectory(tokenizer, reward)
    with torch.no_grad():
        before = float(learner.sequence_logprobs(trajectory)[0])
    metrics = learner.step([trajectory], {})
    with torch.no_grad():
        after = float(learner.sequence_logprobs(trajectory)[0])
    assert metrics["updates"] == 1.0 and learner.updates == 1
    assert (after - before) * direction > 0, (before, after)
    assert learner.baseline == pytest.approx(0.9 * 0.5 + 0.1 * reward)  # the running mean moved toward R


def test_a_reply_at_the_baseline_changes_nothing(tokenizer):
    from seal_reinforce.learner import Reinforce
    from seal_reinforce.settings import ReinforceSettings

    from seal_platform_libs.policy.testing import tiny_llama

    learner = Reinforce(tiny_llama(tokenizer), tokenizer, ReinforceSettings(baseline_init=1.0))
    assert learner.step([_trajectory(tokenizer, 1.0)], {})["updates"] == 0.0 and learner.updates == 0


def test_the_runtime_engines_are_trainable_engines(tokenizer):
    from seal_platform_libs.policy.engines.hf import HFEngine
    from seal_platform_libs.policy.engines.settings import HFEngineSettings
    from seal_platform_libs.policy.testing import tiny_llama

    model = tiny_llama(tokenizer)
    engine = HFEngine(model, tokenizer, HFEngineSettings(), seed=0)
    try:
        assert isinstance(engine, TrainableEngine) and engine.shares_model(model)
    finally:
        engine.close()


def test_the_recipe_trains_the_embedded_model_on_smarthome(tmp_path):
    from seal_platform.loop import Runner
    from seal_platform.planning import plan_recipe
    from seal_platform.store import RunStore
    from seal_platform_libs.policy.loading import PolicySettings, load_policy

    overrides = [f"runs_dir={tmp_path}", "training.steps=1", "training.tasks_per_step=1", "training.group_size=2",
                 "training.checkpoint_every=1", "rollout.workers=2", "rollout.max_new_tokens=16",
                 "rollout.dynamic_sampling.enabled=false", "evaluation.every=0", "evaluation.before_training=false",
                 "settings.smarthome.n_eval=2", "settings.reinforce.train_layers=1", "settings.reinforce.lr=1e-4",
                 "settings.policy.device=cpu"]
    plan = plan_recipe(RECIPE, overrides)
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    runner.run()
    assert store.get_run(runner.run_id).status == "completed"
    [row] = store.steps(runner.run_id)
    assert row.metrics["updates"] == 1.0 and row.metrics["trained_tokens"] > 0
    [saved] = list(tmp_path.rglob("reinforce.pt"))
    state = torch.load(saved, map_location="cpu", weights_only=False)
    assert state["updates"] == 1
    model, _ = load_policy(PolicySettings(device="cpu"))  # the weights the run started from
    before = dict(model.named_parameters())
    changed = [name for name, value in state["model"].items()
               if name in before and not torch.equal(value, before[name].detach())]
    layers = model.config.num_hidden_layers
    assert changed and all(f"layers.{layers - 1}." in name or name.startswith("model.norm") for name in changed)
