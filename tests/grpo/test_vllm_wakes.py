"""The vLLM engine's sleep and its two wakes (engines/vllm_sleep.py) in the hybrid-engine memory sequence: the
weights wake before the push, the KV cache only at the sequence's end, after the trainer emptied its cache.

vLLM itself needs a GPU for sleep mode, so vLLM's ``LLM`` is stood in for by a recorder of the calls its
documented API receives (``sleep(level=...)``, ``wake_up(tags=...)``); the sleep logic is the engine's own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seal_platform_libs.policy.engines.vllm_sleep import VLLMSleep
from seal_platform_libs.policy.memory_phases import to_rollout_mode, to_trainer_mode


class RecordedLLM:
    """vLLM's ``LLM`` sleep API, recording each call into ``trace``."""

    def __init__(self, trace: list[str]):
        self.trace = trace

    def sleep(self, level: int = 1) -> None:
        self.trace.append(f"llm.sleep({level})")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.trace.append(f"llm.wake_up({','.join(tags) if tags else 'all'})")


class SleepingEngine(VLLMSleep):
    """The engine's sleep mixin with what it reads from :class:`~.vllm.VLLMEngine` (on CUDA, sleep mode on);
    ``push`` does what a weight push does around its load (wake_for_weights, load, weights_loaded)."""

    def __init__(self, trace: list[str], level: int):
        self.trace = trace
        self.llm = RecordedLLM(trace)
        self.settings = SimpleNamespace(sleep_mode=True, sleep_level=level)
        self._lora = None
        self._on_cuda = True

    def call_in_worker(self, fn):
        return fn()

    def push(self) -> None:
        self.wake_for_weights()
        self.trace.append("load")
        self.weights_loaded()


class TrainerMemory:
    def __init__(self, trace: list[str]):
        self.trace = trace

    def empty_cache(self) -> None:
        self.trace.append("trainer.empty_cache")

    def offload(self) -> None:
        self.trace.append("trainer.offload")

    def onload(self) -> None:
        self.trace.append("trainer.onload")


@pytest.mark.parametrize("level", [1, 2])
def test_memory_sequence_wakes_weights_before_the_push_and_the_kv_cache_last(level):
    trace: list[str] = []
    engine, trainer = SleepingEngine(trace, level), TrainerMemory(trace)
    to_trainer_mode(engine, trainer)
    to_rollout_mode(engine, trainer, engine.push, offload=True)
    assert trace == [f"llm.sleep({level})", "trainer.empty_cache", "trainer.onload",
                     "trainer.empty_cache", "llm.wake_up(weights)", "load", "trainer.offload",
                     "trainer.empty_cache", "llm.wake_up(kv_cache)"]
    assert not engine._weights_dropped and not engine._asleep

    # the next step: the same again (nothing left deferred from the last one)
    trace.clear()
    to_trainer_mode(engine, trainer)
    to_rollout_mode(engine, trainer, engine.push, offload=False)
    assert trace == [f"llm.sleep({level})", "trainer.empty_cache", "trainer.onload", "trainer.empty_cache",
                     "llm.wake_up(weights)", "load", "trainer.empty_cache", "llm.wake_up(kv_cache)"]


@pytest.mark.parametrize("level", [1, 2])
def test_a_push_outside_the_sequence_wakes_weights_then_the_kv_cache_itself(level):
    trace: list[str] = []
    engine = SleepingEngine(trace, level)
    engine.sleep()
    assert engine._weights_dropped == (level == 2)
    engine.push()
    assert trace == [f"llm.sleep({level})", "llm.wake_up(weights)", "load", "llm.wake_up(kv_cache)"]
    trace.clear()
    engine.push()  # awake: a push wakes nothing
    assert trace == ["load"]


def test_an_awake_engine_in_the_sequence_wakes_nothing():
    trace: list[str] = []
    engine, trainer = SleepingEngine(trace, 2), TrainerMemory(trace)
    to_rollout_mode(engine, trainer, engine.push, offload=False)
    assert [t for t in trace if t.startswith("llm.")] == []
