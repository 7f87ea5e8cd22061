"""Settings of the mcp environment (recipe section ``settings.mcp``)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from seal_platform.config import Section

#: Replaced in a stdio server's command, args, env values and cwd by the episode's own fresh folder.
EPISODE_DIR = "{episode_dir}"


class ToolCallSetting(Section):
    """A tool call the recipe makes on a server (set-up, tear-down), never shown to the agent."""

    name: str = Field(min_length=1, description="The server's tool (its own name, without tool_prefix).")
    arguments: dict[str, Any] = Field(default_factory=dict)


class MCPServerSettings(Section):
    """One MCP server: a stdio process started from the recipe (never from model output), or a running
    server's streamable-HTTP endpoint."""

    name: str = Field(min_length=1, description="The server's name in logs and errors.")
    command: str | None = Field(
        default=None, min_length=1,
        description="stdio: the executable (node, uvx, ...); `python` means the interpreter running seal-platform.",
    )
    url: str | None = Field(
        default=None,
        description="streamable HTTP: the server's MCP endpoint (http(s)://host:port/mcp); instead of command.",
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
    seed_files: list[str] = Field(
        default_factory=list,
        description="stdio: files or folders copied into the episode's own fresh folder ({episode_dir} in command, "
        "args, env or cwd) before each start of the server (relative paths: from the current directory).",
    )
    setup: list[ToolCallSetting] = Field(
        default_factory=list, description="Tool calls made at the start of every episode (after the reset), unseen by "
        "the agent; one that fails ends the episode as an infrastructure failure.",
    )
    teardown: list[ToolCallSetting] = Field(
        default_factory=list, description="Tool calls made at the end of every episode (failures are ignored).",
    )
    error_pattern: str | None = Field(
        default=None,
        description="A regular expression: a tool result whose text matches it (re.search) counts as a failed call, "
        "for servers that report errors as plain text (e.g. '^(Error|Database error):').",
    )

    @field_validator("error_pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"error_pattern {value!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r}: give command (a stdio server to start) or url (a streamable-HTTP "
                             "endpoint), exactly one of them")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server {self.name!r}: url must start with http:// or https:// (got {self.url!r})")
        if self.url is not None and self.seed_files:
            raise ValueError(f"server {self.name!r}: seed_files are copied into the folder of a server the plugin "
                             "starts (command); a url server keeps its own state (use setup calls or a reset tool)")
        if self.seed_files and not self.uses_episode_dir():
            raise ValueError(
                f"server {self.name!r}: seed_files are copied into {EPISODE_DIR}, which its command, args, "
                f"env and cwd never name; e.g. args: [--db-path, \"{EPISODE_DIR}/shop.db\"]"
            )
        return self

    def uses_episode_dir(self) -> bool:
        """Whether each start of this server gets its own fresh folder (``{episode_dir}`` is named somewhere)."""
        texts = [self.command or "", self.cwd or "", *self.args, *self.env.values()]
        return any(EPISODE_DIR in text for text in texts)

    def in_folder(self, folder: str) -> MCPServerSettings:
        """This server with ``{episode_dir}`` replaced by ``folder`` (command, args, env values, cwd)."""
        def sub(text: str) -> str:
            return text.replace(EPISODE_DIR, folder)

        return self.model_copy(update={"command": sub(self.command) if self.command else self.command,
                                       "args": [sub(a) for a in self.args],
                                       "env": {k: sub(v) for k, v in self.env.items()},
                                       "cwd": sub(self.cwd) if self.cwd else self.cwd})

    def is_error_text(self, text: str) -> bool:
        """Whether a result's text is an error by this server's ``error_pattern``."""
        return self.error_pattern is not None and re.search(self.error_pattern, text) is not None


class MCPEvolutionSettings(Section):
    enabled: bool = True
    min_count: int = Field(
        default=4, ge=1, le=1_000_000, description="Labelled turns needed before a label can switch a change on."
    )
    min_prevalence: float = Field(default=0.15, ge=0.0, le=1.0, description="Share of labelled turns needed.")


class MCPSettings(Section):
    """The mcp environment: servers, a JSON Lines task file, and the episode limits."""

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
    reset_arguments: dict[str, Any] = Field(default_factory=dict, description="The reset tool's arguments.")
    hidden_tools: list[str] = Field(
        default_factory=list, description="Server tools the agent is not shown (e.g. reset)."
    )
    n_train: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Use at most this many train tasks; null: all."
    )
    n_eval: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Use at most this many eval tasks; null: all."
    )
    attempts_per_turn: int = Field(default=2, ge=1, le=8, description="Model generations per user turn.")
    max_calls_per_message: int = Field(default=4, ge=1, le=32, description="Tool calls parsed from one message.")
    max_result_chars: int = Field(
        default=2000, ge=64, le=10_000_000, description="A tool result is clipped to this many characters."
    )
    max_parallel_episodes: int = Field(
        default=8, ge=1, le=1024,
        description="Server processes (or sessions) alive at once; 1 with a shared-state URL server.",
    )
    max_new_tokens: int | None = Field(
        default=64, ge=1, le=1_048_576, description="Per generation; null: rollout.max_new_tokens."
    )
    system_prompt: str = Field(
        default="", description="Text put before the tool docs in the system prompt (what the tools are for, "
        "conventions of the server); a task's own `context` follows the tool docs.",
    )
    worked_examples: list[dict] = Field(
        default_factory=list,
        description='Worked turns shown before the task: {"user": ..., "call": {"name", "arguments"}, "result": ..., '
        '"answer": ...} (result and answer optional).',
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
