"""A second local judge model, built through the platform's own registered engines (the grpo plugin's ``hf``
engine here) in a context of its own: its own model path and engine settings, never the run's policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from judge_helpers import heuristic_labels, make_ctx, trajectory
from test_llm_judge import judge_labels, run_diagnose

from seal_platform.errors import ConfigError
from seal_platform.plugins import make_plugin_manager
from seal_platform_plugins.diagnosis_llm import plugin
from seal_platform_plugins.diagnosis_llm.backends import local_context
from seal_platform_plugins.diagnosis_llm.settings import LocalJudgeSettings

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer, saved as a Hugging Face directory."""
    from transformers import AutoTokenizer

    from seal_platform_libs.policy.loading import ensure_converted
    from seal_platform_libs.policy.testing import save_tiny_llama

    try:
        source = ensure_converted()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-judge"), AutoTokenizer.from_pretrained(source),
                           hidden_size=64, intermediate_size=128)


def run_settings() -> dict:
    """Every loaded plugin's settings sections with their defaults, as a run validates them."""
    return {name: model() for name, model in make_plugin_manager().settings_models().items()}


def test_the_judge_gets_its_own_model_and_engine_settings(tmp_path, tiny_judge_dir):
    local = {
        "engine": "hf",
        "settings": {"policy": {"model": str(tiny_judge_dir)}, "engine": {"hf": {"max_batch_size": 2}}},
    }
    ctx, events = make_ctx(tmp_path, None, backend="local", max_new_tokens=16, local=local)
    ctx.settings = {**run_settings(), "diagnosis_llm": ctx.settings["diagnosis_llm"]}
    run_policy = ctx.settings["policy"]
    traj = trajectory(failing_turns=(0, 1, 2))
    heuristic = heuristic_labels(
        traj,
        {
            0: ("state_mismatch", "state_mismatch"),
            1: ("response_mismatch", "response_mismatch"),
            2: ("state_mismatch", "state_mismatch"),
        },
    )
    try:
        labels = judge_labels(run_diagnose(ctx, [traj], heuristic))
        backend = ctx.shared[plugin.BACKEND_KEY]
        engine = backend.engine
        assert backend.identity.startswith("local:hf:") and backend.owned
        # The judge's engine serves the judge's model with the judge's settings; the run's are untouched.
        assert Path(engine.model.name_or_path) == tiny_judge_dir and engine.settings.max_batch_size == 2
        assert ctx.settings["policy"] is run_policy and "grpo.policy" not in ctx.shared
        assert engine.stats["requests"] >= 3
    finally:
        plugin.end_run(ctx=ctx, status="completed")
    assert plugin.BACKEND_KEY not in ctx.shared and engine._closed
    # A random model answers noise: every turn is either judged validly or falls back, recorded either way.
    fallbacks = events.of("diagnosis_llm.fallback")
    assert len(labels) == 3 and sum(lab.confidence is None for lab in labels) == len(fallbacks)
    assert all(len(f["answers"]) == 2 or "failed" in f["reason"] for f in fallbacks)


def test_judge_settings_sections_are_validated_by_their_owners(tmp_path):
    ctx, _ = make_ctx(tmp_path, None)
    ctx.settings = {**run_settings(), "diagnosis_llm": ctx.settings["diagnosis_llm"]}
    with pytest.raises(ConfigError, match="no loaded plugin owns a settings section 'polcy'"):
        local_context(ctx, LocalJudgeSettings(settings={"polcy": {"model": "x"}}))
    with pytest.raises(ConfigError, match="local.settings.engine: hf.max_batch: Extra inputs are not permitted"):
        local_context(ctx, LocalJudgeSettings(settings={"engine": {"hf": {"max_batch": 2}}}))
    run_kv_cache = ctx.settings["engine"].vllm.cpu_kv_cache_gib
    assert run_kv_cache != 1
    child = local_context(
        ctx, LocalJudgeSettings(engine="vllm", settings={"engine": {"vllm": {"cpu_kv_cache_gib": 1}}})
    )
    assert child.config.rollout.engine == "vllm" and child.settings["engine"].vllm.cpu_kv_cache_gib == 1
    # The judge's own engine settings never leak into the run's.
    assert ctx.settings["engine"].vllm.cpu_kv_cache_gib == run_kv_cache and child.shared == {}
