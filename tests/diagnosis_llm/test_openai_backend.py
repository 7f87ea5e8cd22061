"""The OpenAI-compatible judge backend, through the real ``openai`` client, against a real HTTP server on
loopback (openai_server.py): structured output, the API key from the environment, retries with backoff,
timeouts, the concurrency limit, servers that refuse response_format, and the token budget."""

from __future__ import annotations

import json

import pytest
from judge_helpers import heuristic_labels, make_ctx, trajectory
from openai_server import OpenAIServer, Response
from pydantic import ValidationError
from test_llm_judge import judge_labels, run_diagnose

from seal_platform.capability import CapabilityState
from seal_platform.errors import ConfigError
from seal_platform_plugins.diagnosis_llm import plugin
from seal_platform_plugins.diagnosis_llm.settings import DiagnosisLlmSettings

pytest.importorskip("openai")

KEY = "sk-test-very-secret-0123456789"


def good(label: str = "argument_mismatch", confidence: float = 0.65) -> Response:
    return Response(json.dumps({"label": label, "rationale": "the folder argument differs", "confidence": confidence}))


def openai_ctx(tmp_path, server, store=None, **openai):
    options = {"base_url": server.base_url, "model": "judge-model", "api_key_env": "JUDGE_KEY", "backoff_s": 0.01,
               "max_backoff_s": 0.05, **openai}
    return make_ctx(tmp_path, None, store, backend="openai", openai=options)


def test_judging_through_an_endpoint_with_structured_output_and_the_key_from_the_environment(
    tmp_path, store, monkeypatch
):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    traj = trajectory(failing_turns=(0, 2))
    with OpenAIServer(lambda body, n: good()) as server:
        ctx, events = openai_ctx(tmp_path, server, store)
        plugin.start_run(ctx=ctx, resumed=False)
        labels = judge_labels(run_diagnose(ctx, [traj]))
        plugin.end_run(ctx=ctx, status="completed")
    assert [(lab.turn, lab.label, lab.confidence) for lab in labels] == [
        (0, "argument_mismatch", 0.65),
        (2, "argument_mismatch", 0.65),
    ]
    body = server.requests[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["max_tokens"] == 256
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["properties"]["label"]["enum"][0] == "spurious_tool_call"
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    # The key is a secret: not in the settings, the config dump, the events or anywhere in the store file.
    store.record_step("run-1", step=0, epoch=0, trajectories=[traj], labels=labels, label_weights={},
                      state=CapabilityState(),
                      interface_revision=0, metrics={}, timings={})
    dump = {"settings": {"diagnosis_llm": ctx.settings["diagnosis_llm"].model_dump(mode="json")}}  # the config dump
    store.create_run(
        "run-2", name="n", recipe="", config=dump, config_hash="h", seed=0, run_dir=str(tmp_path), plugins=[]
    )
    for kind, message, data in events.seen:
        store.add_event("run-1", kind, message, data)
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("store.sqlite*"))
    assert b"argument_mismatch" in raw and b"JUDGE_KEY" in raw  # the labels and events were written...
    assert KEY.encode() not in raw and KEY not in ctx.settings["diagnosis_llm"].model_dump_json()  # ...never the key
    assert KEY not in ctx.config.model_dump_json()


def test_transient_errors_are_retried_with_backoff(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    script = {
        1: Response(status=500, error="overloaded"),
        2: Response(status=429, error="slow down", headers={"retry-after": "0"}),
    }
    with OpenAIServer(lambda body, n: script.get(n, good())) as server:
        ctx, events = openai_ctx(tmp_path, server)
        [label] = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(1,))]))
    assert label.label == "argument_mismatch" and len(server.requests) == 3
    [retried] = events.of("diagnosis_llm.retried")
    errors = [r["error"] for r in retried["retries"]]
    assert "HTTP 500" in errors[0] and "HTTP 429" in errors[1]


def test_giving_up_after_the_retries_and_not_retrying_auth_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    traj = trajectory(failing_turns=(1,))
    heuristic = heuristic_labels(traj, {1: ("state_mismatch", "state_mismatch")})
    with OpenAIServer(lambda body, n: Response(status=503, error="down")) as server:
        ctx, events = openai_ctx(tmp_path, server, max_retries=2)
        [label] = judge_labels(run_diagnose(ctx, [traj], heuristic))
    assert len(server.requests) == 3 and label.label == "state_mismatch" and label.confidence is None
    assert "gave up after 3 attempt(s)" in events.of("diagnosis_llm.fallback")[0]["reason"]
    with OpenAIServer(lambda body, n: Response(status=401, error="bad key")) as server:
        ctx, events = openai_ctx(tmp_path, server, max_retries=5)
        judge_labels(run_diagnose(ctx, [traj], heuristic))
    assert len(server.requests) == 1 and "HTTP 401" in events.of("diagnosis_llm.fallback")[0]["reason"]


def test_a_slow_endpoint_times_out(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, n: Response(good().content, delay_s=1.0)) as server:
        ctx, events = openai_ctx(tmp_path, server, timeout_s=0.2, max_retries=1)
        assert judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(1,))])) == []
    [fallback] = events.of("diagnosis_llm.fallback")
    assert "APITimeoutError" in fallback["reason"] and "gave up after 2 attempt(s)" in fallback["reason"]


def test_concurrency_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, n: Response(good().content, delay_s=0.15)) as server:
        ctx, _ = openai_ctx(tmp_path, server, concurrency=3)
        labels = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(0, 1, 2), tag=str(i)) for i in range(3)]))
    assert len(labels) == 9 and server.max_in_flight == 3


def test_an_endpoint_that_refuses_structured_output_is_asked_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)

    def respond(body, n):
        if "response_format" in body:
            return Response(status=400, error="response_format of type json_schema is not supported by this model")
        return Response("```json\n" + good("missing_tool_call").content + "\n```")

    with OpenAIServer(respond) as server:
        ctx, events = openai_ctx(tmp_path, server, concurrency=1)
        labels = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(0, 1))]))
    assert [lab.label for lab in labels] == ["missing_tool_call"] * 2
    assert ["response_format" in body for body in server.requests] == [True, False, False]
    [note] = events.of("diagnosis_llm.backend")
    assert "refused response_format=json_schema" in events.seen[0][1]


def test_the_token_budget_counts_what_the_endpoint_reports(tmp_path, store, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, n: good()) as server:
        ctx, events = openai_ctx(tmp_path, server, store, concurrency=1)
        ctx.settings["diagnosis_llm"] = ctx.settings["diagnosis_llm"].model_copy(update={"max_tokens_per_run": 1400})
        labels = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(0, 1, 2))]))
    asked = len(server.requests)
    assert 0 < asked < 3 and len(labels) == asked
    assert store.cache_get("diagnosis_llm.usage", ["run-1"])["run-1"]["tokens"] == 120 * asked
    assert len(events.of("diagnosis_llm.fallback")) == 3 - asked


def test_a_missing_key_variable_stops_the_run_at_start_with_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    with OpenAIServer(lambda body, n: good()) as server:
        ctx, _ = openai_ctx(tmp_path, server)
        with pytest.raises(ConfigError, match="JUDGE_KEY.*not set in the environment"):
            plugin.start_run(ctx=ctx, resumed=False)
        # A server without auth: no variable needed.
        ctx, _ = openai_ctx(tmp_path, server, api_key_env=None)
        plugin.start_run(ctx=ctx, resumed=False)
        assert len(judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(1,))]))) == 1
        assert server.headers[0]["authorization"] == "Bearer unused"


def test_the_recipe_names_the_variable_never_the_key():
    with pytest.raises(ValidationError, match="NAME of an environment variable"):
        DiagnosisLlmSettings.model_validate({"backend": "openai", "openai": {"api_key_env": KEY}})
    with pytest.raises(ValidationError, match="api_key"):
        DiagnosisLlmSettings.model_validate({"openai": {"api_key": KEY}})


@pytest.mark.parametrize("usage", [("lots", ""), (float("inf"), 0), (-500, 0)])
def test_a_malformed_usage_from_the_endpoint_counts_as_nothing_reported(tmp_path, store, monkeypatch, usage):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    with OpenAIServer(lambda body, n: Response(good().content, usage=usage)) as server:
        ctx, events = openai_ctx(tmp_path, server, store, concurrency=1)
        labels = judge_labels(run_diagnose(ctx, [trajectory(failing_turns=(1,))]))
    assert [lab.label for lab in labels] == ["argument_mismatch"]
    assert store.cache_get("diagnosis_llm.usage", ["run-1"])["run-1"]["tokens"] > 0  # the estimate stays
