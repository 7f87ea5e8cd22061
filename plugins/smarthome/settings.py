"""The ``smarthome`` recipe section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from seal_platform.config import Section
from seal_platform_libs.toolenv.evolution import EvolutionSettings


class SmartHomeSettings(Section):
    """Settings of the smart-home environment (recipe section ``settings.smarthome``)."""

    n_train: int = Field(default=256, ge=1, le=1_000_000, description="Training tasks generated.")
    n_eval: int = Field(default=64, ge=1, le=1_000_000, description="Held-out evaluation tasks generated.")
    seed: int = Field(
        ge=0, le=2**32 - 1, default=1234, description="Seed of task generation (not the run's seed: tasks stay fixed)."
    )
    categories: list[Literal["named", "direct", "paraphrase"]] = Field(
        default=["direct", "paraphrase"], min_length=1,
        description="Request styles, tasks cycling through them: named (the request names the tool), direct (the "
        "tools' own words), paraphrase (everyday words to map onto the allowed values).",
    )
    min_turns: int = Field(default=2, ge=1, le=4, description="Fewest user turns per task.")
    max_turns: int = Field(default=3, ge=1, le=4, description="Most user turns per task.")
    attempts_per_turn: int = Field(
        default=2, ge=1, le=100, description="Model generations allowed per user turn (a failed call may be retried)."
    )
    worked_examples: int = Field(
        default=2, ge=0, le=4,
        description="Turns of the worked dialogue shown before the task (one per tool: set_light, lock_door, "
        "set_thermostat, play_music); 0: none.",
    )
    example_results: bool = Field(
        default=True, description="Show the tool's answer after each worked-example call (false: a shorter prompt)."
    )
    max_new_tokens: int | None = Field(
        default=48, ge=1, le=1_048_576, description="Per generation; null: rollout.max_new_tokens."
    )
    evolution: EvolutionSettings = Field(
        default_factory=lambda: EvolutionSettings(min_count=4, min_evidence=8),
        description="Training-interface evolution, the same changes as BFCL's (schema affordances, recovery "
        "feedback, guidelines); thresholds sized for small CPU batches.",
    )

    @model_validator(mode="after")
    def _turns(self) -> SmartHomeSettings:
        if len(set(self.categories)) != len(self.categories):
            raise ValueError(f"categories must not repeat: {self.categories}")
        if self.min_turns > self.max_turns:
            raise ValueError(f"min_turns ({self.min_turns}) must not exceed max_turns ({self.max_turns})")
        return self
