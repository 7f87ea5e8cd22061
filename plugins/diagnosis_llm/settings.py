"""Settings of the LLM-judge diagnoser (recipe section ``settings.diagnosis_llm``).

Pure pydantic (and the core's label constants): imported when the plugin loads, so ``seal-platform plugins``
and ``config validate`` stay fast. No secret is ever a setting: the OpenAI-compatible backend names the
*environment variable* that holds the API key (``api_key_env``), so neither the run store nor the config dump
can contain the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from seal_platform.config import Section
from seal_platform.labels import EXCLUDED_LABELS


class OpenAIJudgeSettings(Section):
    """A judge behind any OpenAI-compatible endpoint (a hosted API, ``vllm serve``, ...)."""

    base_url: str | None = Field(
        default=None,
        description="Endpoint base URL, e.g. http://127.0.0.1:8000/v1; null: the openai client's default "
        "(https://api.openai.com/v1, or $OPENAI_BASE_URL).",
    )
    model: str = Field(default="", description="Model name the endpoint serves (required for this backend).")
    api_key_env: str | None = Field(
        default="OPENAI_API_KEY",
        description="Name of the environment variable holding the API key (the key itself is never a setting); "
        "null for a server that needs no key.",
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        default=3, ge=0, le=100, description="Retries of a request that timed out, could not connect, or got 429 / 5xx."
    )
    backoff_s: float = Field(default=1.0, ge=0, description="First retry delay; doubles each retry (with jitter).")
    max_backoff_s: float = Field(default=30.0, ge=0, description="Longest delay between retries.")
    concurrency: int = Field(default=4, ge=1, le=1024, description="Requests in flight at once.")
    structured: Literal["json_schema", "json_object", "none"] = Field(
        default="json_schema",
        description="response_format sent: json_schema constrains decoding to the answer's schema (OpenAI, vLLM); "
        "json_object only to JSON; none sends nothing. A server that rejects it is asked again without.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra JSON fields for every request (server-specific options)."
    )

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or not value.replace("_", "").isalnum()):
            raise ValueError("must be the NAME of an environment variable (letters, digits, _), not the key itself")
        return value


class LocalJudgeSettings(Section):
    """A second local model, served by one of the platform's rollout engines (not the run's own)."""

    engine: str = Field(default="hf", description="A registered rollout engine (see `seal-platform plugins`).")
    settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings sections that differ for the judge's engine, merged over the run's and validated by the "
        "plugin that owns each, e.g. "
        "{policy: {model: /models/Qwen2.5-7B-Instruct}, engine: {hf: {max_batch_size: 4}}}.",
    )


class DiagnosisLlmSettings(Section):
    """Settings of the LLM-judge diagnoser (recipe section ``settings.diagnosis_llm``)."""

    backend: Literal["run", "local", "openai", "none"] = Field(
        default="run",
        description="Judge model: `run` the run's rollout engine (the policy itself); `local` a second local model "
        "(section `local`); `openai` an OpenAI-compatible endpoint (section `openai`); `none` turns the judge off.",
    )
    mode: Literal["judge", "refine"] = Field(
        default="judge",
        description="`judge`: label every failing turn of a failing trajectory from the transcript. `refine`: judge "
        "only turns the heuristic diagnoser marks as failed, choosing between its label and the finer labels that "
        "refine it.",
    )
    heuristic: str | None = Field(
        default=None,
        description="The diagnoser whose labels are refined and used as fallback; null: the recipe's primary "
        "diagnoser, else the one named like the environment (bfcl).",
    )
    pass_labels: list[str] = Field(
        default_factory=lambda: ["pass", "correct_abstention"],
        description="Heuristic labels that mean the turn passed (refine mode does not judge them).",
    )
    skip_labels: list[str] = Field(
        default_factory=lambda: list(EXCLUDED_LABELS),
        description="Heuristic labels about the data or the episode's end, not the agent (never judged).",
    )
    max_turns_per_step: int = Field(
        default=16,
        ge=0,
        le=1_000_000,
        description="Judge at most this many turns per step (0: no limit); judging costs generation time.",
    )
    max_tokens_per_run: int = Field(
        default=0, ge=0, le=10**12,
        description="Token budget of the judge over the whole run, prompt + completion (0: no limit); kept across "
        "resume. Turns left when it is spent get the heuristic label as a recorded fallback.",
    )
    max_new_tokens: int = Field(default=256, ge=16, le=1_048_576)
    temperature: float = Field(default=0.0, ge=0.0)
    max_transcript_chars: int = Field(
        default=6000, ge=500, le=100_000_000, description="The transcript is cut (oldest first) to this."
    )
    batch_size: int = Field(
        default=16, ge=1, le=4096, description="Judge prompts sent to a rollout engine in one request."
    )
    cache: bool = Field(
        default=True, description="Keep judgements in the run store, keyed by content, so no turn is judged twice."
    )
    openai: OpenAIJudgeSettings = Field(default_factory=OpenAIJudgeSettings)
    local: LocalJudgeSettings = Field(default_factory=LocalJudgeSettings)
