"""Settings section ``reinforce`` (pydantic only: the plugin module imports it when it loads)."""

from __future__ import annotations

from pydantic import Field

from seal_platform.config import Section


class ReinforceSettings(Section):
    lr: float = Field(default=1e-5, gt=0.0, description="AdamW learning rate.")
    baseline_init: float = Field(
        default=0.5, description="The baseline before the first batch (smarthome's rewards are 0 or 1: the middle).")
    baseline_decay: float = Field(
        default=0.9, ge=0.0, le=1.0,
        description="b = decay * b + (1 - decay) * mean reward, after each batch (0: the last batch's mean).")
    grad_clip: float | None = Field(default=1.0, gt=0.0, description="Clip the global grad norm; null: off.")
    train_layers: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Train only the last N decoder layers (the runtime's train_top_layers); null: every weight.")
