"""Judge backends: where a judge prompt goes and how its answer comes back.

* :class:`EngineBackend` - any rollout engine (the run's own, or a second local model built through the
  platform's registered engines by :func:`build_local_engine`). Engines that can constrain decoding to a
  JSON schema (the vllm engine) get the answer's schema in ``SamplingParams.json_schema``.
* :class:`OpenAIBackend` - any OpenAI-compatible endpoint through the ``openai`` client: per-request
  timeout, retries with exponential backoff (and jitter) on timeouts, connection errors, 429 and 5xx, a
  concurrency limit, and ``response_format`` for constrained decoding.

A backend answers a list of :class:`Query` with one :class:`Reply` each, in order, and never raises for a
failed request: the reply carries the error instead, so one bad request costs one turn, not the step.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from seal_platform.config import deep_merge
from seal_platform.errors import ConfigError
from seal_platform.types import Message, SamplingParams

from .settings import DiagnosisLlmSettings, LocalJudgeSettings, OpenAIJudgeSettings

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.context import RunContext


@dataclass
class Query:
    """One judge request: the conversation and the JSON schema its answer must follow."""

    messages: list[Message]
    schema: dict[str, Any]


@dataclass
class Reply:
    """What came back for one query: the answer text (None when the request failed) and its cost."""

    text: str | None
    tokens: int = 0
    error: str | None = None
    retries: list[str] = field(default_factory=list)


def token_count(value: Any) -> int:
    """A token count read from untrusted data (an endpoint's usage, the store's cache): a whole number > 0;
    anything else (text, NaN, an infinity, a negative number) counts as 0."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class EngineBackend:
    """A judge served by a rollout engine (``generate``: conversations in, generations out)."""

    def __init__(self, engine: Any, settings: DiagnosisLlmSettings, identity: str, owned: bool = False):
        self.engine = engine
        self.settings = settings
        self.identity = identity
        self.owned = owned  # built for the judge (a second local model): closed with the backend

    def ask(self, queries: list[Query]) -> list[Reply]:
        replies: list[Reply | None] = [None] * len(queries)
        groups: dict[str, list[int]] = {}
        for index, query in enumerate(queries):  # one generate call per schema (refine mode varies the labels)
            groups.setdefault(json.dumps(query.schema, sort_keys=True), []).append(index)
        for indices in groups.values():
            sampling = SamplingParams(
                temperature=self.settings.temperature, max_new_tokens=self.settings.max_new_tokens,
                json_schema=queries[indices[0]].schema,
            )
            for offset in range(0, len(indices), self.settings.batch_size):
                batch = indices[offset : offset + self.settings.batch_size]
                try:
                    generations = self.engine.generate([queries[i].messages for i in batch], sampling)
                    if len(generations) != len(batch):
                        raise RuntimeError(f"the engine returned {len(generations)} answers for {len(batch)} prompts")
                except Exception as exc:  # the judge is advisory: a failing engine costs these turns only
                    for i in batch:
                        replies[i] = Reply(None, error=f"{type(exc).__name__}: {exc}"[:500])
                    continue
                for i, generation in zip(batch, generations):
                    text = getattr(generation, "text", None)
                    tokens = int(getattr(generation, "prompt_tokens", 0) or 0) + len(
                        getattr(generation, "token_ids", ()) or ()
                    )
                    replies[i] = Reply(text if isinstance(text, str) else None, tokens=tokens,
                                       error=None if isinstance(text, str) else "the engine returned no text")
        return [r if r is not None else Reply(None, error="not answered") for r in replies]

    def close(self) -> None:
        if self.owned and hasattr(self.engine, "close"):
            self.engine.close()


# --- OpenAI-compatible endpoints -------------------------------------------------------------------------


def api_key(settings: OpenAIJudgeSettings) -> str:
    """The API key from the environment variable the recipe names ("unused" when it names none)."""
    if settings.api_key_env is None:
        return "unused"  # the client insists on a non-empty key; servers without auth ignore it
    value = os.environ.get(settings.api_key_env)
    if not value:
        raise ConfigError(
            f"settings.diagnosis_llm.openai.api_key_env names {settings.api_key_env!r}, which is not set in the "
            f"environment: export {settings.api_key_env}=<your key>, or set api_key_env: null for a server that "
            "needs no key."
        )
    return value


_STRUCTURE_WORDS = ("response_format", "json_schema", "structured", "guided", "grammar", "json_object")


class OpenAIBackend:
    """A judge behind an OpenAI-compatible chat-completions endpoint."""

    def __init__(self, settings: DiagnosisLlmSettings, sleep: Callable[[float], None] = time.sleep):
        import openai

        self.settings = settings
        self.options = options = settings.openai
        if not options.model:
            raise ConfigError("settings.diagnosis_llm.openai.model is empty: name the model the endpoint serves.")
        self._openai = openai
        # Retries are ours (below), so that each one is counted and reported.
        self.client = openai.OpenAI(
            api_key=api_key(options), base_url=options.base_url, timeout=options.timeout_s, max_retries=0
        )
        self.identity = f"openai:{self.client.base_url}:{options.model}"
        self.structured = options.structured
        self.notes: list[str] = []  # things worth an event (the server refused structured output, say)
        self._lock = threading.Lock()
        self._sleep = sleep

    def ask(self, queries: list[Query]) -> list[Reply]:
        if len(queries) <= 1 or self.options.concurrency == 1:
            return [self._ask_one(q) for q in queries]
        with ThreadPoolExecutor(
            max_workers=min(self.options.concurrency, len(queries)), thread_name_prefix="judge"
        ) as pool:
            return list(pool.map(self._ask_one, queries))

    def _response_format(self, query: Query) -> dict[str, Any] | None:
        if self.structured == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "judgement", "schema": query.schema, "strict": True}}
        if self.structured == "json_object":
            return {"type": "json_object"}
        return None

    def _ask_one(self, query: Query) -> Reply:
        o, errors = self._openai, []
        retryable = (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError)
        attempt = 0
        while True:
            response_format = self._response_format(query)
            kwargs: dict[str, Any] = dict(
                model=self.options.model,
                messages=[m.chat() for m in query.messages],
                temperature=self.settings.temperature,
                max_tokens=self.settings.max_new_tokens,
            )
            if response_format is not None:
                kwargs["response_format"] = response_format
            if self.options.extra_body:
                kwargs["extra_body"] = dict(self.options.extra_body)
            try:
                response = self.client.chat.completions.create(**kwargs)
            except retryable as exc:
                errors.append(_describe(exc))
                if attempt >= self.options.max_retries:
                    return Reply(
                        None, error=f"gave up after {attempt + 1} attempt(s): {errors[-1]}", retries=errors[:-1]
                    )
                self._sleep(self._delay(attempt, exc))
                attempt += 1
                continue
            except o.BadRequestError as exc:
                if response_format is not None and any(w in str(exc).lower() for w in _STRUCTURE_WORDS):
                    self._drop_structure(exc)
                    continue
                return Reply(None, error=_describe(exc), retries=errors)
            except Exception as exc:  # auth errors, 404s, malformed responses: no point in retrying
                return Reply(None, error=_describe(exc), retries=errors)
            return _reply(response, errors)

    def _delay(self, attempt: int, exc: Exception) -> float:
        delay = min(self.options.max_backoff_s, self.options.backoff_s * 2**attempt)
        response = getattr(exc, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        try:
            if header is not None:
                delay = min(self.options.max_backoff_s, max(delay, float(header)))
        except ValueError:
            pass
        return delay * (0.5 + random.random() / 2)

    def _drop_structure(self, exc: Exception) -> None:
        with self._lock:
            if self.structured != "none":
                self.notes.append(
                    f"the endpoint refused response_format={self.structured} ({_describe(exc)}); judging without "
                    "constrained decoding from now on"
                )
                self.structured = "none"

    def close(self) -> None:
        self.client.close()


def _reply(response: Any, errors: list[str]) -> Reply:
    try:
        choice = response.choices[0]
        text = choice.message.content
        refusal = getattr(choice.message, "refusal", None)
    except (AttributeError, IndexError, TypeError):
        return Reply(None, error="the endpoint's response has no message", retries=errors)
    usage = getattr(response, "usage", None)
    tokens = token_count(getattr(usage, "total_tokens", 0))
    if text is None:
        return Reply(
            None,
            tokens=tokens,
            error=f"the model refused: {refusal}"[:500] if refusal else "no content",
            retries=errors,
        )
    return Reply(text, tokens=tokens, retries=errors)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    text = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {exc}"
    return text[:300]


# --- a second local model through the platform's own engines -----------------------------------------


def local_identity(settings: LocalJudgeSettings) -> str:
    digest = hashlib.sha256(json.dumps(settings.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
    return f"local:{settings.engine}:{digest}"


def local_context(ctx: RunContext, settings: LocalJudgeSettings) -> RunContext:
    """A run context for the judge's engine: the run's, with the judge's engine and settings sections."""
    from seal_platform.context import RunContext

    sections = dict(ctx.settings)
    for name, overrides in settings.settings.items():
        base = ctx.settings.get(name)
        if base is None:
            known = ", ".join(sorted(ctx.settings)) or "none"
            raise ConfigError(
                f"settings.diagnosis_llm.local.settings.{name}: no loaded plugin owns a settings section {name!r} "
                f"(sections: {known})."
            )
        try:
            sections[name] = type(base).model_validate(deep_merge(base.model_dump(), overrides))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"settings.diagnosis_llm.local.settings.{name}: {problems}") from None
    rollout = ctx.config.rollout.model_copy(update={"engine": settings.engine})
    config = ctx.config.model_copy(update={"rollout": rollout})
    return RunContext(
        config=config, run_id=ctx.run_id, run_dir=ctx.run_dir / "diagnosis_llm", settings=sections,
        store=ctx.store, shared={}, executor=ctx.executor, cluster=ctx.cluster,
    )


def build_local_engine(ctx: RunContext, settings: LocalJudgeSettings) -> Any:
    """The judge's own engine, built by the factory of the rollout engine the settings name, in a context
    of its own (its own ``shared``: it never sees or replaces the policy)."""
    from seal_platform.plugins import make_plugin_manager

    child = local_context(ctx, settings)
    host = make_plugin_manager(allow=ctx.config.plugins.allow, block=ctx.config.plugins.block)
    if problem := host.missing("engine", settings.engine):
        raise ConfigError(f"settings.diagnosis_llm.local.engine: {problem[0]} ({problem[1]}).")
    _, spec = host.engines()[settings.engine]
    return spec.factory(child)
