"""grpo.overlong_filter (DAPO's overlong filtering): an episode cut off by a token limit gets no loss, while its
reward still counts in its group's advantages."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from seal_platform.engine import TrainableEngine
from seal_platform.types import Generation, Message, Trajectory  # noqa: E402
from seal_platform_plugins.grpo.run import GRPORun  # noqa: E402
from seal_platform_plugins.grpo.samples import build_samples, overlong  # noqa: E402
from seal_platform_plugins.grpo.settings import GRPOSettings  # noqa: E402


def _episode(tokenizer, j: int, reward: float, *, cut_off: bool = False, finish: str = "completed") -> Trajectory:
    ids = tokenizer.encode(f"call number {j}", add_special_tokens=False)
    gen = Generation(text=tokenizer.decode(ids), token_ids=ids, logprobs=[-1.0] * len(ids),
                     finish_reason="length" if cut_off else "stop")
    messages = [Message(role="system", content="Use the tools."), Message(role="user", content=f"Task {j}"),
                Message.from_generation(gen)]
    return Trajectory(task_id="t", category="c", group="0:t", sample=j, messages=messages, reward=reward,
                      finish=finish)


def test_a_generation_stopped_at_its_token_limit_marks_the_message_and_the_episode():
    assert Message.from_generation(Generation(text="x", token_ids=[1], logprobs=[0.0], finish_reason="length")).cut_off
    assert not Message.from_generation(Generation(text="x", token_ids=[1], logprobs=[0.0])).cut_off


def test_overlong_episodes_get_no_sample_but_count_in_their_group(tokenizer):
    trajs = [_episode(tokenizer, 0, 1.0), _episode(tokenizer, 1, 0.0, cut_off=True),
             _episode(tokenizer, 2, 0.0, finish="context_limit"), _episode(tokenizer, 3, 0.0)]
    assert [overlong(t) for t in trajs] == [False, True, True, False]
    everything = build_samples(tokenizer, trajs, settings=GRPOSettings())
    filtered = build_samples(tokenizer, trajs, settings=GRPOSettings(overlong_filter=True))
    assert [x.id for x in everything] == [t.id for t in trajs]
    assert [x.id for x in filtered] == [trajs[0].id, trajs[3].id]
    # The advantages of the kept ones are those of the whole group (1 reward among 4), not of the 2 left.
    assert [x.advantage for x in filtered] == [everything[0].advantage, everything[3].advantage]
    assert filtered[0].advantage > 0 > filtered[1].advantage


def test_the_step_reports_how_many_were_masked_and_trains_on_the_rest(tokenizer, new_tiny_model):
    trajs = [_episode(tokenizer, 0, 1.0), _episode(tokenizer, 1, 0.0, cut_off=True), _episode(tokenizer, 2, 0.0)]

    class Engine(TrainableEngine):
        def update_weights(self, model, version=None):
            pass

    run = GRPORun(new_tiny_model(), tokenizer, GRPOSettings(lr=1e-3, overlong_filter=True), apatch=None)
    metrics = run.optimize(Engine(), trajs, {})
    assert metrics["overlong_masked"] == 1.0 and metrics["updates"] == 1
    off = GRPORun(new_tiny_model(), tokenizer, GRPOSettings(lr=1e-3), apatch=None).optimize(Engine(), trajs, {})
    assert "overlong_masked" not in off
    assert (metrics["trained_sequences"], off["trained_sequences"]) == (2.0, 3.0)
    cut = build_samples(tokenizer, [trajs[1]])[0].n_tokens
    assert cut > 0 and metrics["generated_tokens"] == off["generated_tokens"] - cut
