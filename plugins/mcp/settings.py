"""Settings of the mcp environment (recipe section ``settings.mcp``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MCPServerSettings(BaseModel):
    """One MCP server: a stdio process started from the recipe (never from model output), or a running
    server's streamable-HTTP endpoint."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="The server's name in logs and errors.")
    command: str | None = Field(
        default=None, min_length=1,
        description="stdio: the executable (node, uvx, ...); `python` means the interpreter running seal-platform.",
    )
    url: str | None = Field(
        default=None, description="streamable HTTP: the server's MCP endpoint (http(s)://host:port/mcp); instead of command."
    )
    headers: dict[str, str] = Field(default_factory=dict, description="streamable HTTP: extra request headers (auth).")
    per_session_state: bool = Field(
        default=False,
        description="streamable HTTP: the server keeps each MCP session's state apart (then episodes need no reset "
        "and run in parallel).",
    )
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables (the SDK passes only a safe few of the parent's: PATH, HOME, ...).",
    )
    cwd: str | None = Field(default=None, description="Working directory of the process; null: the run's.")
    timeout_s: float = Field(default=10.0, gt=0, description="Longest wait for one tool call or listing.")
    startup_timeout_s: float = Field(default=30.0, gt=0, description="Longest wait for the server to start.")
    tool_prefix: str = Field(
        default="", description="Prepended to this server's tool names (for servers whose tool names collide)."
    )

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r}: give command (a stdio server to start) or url (a streamable-HTTP "
                             "endpoint), exactly one of them")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server {self.name!r}: url must start with http:// or https:// (got {self.url!r})")
        return self


class MCPEvolutionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    min_count: int = Field(default=4, ge=1, le=1_000_000, description="Labelled turns needed before a label can switch a change on.")
    min_prevalence: float = Field(default=0.15, ge=0.0, le=1.0, description="Share of labelled turns needed.")


class MCPSettings(BaseModel):
    """The mcp environment: servers, a JSON Lines task file, and the episode limits."""

    model_config = ConfigDict(extra="forbid")

    # Empty by default: every installed plugin's section is validated for every recipe, and only a recipe whose
    # environment is `mcp` needs these (the environment refuses to start without them).
    servers: list[MCPServerSettings] = Field(default_factory=list,
                                             description="The MCP servers whose tools the agent uses (at least one).")
    tasks: str = Field(default="", description="JSON Lines task file (relative paths: from the current directory).")
    isolation: str = Field(
        default="process",
        pattern="^(process|reset)$",
        description="process: a fresh server process per episode; reset: also call the task file's reset tool "
        "at the start of each episode (a server with state outside the process).",
    )
    reset_tool: str | None = Field(default=None, description="The reset tool (isolation: reset).")
    hidden_tools: list[str] = Field(default_factory=list, description="Server tools the agent is not shown (e.g. reset).")
    n_train: int | None = Field(default=None, ge=1, le=1_000_000, description="Use at most this many train tasks; null: all.")
    n_eval: int | None = Field(default=None, ge=1, le=1_000_000, description="Use at most this many eval tasks; null: all.")
    attempts_per_turn: int = Field(default=2, ge=1, le=8, description="Model generations per user turn.")
    max_calls_per_message: int = Field(default=4, ge=1, le=32, description="Tool calls parsed from one message.")
    max_result_chars: int = Field(default=2000, ge=64, le=10_000_000, description="A tool result is clipped to this many characters.")
    max_parallel_episodes: int = Field(
        default=8, ge=1, le=1024,
        description="Server processes (or sessions) alive at once; 1 with a shared-state URL server.",
    )
    max_new_tokens: int | None = Field(default=64, ge=1, le=1_048_576, description="Per generation; null: rollout.max_new_tokens.")
    worked_examples: list[dict] = Field(
        default_factory=list,
        description='Worked turns shown before the task: {"user": ..., "call": {"name", "arguments"}, "result": ...}.',
    )
    evolution: MCPEvolutionSettings = Field(default_factory=MCPEvolutionSettings)

    @model_validator(mode="after")
    def _check(self) -> MCPSettings:
        if self.isolation == "reset" and not self.reset_tool:
            raise ValueError("isolation 'reset' needs reset_tool: the tool that restores the server's state")
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"server names must be unique: {names}")
        shared = [s.name for s in self.servers if s.url is not None and not s.per_session_state]
        if shared and self.isolation != "reset":
            raise ValueError(f"server(s) {', '.join(shared)} run at a URL: the plugin cannot start a fresh process per "
                             "episode there; set isolation: reset with reset_tool (the server's own reset), or "
                             "per_session_state: true on a server that keeps each MCP session's state apart")
        return self

    def shared_state(self) -> bool:
        """A URL server whose state all sessions share: episodes must run one at a time."""
        return any(s.url is not None and not s.per_session_state for s in self.servers)
