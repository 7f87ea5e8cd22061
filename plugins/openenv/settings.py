"""Settings of the openenv environment (recipe section ``settings.openenv``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from seal_platform.config import Section

#: The default of ``probe_timeout_s``: how long the machine check waits for the server (url) before a run.
PROBE_TIMEOUT_S = 2.0


class OpenEnvServerSettings(Section):
    """A local OpenEnv server the plugin starts itself (from the recipe, never from model output)."""

    command: str = Field(
        min_length=1, description="The executable; `python` means the interpreter running seal-platform."
    )
    args: list[str] = Field(
        default_factory=list,
        description="Its arguments; `{port}` is replaced by a free local port, and the plugin talks to "
        "http://127.0.0.1:{port}.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the process.")
    cwd: str | None = Field(default=None, description="Working directory of the process; null: the run's.")
    startup_timeout_s: float = Field(default=30.0, gt=0, description="Longest wait for GET /health to answer.")


class OpenEnvEvolutionSettings(Section):
    enabled: bool = True
    min_count: int = Field(
        default=4, ge=1, le=1_000_000, description="Labelled turns needed before a label can switch a change on."
    )
    min_prevalence: float = Field(default=0.15, ge=0.0, le=1.0, description="Share of labelled turns needed.")


class OpenEnvSettings(Section):
    """The openenv environment: where the server is, how to talk to it, the tasks, and the episode limits."""

    # Empty by default: every installed plugin's section is validated for every recipe; only a recipe whose
    # environment is `openenv` needs a url or a server (the plugin's check_config refuses one with neither).
    url: str = Field(default="", description="Base URL of a running OpenEnv server (http://host:port).")
    server: OpenEnvServerSettings | None = Field(
        default=None, description="Start this local server instead (then leave url empty)."
    )
    transport: str = Field(
        default="ws",
        pattern="^(ws|http)$",
        description="ws: one WebSocket session (/ws) per episode, the openenv-core protocol, episodes in parallel; "
        "http: POST /reset, POST /step, GET /state on a server that keeps one environment (older servers), "
        "one episode at a time.",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Longest wait for one reset, step or state answer.")
    probe_timeout_s: float = Field(
        default=PROBE_TIMEOUT_S,
        gt=0,
        le=3600,
        description="Longest wait of the check before a run (`run`, `eval`) for each of the url server's GET /health "
        "(resolving its host name included) and GET /schema; timeout_s when that is less. A server slower than "
        "this is refused before anything starts.",
    )
    action_schema: dict[str, Any] | None = Field(
        default=None, description="The action's JSON schema; null: read from GET /schema (its `action`)."
    )
    action_name: str = Field(default="act", min_length=1, description="The tool name the agent calls to act.")
    action_description: str = Field(default="", description="What an action does; empty: the schema's description.")
    observation_field: str | None = Field(
        default=None,
        description="Show only this observation field (as text) to the agent; null: the whole observation as JSON.",
    )
    tasks: str | None = Field(
        default=None,
        description='JSON Lines task file: {"id", "split", "category", "reset": {...}}; null: seeds (n_train, n_eval).',
    )
    n_train: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Use at most this many train tasks; without a task file: seeds 0..n-1 (null: 64).",
    )
    n_eval: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Use at most this many eval tasks; without a task file: seeds 100000.. (null: 16).",
    )
    max_steps: int = Field(default=8, ge=1, le=256, description="Agent messages per episode.")
    reward_mode: str = Field(
        default="final",
        pattern="^(final|per_step)$",
        description="final: the last step's reward decides the episode (per-turn labels from the heuristic "
        "diagnoser); per_step: every step's own reward is that turn's verdict.",
    )
    success_threshold: float = Field(default=1.0, description="The episode passes when its reward is at least this.")
    step_threshold: float = Field(default=1e-9, description="per_step: a step passes when its reward is at least this.")
    binary_reward: bool = Field(
        default=True,
        description="true: the trajectory's reward is 1 when the episode passed, else 0; false: the environment's "
        "reward (last step's, or the sum in per_step mode).",
    )
    max_observation_chars: int = Field(
        default=2000, ge=64, le=10_000_000, description="An observation is clipped to this many characters."
    )
    max_parallel_episodes: int = Field(default=8, ge=1, le=1024, description="WebSocket sessions open at once (ws).")
    max_sessions: int | None = Field(
        default=None, ge=1, le=1024,
        description="ws: the server's limit of sessions at once (openenv-core's max_concurrent_envs, 1 unless its "
        "app says otherwise); null: found out when the run starts, by opening up to max_parallel_episodes sessions "
        "and reading the limit from the server's refusal. Episodes never open more.",
    )
    max_new_tokens: int | None = Field(
        default=64, ge=1, le=1_048_576, description="Per generation; null: rollout.max_new_tokens."
    )
    system_prompt: str = Field(default="", description="Text put before the action doc in the system prompt.")
    worked_examples: list[dict] = Field(
        default_factory=list,
        description='Worked steps shown before the task: {"observation": ..., "action": {...}, "result": ...}.',
    )
    evolution: OpenEnvEvolutionSettings = Field(default_factory=OpenEnvEvolutionSettings)

    @model_validator(mode="after")
    def _check(self) -> OpenEnvSettings:
        if self.url and self.server is not None:
            raise ValueError("give either url (a running server) or server (one to start), not both")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {self.url!r})")
        return self
