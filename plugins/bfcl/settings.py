"""The ``bfcl`` recipe section: which tasks, how the episode is run, and how the interface evolves."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from seal_platform.config import Section
from seal_platform_libs.toolenv.evolution import EvolutionSettings

from .categories import CATEGORIES

FORMAT_NAMES = ("hermes", "python")


class BfclSettings(Section):
    """Settings of the BFCL multi-turn environment (recipe section ``settings.bfcl``)."""

    # --- tasks
    categories: list[str] = Field(
        default_factory=lambda: list(CATEGORIES),
        description="BFCL multi-turn categories to use (train and eval).",
    )
    train_split: str = Field(
        default="train", description="Split that `tasks('train')` reads (a split of the bfcl data)."
    )
    eval_split: str = Field(
        default="eval",
        description="Split that `tasks('eval')` reads (a split of the bfcl data: eval, eval_val, eval_test).",
    )
    task_ids: list[str] | None = Field(default=None, description="Use only these task ids (within the split).")
    limit_per_category: int | None = Field(default=None, ge=0, le=100_000, description="First N tasks per category.")

    # --- episode protocol
    tool_call_format: str = Field(default="hermes", description=f"Tool-call format: one of {', '.join(FORMAT_NAMES)}.")
    compact_tools: bool = Field(
        default=False,
        description="Render tool docs as compact JSON (fewer prompt tokens: CPU prefill dominates rollout time).",
    )
    system_preamble: str = Field(default="", description="Text placed before the tool block of the system prompt.")
    wrap_tool_responses: bool = Field(
        default=True,
        description="hermes: put each tool result inside <tool_response> tags in the message content. The grpo "
        "engines drop this wrapper when the model's chat template wraps tool messages itself (Qwen2.5's), so a "
        "result is wrapped once either way; false leaves the wrapping to the template alone.",
    )
    include_response_schema: bool = Field(default=False, description="Show each tool's response schema too.")
    max_steps: int = Field(
        default=20, ge=1, le=1000, description="Model generations allowed (reference: 20 per dialogue)."
    )
    step_limit_scope: Literal["dialogue", "turn"] = Field(
        default="dialogue",
        description="Whether max_steps counts per dialogue (reference) or per user turn (official BFCL).",
    )
    max_context_tokens: int = Field(
        default=16384, ge=256, le=10_485_760, description="Episode ends when the prompt reaches this."
    )
    max_observation_tokens: int = Field(
        default=4096, ge=16, le=10_485_760, description="Tool observations are clipped to this."
    )
    max_new_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_048_576,
        description="Cap on new tokens per generation (default: rollout.max_new_tokens).",
    )

    # --- tool execution (worker processes)
    executor_workers: int = Field(default=2, ge=1, le=1024, description="Tool-execution worker processes.")
    call_timeout_s: float = Field(default=10.0, gt=0, description="Time limit of one tool call.")
    episode_timeout_s: float = Field(default=600.0, gt=0, description="Time limit of one episode's tool execution.")

    # --- interface evolution (training only)
    evolution: EvolutionSettings = Field(default_factory=EvolutionSettings)

    @field_validator("categories")
    @classmethod
    def _known_categories(cls, value: list[str]) -> list[str]:
        unknown = [c for c in value if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; choose from {', '.join(CATEGORIES)}")
        if not value:
            raise ValueError(f"at least one category is needed; choose from {', '.join(CATEGORIES)}")
        return value

    @field_validator("train_split", "eval_split")
    @classmethod
    def _known_split(cls, value: str) -> str:
        # The split names the bfcl data has (data.SPLITS, the one list): imported here, not when the plugin loads.
        from .data import SPLITS

        if value not in SPLITS:
            raise ValueError(f"the bfcl data has no split {value!r}; choose from {', '.join(SPLITS)}")
        return value

    def data_split(self, split: str) -> str:
        """The split of the bfcl data that the environment's ``tasks(split)`` reads: ``train`` and ``eval`` are
        ``train_split`` and ``eval_split``, any other name is itself."""
        return {"train": self.train_split, "eval": self.eval_split}.get(split, split)

    @field_validator("tool_call_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMAT_NAMES:
            raise ValueError(f"unknown tool-call format {value!r}; choose from {', '.join(FORMAT_NAMES)}")
        return value
